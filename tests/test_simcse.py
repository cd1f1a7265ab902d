"""SimCSE's trainer: its loss is the paper's objective on the model's views (Gao et al., 2021, eq. 1 and eq. 5)."""

import math

import pytest
import torch
from transformers import TrainingArguments

from conftest import loss_settings, tiny_bert_config
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.trainers import ContrastiveCollator, SimCSETrainer

SENTENCES = ["a man plays a guitar .", "two dogs run in the park .", "a woman slices an onion .",
             "the chef is cooking pasta .", "a child rides a red bike .", "three boys kick a ball ."]


def paper_objective(views: torch.Tensor, temperature: float, weight: float) -> float:
    """Eq. 1 (two views) or eq. 5 (views 2 onward as hard negatives, every row's in each denominator), written out
    per anchor; the hard-negative weight is added to the anchor's own hard-negative logits after the temperature, as
    the authors' ``cl_forward`` does."""
    def cos(a, b):
        return float(torch.dot(a, b) / (a.norm() * b.norm()))

    total, batch = 0.0, views.shape[0]
    for i in range(batch):
        anchor = views[i, 0]
        terms = [math.exp(cos(anchor, views[j, 1]) / temperature) for j in range(batch)]
        terms += [math.exp(cos(anchor, views[j, c]) / temperature + (weight if i == j else 0.0))
                  for c in range(2, views.shape[1]) for j in range(batch)]
        total += -math.log(math.exp(cos(anchor, views[i, 1]) / temperature) / sum(terms))
    return total / batch


@pytest.mark.parametrize("settings", loss_settings("simcse"))
@pytest.mark.parametrize("columns", [("sent0",), ("sent0", "sent1", "hard_neg"),
                                     ("sent0", "sent1", "hard_neg_1", "hard_neg_2", "hard_neg_3")])
def test_trainer_loss_is_the_papers_objective_on_the_models_views(tokenizer, tmp_path, columns, settings):
    """Unsupervised, triplets, and n-tuples of 3 hard negatives a row (every one a candidate)."""
    torch.manual_seed(0)
    config = SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls", **settings)
    model = SimCSEModel(config).train()  # dropout on: the two views of a sentence differ
    features = [{name: SENTENCES[(i + c) % len(SENTENCES)] for c, name in enumerate(columns)}
                for i in range(len(SENTENCES))]
    batch = ContrastiveCollator(tokenizer, max_length=16)(features)
    trainer = SimCSETrainer(model=model, args=TrainingArguments(output_dir=str(tmp_path), report_to="none",
                                                                use_cpu=True))
    with torch.no_grad():
        outputs = model(**batch)
        losses = trainer.compute_losses(model, outputs, batch)
    views = outputs.embeddings
    assert views.shape[1] == max(2, len(columns))
    expected = paper_objective(views.double(), temperature=config.temperature, weight=config.hard_negative_weight)
    assert losses["loss"].item() == pytest.approx(expected, rel=1e-5)
    assert losses["contrastive"] is losses["loss"]
