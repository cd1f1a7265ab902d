"""``--duplicate_negatives mask``: in-batch candidates that are copies of an anchor's own texts leave its denominator.

The references are written here from the equations (SimCSE eq. 5; WhitenedCSE's per-positive terms) with the masked
logits removed, and the rule from the flag's help, on texts as strings: never from csekit's mask.
"""

import math

import pytest
import torch

from conftest import save_tiny_backbone
from csekit.modeling.losses import false_negative_mask, info_nce_loss, multi_positive_info_nce_terms
from csekit.trainers.collators import ContrastiveCollator

# anchors, positives, hard negatives of 6 rows; duplicates of each kind the rule names
ANCHORS = ["a", "b", "a", "c", "d", "e"]  # rows 0 and 2: one premise, two hypotheses
POSITIVES = ["p", "q", "r", "a", "s", "p"]  # row 3's positive is anchor 0's text; row 5's is row 0's positive
HARD = ["n", "a", "m", "o", "q", "x"]  # row 1's hard negative is anchor 0's text; row 4's is row 1's positive


def masked(i: int, kind: str, j: int) -> bool:
    """The rule, on strings: candidate (kind, j) leaves anchor i's denominator."""
    own = {ANCHORS[i], POSITIVES[i]}
    if kind == "positive":
        return j != i and (POSITIVES[j] in own or ANCHORS[j] == ANCHORS[i])
    return HARD[j] in own


def identities(*columns) -> torch.Tensor:
    names = {text: index for index, text in enumerate(sorted({t for column in columns for t in column}))}
    return torch.tensor([[names[column[row]] for column in columns] for row in range(len(columns[0]))])


def test_the_mask_follows_the_rule():
    mask = false_negative_mask(identities(ANCHORS, POSITIVES, HARD), identities(ANCHORS, POSITIVES, HARD),
                               hard_negatives=True)
    rows = len(ANCHORS)
    expected = [[masked(i, "positive", j) for j in range(rows)] + [masked(i, "hard", j) for j in range(rows)]
                for i in range(rows)]
    assert mask.tolist() == expected
    assert 0 < int(mask.sum()) < mask.numel() and not mask.diagonal().any()


@pytest.mark.parametrize("hard_negative_weight", [0.0, 1.5])
def test_masked_info_nce_equals_the_equation_without_those_logits(hard_negative_weight):
    torch.manual_seed(0)
    rows, tau = len(ANCHORS), 0.05
    anchors, positives, hard = (torch.randn(rows, 8, dtype=torch.float64) for _ in range(3))
    ids = identities(ANCHORS, POSITIVES, HARD)
    loss = info_nce_loss(anchors, positives, hard, temperature=tau, hard_negative_weight=hard_negative_weight,
                         candidate_mask=false_negative_mask(ids, ids, hard_negatives=True))

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    terms = []
    for i in range(rows):
        logits = [cos(anchors[i], positives[j]) / tau for j in range(rows) if not masked(i, "positive", j)]
        logits += [cos(anchors[i], hard[j]) / tau + (hard_negative_weight if j == i else 0.0)
                   for j in range(rows) if not masked(i, "hard", j)]
        terms.append(-cos(anchors[i], positives[i]) / tau + math.log(sum(math.exp(x) for x in logits)))
    assert float(loss) == pytest.approx(sum(terms) / rows, rel=1e-12)
    assert float(loss) != pytest.approx(float(info_nce_loss(anchors, positives, hard, temperature=tau,
                                                            hard_negative_weight=hard_negative_weight)), rel=1e-6)


HARD_2 = ["r", "z", "b", "y", "w", "p"]  # a second negative a row: row 0's is anchor 2's positive; row 2's anchor 1


@pytest.mark.parametrize("hard_negative_weight", [0.0, 1.5])
def test_k_negatives_a_row_are_masked_and_weighted_in_the_losss_order(hard_negative_weight):
    """Rows of (anchor, positive, 2 hard negatives): every row's first negative, then every row's second, follow the
    positives in each anchor's denominator; each is masked by the rule and each own one gets the weight."""
    torch.manual_seed(0)
    rows, tau = len(ANCHORS), 0.05
    anchors, positives = (torch.randn(rows, 8, dtype=torch.float64) for _ in range(2))
    negatives = torch.randn(rows, 2, 8, dtype=torch.float64)
    ids = identities(ANCHORS, POSITIVES, HARD, HARD_2)
    mask = false_negative_mask(ids, ids, hard_negatives=True)
    loss = info_nce_loss(anchors, positives, negatives, temperature=tau, hard_negative_weight=hard_negative_weight,
                         candidate_mask=mask)

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    terms = []
    for i in range(rows):
        logits = [cos(anchors[i], positives[j]) / tau for j in range(rows) if not masked(i, "positive", j)]
        for column, texts in enumerate((HARD, HARD_2)):
            logits += [cos(anchors[i], negatives[j, column]) / tau + (hard_negative_weight if j == i else 0.0)
                       for j in range(rows) if texts[j] not in {ANCHORS[i], POSITIVES[i]}]
        terms.append(-cos(anchors[i], positives[i]) / tau + math.log(sum(math.exp(x) for x in logits)))
    assert float(loss) == pytest.approx(sum(terms) / rows, rel=1e-12)
    # the second negatives masked: row 2's (anchor 1's text), row 0's (anchor 2's positive), row 5's (positive p)
    assert mask[:, 2 * rows:].nonzero().tolist() == [[0, 5], [1, 2], [2, 0], [5, 5]]


def test_masked_multi_positive_terms_equal_the_equation_without_those_logits():
    """WhitenedCSE (unsupervised: one text per row): the copies of a sentence leave every positive's denominator."""
    torch.manual_seed(1)
    texts = ["x", "y", "x", "z", "y"]
    rows, positives_per_anchor, tau = len(texts), 2, 0.1
    anchors = torch.randn(rows, 8, dtype=torch.float64)
    positives = torch.randn(rows, positives_per_anchor, 8, dtype=torch.float64)
    ids = identities(texts)
    terms = multi_positive_info_nce_terms(anchors, positives, temperature=tau,
                                          candidate_mask=false_negative_mask(ids, ids))

    def cos(u, v):
        return float(u @ v / (u.norm() * v.norm()))

    for i in range(rows):
        for p in range(positives_per_anchor):
            kept = [j for j in range(rows) if j == i or texts[j] != texts[i]]
            expected = (-cos(anchors[i], positives[i, p]) / tau
                        + math.log(sum(math.exp(cos(anchors[i], positives[j, p]) / tau) for j in kept)))
            assert float(terms[i, p]) == pytest.approx(expected, rel=1e-6)  # the terms compute in float32


def test_the_collator_gives_equal_texts_equal_ids_whatever_the_augmentation(tokenizer):
    def repeat_first_word(sentences, view, randoms):
        return [f"{s.split()[0]} {s}" for s in sentences]

    collator = ContrastiveCollator(tokenizer, max_length=16, augment=repeat_first_word, text_ids=True)
    rows = [{"sent0": text, "example_index": index} for index, text in enumerate(["a cat", "a dog", "a cat"])]
    ids = collator(rows)["text_ids"]
    assert ids.shape == (3, 1) and ids[0, 0] == ids[2, 0] != ids[1, 0]
    assert "text_ids" not in ContrastiveCollator(tokenizer, max_length=16)(rows)


def test_the_trainer_masks_and_logs_the_masked_pairs_per_step(tokenizer, tmp_path):
    from csekit.methods import get_method

    method = get_method("simcse")
    recipe = method.recipe_module.RECIPE
    backbone = save_tiny_backbone(tmp_path / "backbone", tokenizer, dropout=0.0)
    argv = ["--model_name_or_path", str(backbone), "--output_dir", str(tmp_path / "out"), "--report_to", "none",
            "--per_device_train_batch_size", "6", "--duplicate_negatives", "mask", "--eval_strategy", "no",
            "--load_best_model_at_end", "false", *method.test_flags]
    model_args, data_args, training_args, _ = recipe.parse(argv)
    model = recipe.build_model(str(backbone), model_args)
    collator = recipe.collator(tokenizer, model, data_args, None)
    collator.text_ids = True  # what run_recipe sets for --duplicate_negatives mask
    trainer = recipe.trainer_class(model=model, args=training_args, data_collator=collator)
    trainer.current_gradient_accumulation_steps = 1
    rows = [{"sent0": a, "sent1": p, "hard_neg": n, "example_index": i}
            for i, (a, p, n) in enumerate(zip(ANCHORS, POSITIVES, HARD))]
    for _ in range(2):  # two steps in one logging window: the log gives the count per step
        trainer.training_step(trainer.model, collator(rows))
    expected = sum(masked(i, kind, j) for i in range(6) for kind in ("positive", "hard") for j in range(6))
    trainer.log({"loss": 1.0})
    assert trainer.state.log_history[-1]["masked_pairs"] == expected
