"""Poolers against direct computations on the encoder's hidden states, for BERT and RoBERTa backbones."""

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError

from conftest import tiny_bert_config, tiny_roberta_config
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.modeling.pooling import resolve_pooling_layers


def build(pooler_type, backbone=tiny_bert_config, **kwargs):
    config = SimCSEConfig(encoder_config=backbone().to_dict(), pooler_type=pooler_type, **kwargs)
    return SimCSEModel(config).eval()


def batch(tokenizer):
    return tokenizer(["a short one", "a somewhat longer sentence with more words in it"], padding=True,
                     return_tensors="pt")


def reference(model, inputs, layers):
    hidden = model.encoder(**inputs, output_hidden_states=True).hidden_states
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    states = torch.stack([hidden[i] for i in layers]).mean(0)
    return (states * mask).sum(1) / mask.sum(1)


@pytest.mark.parametrize("backbone", [tiny_bert_config, tiny_roberta_config])
@pytest.mark.parametrize(
    "pooler_type, layers",
    [("avg", [2]), ("avg_first_last", [1, 2]), ("avg_top2", [1, 2])],
)
def test_averaging_poolers(tokenizer, backbone, pooler_type, layers):
    model = build(pooler_type, backbone)
    inputs = batch(tokenizer)
    if backbone is tiny_roberta_config:
        inputs.pop("token_type_ids")
    out = model(**inputs)
    torch.testing.assert_close(out.embeddings, reference(model, inputs, layers))


def test_layers_pooler_with_static_embeddings(tokenizer):
    model = build("layers", pooling_layers=[-1, 0, 2])
    inputs = batch(tokenizer)
    hidden = model.encoder(**inputs, output_hidden_states=True).hidden_states
    static = model.encoder.get_input_embeddings()(inputs["input_ids"])
    mask = inputs["attention_mask"].unsqueeze(-1).float()
    expected = (((static + hidden[0] + hidden[2]) / 3) * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(model(**inputs).embeddings, expected)


def test_cls_head_only_in_training_when_mlp_only_train(tokenizer):
    model = build("cls", mlp_only_train=True)
    inputs = batch(tokenizer)
    cls = model.encoder(**inputs).last_hidden_state[:, 0]
    torch.testing.assert_close(model(**inputs).embeddings, cls)
    model.train()
    for module in model.modules():  # no dropout, so train/eval differ only by the head
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    torch.testing.assert_close(model(**inputs).embeddings, torch.tanh(model.mlp.dense(cls)))


def test_cls_before_pooler_has_no_head(tokenizer):
    model = build("cls_before_pooler")
    assert model.mlp is None
    inputs = batch(tokenizer)
    torch.testing.assert_close(model(**inputs).embeddings, model.encoder(**inputs).last_hidden_state[:, 0])


def test_token_weights_weight_the_mean(tokenizer):
    model = build("avg")
    inputs = batch(tokenizer)
    weights = torch.rand(inputs["input_ids"].shape)
    hidden = model.encoder(**inputs).last_hidden_state
    w = (weights * inputs["attention_mask"]).unsqueeze(-1)
    expected = (hidden * w).sum(1) / w.sum(1)
    torch.testing.assert_close(model(**inputs, token_weights=weights).embeddings, expected)


def test_views_axis_is_flattened_and_restored(tokenizer):
    model = build("avg")
    inputs = batch(tokenizer)
    stacked = {k: torch.stack([v, v.flip(0)], dim=1) for k, v in inputs.items()}  # (2, 2, T)
    out = model(**stacked).embeddings
    assert out.shape == (2, 2, 32)
    single = model(**inputs).embeddings
    torch.testing.assert_close(out[:, 0], single)
    torch.testing.assert_close(out[:, 1], single.flip(0))


@pytest.mark.parametrize(
    "pooler_type, layers, message",
    [("mean", None, "unknown pooler_type"), ("layers", None, "non-empty"), ("layers", [3], "out of range"),
     ("avg", [1], "only used with")],
)
def test_bad_pooler_config_is_rejected(pooler_type, layers, message):
    with pytest.raises(StrictDataclassError, match=message):
        SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type=pooler_type, pooling_layers=layers)


def test_resolve_layers_presets():
    assert resolve_pooling_layers("avg_first_last", None, 12) == [1, 12]
    assert resolve_pooling_layers("avg_top2", None, 6) == [5, 6]
