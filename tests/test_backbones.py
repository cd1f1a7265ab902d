"""Backbones: every family of ``csekit.preflight.SUPPORTED_BACKBONES`` trains and encodes, packed where exact; the rest
is refused before any work.

The oracle for packing is the backbone's own padded forward (transformers' attention with its padding mask, local
window included): the probe run before training (``use_packed_attention_if_exact``) must switch a family to packed
batches only when a training step on them gives the padded step's loss and gradients, and must leave it padded,
with a log line, when the packed attention would compute something else.
"""

import logging
import re

import pytest
import torch
from transformers import AutoConfig, GPT2Config, GPT2Model, T5Config, T5Model

from csekit.errors import DataError
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.modeling.losses import info_nce_loss
from csekit.preflight import SUPPORTED_BACKBONES, read_model_config
from csekit.trainers.collators import enable_padding_free

SMALL = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=128)
# per family: what a tiny config of it needs beyond SMALL (dropout 0 everywhere: both paths deterministic)
FAMILIES = {
    "bert": {}, "roberta": dict(pad_token_id=1), "xlm-roberta": dict(pad_token_id=1),
    "camembert": dict(pad_token_id=1), "electra": dict(embedding_size=16), "albert": dict(embedding_size=16),
    "distilbert": dict(dim=32, n_layers=2, n_heads=2, hidden_dim=64, dropout=0.0, attention_dropout=0.0),
    "mpnet": {}, "deberta-v2": {},
    # a local window of 8 (4 each side) on layer 1: sentences of the probe and of the batch are longer than it
    "modernbert": dict(pad_token_id=0, local_attention=8, layer_types=["full_attention", "sliding_attention"],
                       attention_dropout=0.0, embedding_dropout=0.0, mlp_dropout=0.0),
}
PACKED = {"bert", "roberta", "xlm-roberta", "camembert", "electra", "albert", "distilbert", "modernbert"}


def tiny_config(model_type: str):
    values = {**SMALL, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, **FAMILIES[model_type]}
    if model_type == "distilbert":
        values = {k: v for k, v in values.items() if k not in ("hidden_size", "num_hidden_layers",
                                                                "num_attention_heads", "intermediate_size")}
    return AutoConfig.for_model(model_type, **values)


def test_every_supported_family_has_a_tiny_config_here():
    assert set(FAMILIES) == set(SUPPORTED_BACKBONES)


def padded_and_packed(lengths: list, pad_token_id: int):
    generator = torch.Generator().manual_seed(0)
    longest = max(lengths)
    mask = (torch.arange(longest) < torch.tensor(lengths)[:, None]).long()
    tokens = torch.randint(pad_token_id + 1, 1000, mask.shape, generator=generator)
    input_ids = torch.where(mask.bool(), tokens, pad_token_id)
    views = (len(lengths) // 2, 2)
    padded = {"input_ids": input_ids.view(*views, -1), "attention_mask": mask.view(*views, -1)}
    packed = {"input_ids": input_ids[mask.bool()][None], "sequence_lengths": torch.tensor(lengths).view(*views)}
    return padded, packed


def loss_and_gradients(model, batch):
    model.zero_grad()
    views = model(**batch).embeddings
    loss = info_nce_loss(views[:, 0], views[:, 1], temperature=0.05)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_family_trains_and_packs_only_where_exact(model_type, tokenizer, caplog):
    torch.manual_seed(0)
    config = tiny_config(model_type)
    model = SimCSEModel(SimCSEConfig(encoder_config=config.to_dict(), pooler_type="avg"))
    assert read_model_config_of(config) == model_type
    lengths = [3, 17, 12, 5, 20, 9, 1, 14]  # longer than ModernBERT's tiny window
    padded, packed = padded_and_packed(lengths, config.pad_token_id or 0)
    model.train()
    expected_loss, expected_grads = loss_and_gradients(model, padded)
    with caplog.at_level(logging.INFO):
        switched = enable_padding_free(model, tokenizer, 24)
    assert switched == (model_type in PACKED), caplog.text
    if not switched:
        assert "padding-free training is off, batches are padded" in caplog.text
        return
    loss, grads = loss_and_gradients(model, packed)
    assert abs(loss.item() - expected_loss.item()) <= 1e-5
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        reference = expected_grads[name]
        assert (grad - reference).abs().max() <= 1e-5 * max(1.0, reference.abs().max().item()), name
    model.tokenizer = tokenizer
    vectors = model.eval().encode(["A man plays a guitar.", "Snow falls."], convert_to_numpy=False)
    assert vectors.shape == (2, 32) and torch.isfinite(vectors).all()


def read_model_config_of(config, folder=None) -> str:
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config.to_dict()))
        return read_model_config(folder)["model_type"]


def test_packed_attention_ignoring_the_local_window_is_caught_by_the_probe(tokenizer, caplog, monkeypatch):
    """The mutation the probe exists for: a packed attention that drops ModernBERT's window differs from the padded
    backbone on the probe's long sentence, so packing stays off (and says why)."""
    import csekit.modeling.packing as packing

    original = packing.packed_attention
    monkeypatch.setattr(packing, "packed_attention", lambda *args, sliding_window=None, **kwargs: original(
        *args, **kwargs))
    packing.register_packed_attention()
    try:
        model = SimCSEModel(SimCSEConfig(encoder_config=tiny_config("modernbert").to_dict(), pooler_type="avg"))
        with caplog.at_level(logging.INFO):
            assert enable_padding_free(model, tokenizer, 24) is False
        assert "its packed output differs from the padded one" in caplog.text
        assert model.encoder.config._attn_implementation != packing.PACKED_ATTENTION
    finally:
        monkeypatch.undo()
        packing.register_packed_attention()


def test_attention_features_packing_does_not_implement_turn_it_off(tokenizer, caplog):
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_config("bert").to_dict(), pooler_type="avg"))
    # a layer flagged causal whose padded attention is bidirectional all the same (BERT's mask wins over the flag):
    # packed, it would attend causally, so the probe sees another output and packing stays off
    model.encoder.encoder.layer[1].attention.self.is_causal = True
    with caplog.at_level(logging.INFO):
        assert enable_padding_free(model, tokenizer, 24) is False
    assert "padding-free training is off, batches are padded: on probe sentences its packed output differs" in \
        caplog.text
    assert model.encoder.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-decoder"])
def test_decoder_only_and_encoder_decoder_models_are_refused(kind, tmp_path):
    if kind == "decoder-only":
        GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=100)).save_pretrained(tmp_path)
        expected = "model_type 'gpt2' is a decoder-only (causal) family csekit has not been tested on"
    else:
        T5Model(T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16, vocab_size=100)).save_pretrained(
            tmp_path)
        expected = "model_type 't5' is an encoder-decoder model"
    with pytest.raises(DataError, match=re.escape(expected)):
        read_model_config(tmp_path)


def test_a_packed_step_builds_no_mask_over_the_whole_row(monkeypatch):
    """ModernBERT's local layers ask for a sliding-window mask: for a packed row the mask builder returns none (the
    window is applied inside each block), so no N x N mask is ever built."""
    import csekit.modeling.packing as packing

    built = []
    real = packing.sdpa_mask
    monkeypatch.setattr(packing, "sdpa_mask", lambda *args, **kwargs: built.append(kwargs) or real(*args, **kwargs))
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_config("modernbert").to_dict(), pooler_type="avg"))
    model.use_packed_attention()
    padded, packed = padded_and_packed([3, 17, 12, 5, 20, 9, 1, 14], 0)
    model.train()(**packed).embeddings.sum().backward()
    assert built == []
    model(**padded)  # a padded batch still gets SDPA's mask with its padding
    assert built
