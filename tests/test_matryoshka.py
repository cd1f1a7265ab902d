"""Matryoshka sizes (Kusupati et al., 2022, ``--matryoshka_dims``): the loss against its equation written out here
from SimCSE's InfoNCE and WhitenedCSE's eq. 7, the recipe's scores at every trained size, truncation equal in csekit
and sentence-transformers, and the refusals."""

import json

import numpy as np
import pytest
import torch
from huggingface_hub import metadata_load

from conftest import recipe_flags, tiny_bert_config
from csekit import cli
from csekit.modeling import CMLMCSEConfig, SimCSEConfig, SimCSEModel, WhitenedCSEConfig, WhitenedCSEModel

SENTENCES = ["A man is playing a guitar.", "Stocks fell sharply.", "the cat sleeps", "A woman slices an onion.",
             "Two dogs run on the beach.", "The market rallied today."]
TAU = 0.05


def info_nce(anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """SimCSE eq. 1: -log e^{cos(h_i, h_i+)/tau} / sum_j e^{cos(h_i, h_j+)/tau}, averaged over the batch."""
    a = anchors.double() / anchors.double().norm(dim=-1, keepdim=True)
    p = positives.double() / positives.double().norm(dim=-1, keepdim=True)
    similarity = a @ p.T / TAU
    return (torch.logsumexp(similarity, dim=1) - similarity.diagonal()).mean()


def trainer_for(model, method: str, tmp_path):
    from csekit.methods import get_method
    from csekit.recipes.simcse import RECIPE

    args = RECIPE.parse(["--model_name_or_path", "unused", "--output_dir", str(tmp_path), "--report_to", "none",
                         "--eval_strategy", "no", "--load_best_model_at_end", "false"])[2]
    return get_method(method).trainer_class(model=model, args=args)


def training_outputs(model, tokenizer, views: int):
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    expand = {key: value[:, None].expand(-1, views, -1) for key, value in batch.items()}
    torch.manual_seed(0)
    return model.train()(**expand)


@pytest.mark.parametrize("mlp_only_train", [True, False], ids=["head-in-training-only", "head-at-inference"])
def test_simcse_loss_is_the_full_term_plus_the_weighted_truncated_terms(mlp_only_train, tokenizer, tmp_path):
    config = SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls", temperature=TAU,
                          mlp_only_train=mlp_only_train, matryoshka_dims=[16, 8], matryoshka_weights=[0.5, 2.0])
    model = SimCSEModel(config)
    outputs = training_outputs(model, tokenizer, views=2)
    losses = trainer_for(model, "simcse", tmp_path).compute_losses(model, outputs, {})

    z = outputs.embeddings  # the head's output, what the method's own term sees
    # the vectors encode returns: the [CLS] vector (head in training only) or tanh(W cls + b) (head at inference)
    v = outputs.pooled if mlp_only_train else torch.tanh(outputs.pooled @ model.mlp.dense.weight.T
                                                         + model.mlp.dense.bias)
    expected = info_nce(z[:, 0], z[:, 1]) + 0.5 * info_nce(v[:, 0, :16], v[:, 1, :16]) + \
        2.0 * info_nce(v[:, 0, :8], v[:, 1, :8])
    torch.testing.assert_close(losses["loss"].double(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(losses["matryoshka_8"].double(), info_nce(v[:, 0, :8], v[:, 1, :8]),
                               rtol=1e-5, atol=1e-6)
    # logged as loss_contrastive: the full-size term alone, as without Matryoshka sizes
    torch.testing.assert_close(losses["contrastive"].double(), info_nce(z[:, 0], z[:, 1]), rtol=1e-5, atol=1e-6)
    assert not mlp_only_train or not torch.allclose(z, v)  # the sizes are trained on v, not on the head's z
    losses["loss"].backward()  # the truncated terms reach the encoder
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_whitenedcse_loss_adds_the_truncated_terms_over_the_same_views(tokenizer, tmp_path):
    config = WhitenedCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls", temperature=TAU,
                               num_groups=16, num_positives=3, matryoshka_dims=[12])
    model = WhitenedCSEModel(config)
    outputs = training_outputs(model, tokenizer, views=2)
    losses = trainer_for(model, "whitenedcse", tmp_path).compute_losses(model, outputs, {})
    z, pooled = outputs.embeddings, outputs.pooled  # z: (batch, 1 + 3, hidden) whitened; pooled: 2 views

    def eq7(anchor, positives):  # WhitenedCSE eq. 7 with unit weights: the sum of the per-positive InfoNCE terms
        return sum(info_nce(anchor, positives[:, p]) for p in range(positives.shape[1]))

    # inference returns the pooled vector; its positives are view 1, once for each of the 3 whitened draws
    truncated = pooled[..., :12]
    expected = eq7(z[:, 0], z[:, 1:]) + eq7(truncated[:, 0], truncated[:, 1:2].expand(-1, 3, -1))
    torch.testing.assert_close(losses["loss"].double(), expected, rtol=1e-5, atol=1e-6)


def test_cmlm_cse_weighs_the_contrastive_side_with_its_truncated_terms_and_keeps_the_mlm_term(tokenizer, tmp_path):
    from test_cmlm_cse import batch_for, tiny_model
    from test_cmlm_cse import trainer_for as cmlm_trainer_for

    model = tiny_model(tokenizer, pooler_type="cls", temperature=TAU, mlp_only_train=False, contrastive_weight=0.7,
                       mlm_weight=0.3, matryoshka_dims=[16, 8], matryoshka_weights=[0.5, 2.0])
    batch = batch_for(tokenizer, config=model.config)
    torch.manual_seed(0)
    outputs = model.train()(**batch)
    losses = cmlm_trainer_for(model, tokenizer, tmp_path).compute_losses(model, outputs, batch)

    z = outputs.embeddings
    v = torch.tanh(outputs.pooled @ model.mlp.dense.weight.T + model.mlp.dense.bias)  # the MLP kept at inference
    contrastive_side = info_nce(z[:, 0], z[:, 1]) + 0.5 * info_nce(v[:, 0, :16], v[:, 1, :16]) + \
        2.0 * info_nce(v[:, 0, :8], v[:, 1, :8])
    expected = 0.7 * contrastive_side + 0.3 * outputs.mlm_loss.double()  # L_MLM unchanged
    torch.testing.assert_close(losses["loss"].double(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(losses["contrastive"].double(), info_nce(z[:, 0], z[:, 1]), rtol=1e-5, atol=1e-6)
    assert set(losses) == {"loss", "contrastive", "mlm", "matryoshka_16", "matryoshka_8"}  # each term logged


def test_off_by_default_the_loss_is_the_methods_own(tokenizer, tmp_path):
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type="cls",
                                     temperature=TAU))
    outputs = training_outputs(model, tokenizer, views=2)
    losses = trainer_for(model, "simcse", tmp_path).compute_losses(model, outputs, {})
    assert set(losses) == {"loss", "contrastive"}
    z = outputs.embeddings
    torch.testing.assert_close(losses["loss"].double(), info_nce(z[:, 0], z[:, 1]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config_class, kwargs, message", [
    (SimCSEConfig, dict(matryoshka_dims=[32]), "between 1 and 31"),
    (SimCSEConfig, dict(matryoshka_dims=[8, 8]), "lists a size twice"),
    (SimCSEConfig, dict(matryoshka_dims=[8], matryoshka_weights=[1.0, 1.0]), "2 weights for 1"),
    (SimCSEConfig, dict(matryoshka_dims=[8], matryoshka_weights=[0.0]), "finite numbers > 0"),
    (SimCSEConfig, dict(matryoshka_weights=[1.0]), "needs matryoshka_dims"),
    (CMLMCSEConfig, dict(extractor_layers=1, fusion_layers=1, matryoshka_dims=[0]), "between 1 and 31"),
], ids=["full-size", "twice", "weights-count", "zero-weight", "weights-alone", "cmlm-zero"])
def test_bad_sizes_and_weights_are_refused(config_class, kwargs, message):
    with pytest.raises(Exception, match=message):
        config_class(encoder_config=tiny_bert_config().to_dict(), **kwargs)


def test_clsr_has_no_matryoshka_flags_and_its_config_refuses_them(capsys):
    from csekit.modeling import CLSRConfig

    with pytest.raises(Exception, match="CLSR does not train Matryoshka sizes"):
        CLSRConfig(encoder_config=tiny_bert_config().to_dict(), matryoshka_dims=[8])
    assert cli.main(["train", "clsr", "--matryoshka_dims", "8"]) == 2
    assert "unrecognized arguments: --matryoshka_dims" in capsys.readouterr().err


def test_whitened_inference_is_refused_before_training(tiny_backbone, corpus, tmp_path, capsys):
    code = cli.main(["train", "whitenedcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus),
                     "--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--do_test_eval", "false",
                     *recipe_flags("whitenedcse"), "--inference_representation", "whitened",
                     "--matryoshka_dims", "8"])
    assert code == 2
    assert "--matryoshka_dims: WhitenedCSEModel's inference vectors" in capsys.readouterr().err
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_backbone, corpus):
    """A supervised-style SimCSE run (MLP at inference) with sizes 16 and 8, scored on the STS test sets."""
    out = tmp_path_factory.mktemp("matryoshka") / "simcse"
    settings = {"model_name_or_path": tiny_backbone, "train_file": corpus, "output_dir": out, "max_steps": 2,
                "per_device_train_batch_size": 8, "max_seq_length": 16, "save_strategy": "no", "eval_strategy": "no",
                "load_best_model_at_end": "false", "mlp_only_train": "false"}
    flags = [item for key, value in settings.items() for item in (f"--{key}", str(value))]
    assert cli.main(["train", "simcse", *flags, *recipe_flags("simcse"), "--matryoshka_dims", "16", "8"]) == 0
    return out


def test_the_run_records_its_sizes_and_scores_each_like_evaluate_truncate_dim(trained, tmp_path):
    config = json.loads((trained / "config.json").read_text())
    assert config["matryoshka_dims"] == [16, 8]
    record = json.loads((trained / "eval_results.json").read_text())
    assert set(record["matryoshka_sts"]) == {"16", "8"}
    for size in ("16", "8"):
        output = tmp_path / f"{size}.json"
        assert cli.main(["evaluate", str(trained), "--truncate-dim", size, "--output", str(output)]) == 0
        scored = json.loads(output.read_text())
        assert scored["truncate_dim"] == int(size) and scored["sts"] == record["matryoshka_sts"][size]
    assert record["matryoshka_sts"]["8"] != record["sts"]  # a prefix scores differently from the whole vector
    card = (trained / "README.md").read_text()
    assert "Matryoshka" in card and f"| 8 | {record['matryoshka_sts']['8']['avg']:.2f} |" in card
    assert "matryoshka" in metadata_load(trained / "README.md")["tags"]  # the Hub's filter finds it


@pytest.mark.parametrize("size", [8, 32])
def test_sentence_transformers_truncate_dim_gives_csekits_vectors(size, trained):
    from sentence_transformers import SentenceTransformer

    model = SimCSEModel.from_pretrained(trained)
    expected = model.encode(SENTENCES, truncate_dim=size, normalize=True)
    st = SentenceTransformer(str(trained), device="cpu", truncate_dim=size)
    actual = st.encode(SENTENCES, normalize_embeddings=True)
    assert actual.shape == (len(SENTENCES), size)
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)
    np.testing.assert_array_equal(model.encode(SENTENCES, truncate_dim=size), model.encode(SENTENCES)[:, :size])


def test_a_size_larger_than_the_vectors_is_refused(trained, capsys):
    assert cli.main(["evaluate", str(trained), "--truncate-dim", "33"]) == 2
    assert "--truncate-dim 33: " in capsys.readouterr().err
    with pytest.raises(ValueError, match="truncate_dim must be a size between 1 and 32"):
        SimCSEModel.from_pretrained(trained).encode(SENTENCES, truncate_dim=33)
