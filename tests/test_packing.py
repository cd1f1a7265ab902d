"""Padding-free training (``modeling/packing.py``): a packed batch gives the padded batch's loss and gradients.

The oracle is transformers' own padded forward (stock ``BertModel``/``RobertaModel`` with SDPA and the attention
mask): the same model and tokens run once padded, then packed, with dropout 0 so both are deterministic, in training
mode so every method's training forward runs (WhitenedCSE's batch whitening, CMLM-CSE's auxiliary MLM).
"""

import json
import logging

import pytest
import torch

from conftest import fixed_masks, tiny_bert_config, tiny_roberta_config
from csekit.modeling import CMLMCSEConfig, SimCSEConfig, SimCSEModel, WhitenedCSEConfig, WhitenedCSEModel, packing
from csekit.modeling.losses import info_nce_loss, multi_positive_info_nce_terms, multi_positive_l1_loss
from csekit.modeling.modeling_cmlm_cse import CMLMCSEForPreTraining
from csekit.trainers import CMLMCSECollator, ContrastiveCollator
from csekit.trainers.collators import enable_padding_free

MAX_LENGTH = 12
# (batch, views) token counts: a 1-token sentence, sentences at the maximum length, and views of one example
# that differ in length (as premise, entailment and contradiction do)
LENGTHS = torch.tensor([[1, 12, 4], [7, 3, 12], [12, 12, 2], [5, 9, 6], [2, 1, 8], [10, 6, 3]])
# RoBERTa numbers positions from padding_idx + 1: a packed row must too
BACKBONES = {"bert": tiny_bert_config, "roberta": tiny_roberta_config}


def backbone_config(name: str, **overrides):
    return BACKBONES[name](hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **overrides)
POOLERS = [("cls", None), ("cls_before_pooler", None), ("avg", None), ("avg_first_last", None), ("avg_top2", None),
           ("layers", [-1, 0, 2])]


def padded_and_packed(lengths: torch.Tensor, pad_token_id: int, seed: int = 0):
    """Random real tokens of the given lengths, as a padded ``(B, V, T)`` batch and as its packed row."""
    generator = torch.Generator().manual_seed(seed)
    mask = (torch.arange(MAX_LENGTH) < lengths[..., None]).long()
    tokens = torch.randint(pad_token_id + 1, 1000, mask.shape, generator=generator)
    input_ids = torch.where(mask.bool(), tokens, torch.full_like(tokens, pad_token_id))
    padded = {"input_ids": input_ids, "attention_mask": mask}
    packed = {"input_ids": input_ids[mask.bool()][None], "sequence_lengths": lengths,  # example-major order
              "attention_mask": mask}  # the padded layout, as the collator sends it
    return padded, packed


@pytest.fixture(params=["from lengths", "from layout"])
def layout(request, monkeypatch):
    """Each packed batch laid out both ways ``PackedSequences.of_batch`` can: from its lengths' values (the eager CPU
    step: blocks of similar lengths) and from its padded layout's width with no host read (a compiled step, or any
    step on an accelerator: one block)."""
    calls, from_layout = [], packing.PackedSequences.from_layout.__func__
    if request.param == "from layout":
        monkeypatch.setattr(packing, "laid_out_on_device", lambda lengths, layout: layout is not None)
        monkeypatch.setattr(packing.PackedSequences, "from_layout",
                            classmethod(lambda cls, *args: calls.append(args) or from_layout(cls, *args)))
    yield request.param
    assert bool(calls) == (request.param == "from layout")


def loss_and_gradients(model, loss_of, batch, seed=0):
    model.zero_grad()
    torch.manual_seed(seed)  # WhitenedCSE's shuffled groups draw the same permutation on both paths
    loss = loss_of(model(**batch))
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_math(model, loss_of, padded, packed):
    model.train()
    expected_loss, expected_grads = loss_and_gradients(model, loss_of, padded)
    model.use_packed_attention()
    loss, grads = loss_and_gradients(model, loss_of, packed)
    assert abs(loss.item() - expected_loss.item()) <= 1e-5
    assert grads.keys() == expected_grads.keys()
    assert len(grads) == sum(p.requires_grad for p in model.parameters())  # every trained parameter has a gradient
    for name, grad in grads.items():  # 1e-5 of the gradient's scale: float32 sums in another order round apart
        reference = expected_grads[name]
        error = (grad - reference).abs().max().item()
        assert error <= 1e-5 * max(1.0, reference.abs().max().item()), f"{name}: differs by {error:.3g}"


def simcse_loss(output):
    views = output.embeddings
    return info_nce_loss(views[:, 0], views[:, 1], hard_negatives=views[:, 2], temperature=0.05)


@pytest.mark.parametrize("backbone", BACKBONES)
@pytest.mark.parametrize("pooler_type, pooling_layers", POOLERS)
def test_simcse_packed_loss_and_gradients_equal_padded(backbone, pooler_type, pooling_layers, layout):
    torch.manual_seed(0)
    encoder = backbone_config(backbone)
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder.to_dict(), pooler_type=pooler_type,
                                     pooling_layers=pooling_layers))
    padded, packed = padded_and_packed(LENGTHS, encoder.pad_token_id)
    assert_same_math(model, simcse_loss, padded, packed)


def test_packed_batches_under_gradient_checkpointing_equal_padded(layout):
    """``--gradient_checkpointing`` recomputes each layer in the backward pass: the packed boundaries must reach the
    recomputation too."""
    torch.manual_seed(0)
    encoder = backbone_config("bert")
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder.to_dict(), pooler_type="avg"))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    padded, packed = padded_and_packed(LENGTHS, encoder.pad_token_id)
    assert_same_math(model, simcse_loss, padded, packed)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_whitenedcse_packed_loss_and_gradients_equal_padded(backbone, layout):
    torch.manual_seed(0)
    encoder = backbone_config(backbone)
    model = WhitenedCSEModel(WhitenedCSEConfig(encoder_config=encoder.to_dict(), pooler_type="cls", num_groups=16,
                                               num_positives=3))
    padded, packed = padded_and_packed(LENGTHS[:, :2], encoder.pad_token_id)

    def loss_of(output):
        terms = multi_positive_info_nce_terms(output.embeddings[:, 0], output.embeddings[:, 1:], temperature=0.05)
        return multi_positive_l1_loss(terms)

    assert_same_math(model, loss_of, padded, packed)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_cmlm_cse_packed_loss_and_gradients_equal_padded(backbone, layout):
    torch.manual_seed(0)
    encoder = backbone_config(backbone, num_hidden_layers=3)
    model = CMLMCSEForPreTraining(CMLMCSEConfig(encoder_config=encoder.to_dict(), pooler_type="avg",
                                                extractor_layers=1, fusion_layers=2, mlm_weight=1.0))
    padded, packed = padded_and_packed(LENGTHS[:, :2], encoder.pad_token_id)
    view0 = padded["input_ids"][:, 0]
    chosen = (torch.arange(MAX_LENGTH) % 3 == 0) & padded["attention_mask"][:, 0].bool()  # a fixed MLM mask
    padded["mlm_input_ids"] = view0.masked_fill(chosen, 3)
    padded["mlm_labels"] = view0.masked_fill(~chosen, -100)
    real = padded["attention_mask"][:, 0].bool()
    packed["mlm_input_ids"] = padded["mlm_input_ids"][real][None]
    packed["mlm_labels"] = padded["mlm_labels"][real][None]

    def loss_of(output):
        views = output.embeddings
        return info_nce_loss(views[:, 0], views[:, 1], temperature=0.05) + output.mlm_loss

    assert_same_math(model, loss_of, padded, packed)


@pytest.mark.parametrize("backbone", BACKBONES)
def test_packed_positions_restart_at_every_sentence(backbone, layout):
    """The position embeddings of a packed row are looked up, for every sentence, at the ids the backbone numbers a
    sentence's tokens with: 0, 1, ... for BERT, padding_idx + 1, ... for RoBERTa."""
    encoder = backbone_config(backbone)
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder.to_dict(), pooler_type="avg")).train()
    model.use_packed_attention()
    _, packed = padded_and_packed(LENGTHS, encoder.pad_token_id)
    seen = []
    model.encoder.embeddings.position_embeddings.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    model(**packed)
    first = encoder.pad_token_id + 1 if backbone == "roberta" else 0
    assert torch.equal(seen[0][0], torch.cat([torch.arange(first, first + n) for n in LENGTHS.flatten().tolist()]))


def test_packed_collator_holds_the_padded_collators_tokens(tokenizer):
    sentences = ["a man plays a guitar .", "dogs .", "a woman slices an onion very slowly in a small kitchen ."]
    for features in ([{"sent0": s} for s in sentences],
                     [{"sent0": a, "sent1": b, "hard_neg": c} for a, b, c in zip(sentences, sentences[1:] + sentences,
                                                                                 sentences[2:] + sentences)]):
        padded = ContrastiveCollator(tokenizer, max_length=8)(features)
        packed = ContrastiveCollator(tokenizer, max_length=8, padding_free=True)(features)
        assert set(packed) == {"input_ids", "sequence_lengths", "attention_mask"}
        assert torch.equal(packed["attention_mask"], padded["attention_mask"])  # the padded batch's layout
        assert torch.equal(packed["sequence_lengths"], padded["attention_mask"].sum(-1))
        assert torch.equal(packed["input_ids"][0], padded["input_ids"][padded["attention_mask"].bool()])


def test_packed_cmlm_collator_masks_view_0_tokens(tokenizer):
    config = CMLMCSEConfig(encoder_config=tiny_bert_config().to_dict(), extractor_layers=1, fusion_layers=1)
    features = [{"sent0": s} for s in ["a man plays a guitar .", "dogs .", "a woman slices an onion ."]]
    padded = fixed_masks(CMLMCSECollator(tokenizer, max_length=8, config=config))(features)
    packed = fixed_masks(CMLMCSECollator(tokenizer, max_length=8, config=config, padding_free=True))(features)
    real = padded["attention_mask"][:, 0].bool()
    for key in ("mlm_input_ids", "mlm_labels"):
        assert torch.equal(packed[key][0], padded[key][real])
    batch = CMLMCSECollator(tokenizer, max_length=8, config=config, padding_free=True)(features)
    restored = torch.where(batch["mlm_labels"] != -100, batch["mlm_labels"], batch["mlm_input_ids"])
    assert torch.equal(restored[0], padded["input_ids"][:, 0][real])  # the random masks cover view 0's tokens


def test_padded_views_are_each_cut_to_their_own_longest_sentence():
    """Without packing, the columns of a supervised batch cost no more positions than sentence-transformers'
    column-by-column padding: the encoder sees each view at its own longest length."""
    torch.manual_seed(0)
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="avg")).train()
    lengths = torch.tensor([[3, 5, 2], [4, 1, 2]])
    padded, _ = padded_and_packed(lengths, 0)
    shapes = []
    hook = model.encoder.register_forward_hook(lambda m, args, kwargs, out: shapes.append(tuple(kwargs["input_ids"]
                                                                                                .shape)),
                                               with_kwargs=True)
    together = model.eval()(**padded).embeddings
    hook.remove()
    assert shapes == [(2, 4), (2, 5), (2, 2)]
    one_by_one = torch.stack([model(padded["input_ids"][:, v, :n], padded["attention_mask"][:, v, :n]).embeddings
                              for v, n in enumerate([4, 5, 2])], dim=1)
    torch.testing.assert_close(together, one_by_one)


def test_backbone_without_the_attention_interface_trains_padded(tokenizer, caplog):
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config().to_dict()))
    model.encoder._supports_attention_backend = False
    with caplog.at_level(logging.INFO):
        assert enable_padding_free(model, tokenizer, MAX_LENGTH) is False
    assert [r.getMessage() for r in caplog.records if "padding-free" in r.getMessage()] == [
        "padding-free training is off, batches are padded: BertModel does not select its attention through "
        "transformers' AttentionInterface"]
    assert model.encoder.config._attn_implementation == "sdpa"


def test_saved_model_does_not_name_the_packed_attention(tmp_path, tokenizer):
    from transformers import AutoModel

    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="avg"))
    assert enable_padding_free(model, tokenizer, MAX_LENGTH) is True
    assert model.encoder.config._attn_implementation == "csekit_packed"
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    assert "csekit_packed" not in json.loads((tmp_path / "config.json").read_text()).__repr__()
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert reloaded.encoder.config._attn_implementation == "sdpa"


def test_a_packed_sentence_longer_than_its_layout_is_refused(monkeypatch):
    """Laid out from the layout's width, a sentence longer than it would overwrite its neighbour's positions: the
    step stops instead (a device-side assertion, which reads nothing on the host)."""
    monkeypatch.setattr(packing, "laid_out_on_device", lambda lengths, layout: layout is not None)
    encoder = backbone_config("bert")
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder.to_dict(), pooler_type="cls")).train()
    model.use_packed_attention()
    _, packed = padded_and_packed(LENGTHS, encoder.pad_token_id)
    with pytest.raises(RuntimeError, match="longer than its padded layout"):
        model(**{**packed, "attention_mask": packed["attention_mask"][..., :-1]})
