"""Every csekit model folder loads with ``SentenceTransformer(folder)`` as well as ``AutoModel.from_pretrained``,
with the same vectors, in a fresh interpreter that never imports csekit (no remote code either)."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModel

from conftest import run_isolated_python, tiny_bert_config, tiny_roberta_config
from csekit.modeling import (
    CLSRConfig,
    CLSRModel,
    CMLMCSEConfig,
    CMLMCSEModel,
    SimCSEConfig,
    SimCSEModel,
    WhitenedCSEConfig,
    WhitenedCSEModel,
)
from csekit.modeling.sentence_transformers_layout import sentence_transformers_layout_problem

SENTENCES = ["A man is playing a guitar.", "ok", "Two dogs run across a snowy field while their owner watches."]

CASES = {
    "simcse-cls-mlp": (SimCSEModel, SimCSEConfig, dict(pooler_type="cls", mlp_only_train=False)),
    "simcse-cls-mlp_only_train": (SimCSEModel, SimCSEConfig, dict(pooler_type="cls", mlp_only_train=True)),
    "simcse-cls_before_pooler": (SimCSEModel, SimCSEConfig, dict(pooler_type="cls_before_pooler")),
    "simcse-avg": (SimCSEModel, SimCSEConfig, dict(pooler_type="avg")),
    "cmlm_cse": (CMLMCSEModel, CMLMCSEConfig, dict(pooler_type="cls", extractor_layers=1, fusion_layers=1)),
    "whitenedcse-pooled": (WhitenedCSEModel, WhitenedCSEConfig, dict(pooler_type="cls")),
    "whitenedcse-head_no_whitening": (WhitenedCSEModel, WhitenedCSEConfig,
                                      dict(pooler_type="cls", inference_representation="head_no_whitening")),
    "clsr": (CLSRModel, CLSRConfig, dict(pooler_type="avg")),
    "clsr-literal": (CLSRModel, CLSRConfig, dict(pooler_type="avg", encoder_layout="literal")),
}

LOAD_ALL = """
import json, sys, numpy as np
from sentence_transformers import SentenceTransformer
sentences, folders = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for case, folder in folders.items():
    print(f"=== {case}", file=sys.stderr, flush=True)  # this case's warnings follow
    model = SentenceTransformer(folder, device="cpu", local_files_only=True)
    np.save(f"{folder}.npy", model.encode(sentences, convert_to_numpy=True))
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] == "csekit")))
"""


def save_model(folder, tokenizer, model_class, config_class, options, encoder_config=None):
    torch.manual_seed(0)
    encoder_config = encoder_config or tiny_bert_config(max_position_embeddings=512)
    model = model_class(config_class(encoder_config=encoder_config.to_dict(), **options)).eval()
    model.tokenizer = tokenizer
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, tokenizer) -> dict:
    """Every case saved, then loaded with ``SentenceTransformer`` in one interpreter without csekit (one start-up
    for all cases): ``{case: (csekit's vectors, sentence-transformers' vectors, that case's stderr)}``, plus the
    csekit modules that interpreter imported under ``None``."""
    root = tmp_path_factory.mktemp("st_layout")
    folders, expected = {}, {}
    for case, (model_class, config_class, options) in CASES.items():
        folders[case] = str(root / case)
        model = save_model(root / case, tokenizer, model_class, config_class, options)
        expected[case] = AutoModel.from_pretrained(root / case).encode(SENTENCES)  # csekit's path, reloaded
        np.testing.assert_array_equal(expected[case], model.encode(SENTENCES))  # the head read back exactly
    script = root / "load.py"
    script.write_text(LOAD_ALL)
    result = run_isolated_python(
        f"import runpy, sys; sys.argv = ['load.py', {json.dumps(json.dumps(SENTENCES))}, "
        f"{json.dumps(json.dumps(folders))}]; runpy.run_path({str(script)!r}, run_name='__main__')", cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    stderr = dict(part.split("\n", 1) if "\n" in part else (part, "")
                  for part in result.stderr.split("=== ")[1:])
    found = {case: (expected[case], np.load(f"{folders[case]}.npy"), stderr[case]) for case in CASES}
    found[None] = json.loads(result.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_saved_folder_loads_in_sentence_transformers_without_csekit_with_equal_vectors(case, loaded):
    expected, actual, stderr = loaded[case]
    assert loaded[None] == []  # sentence-transformers alone, no csekit
    assert "LOAD REPORT" not in stderr  # no unexpected or missing keys
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("mlp_only_train", [False, True])
def test_weights_are_stored_once(mlp_only_train, tmp_path, tokenizer):
    """The csekit index points into encoder/model.safetensors and, for an inference head, into the Dense module
    sentence-transformers reads: no second copy of the backbone or the head. A training-only MLP (no Dense module)
    stays in model-head.safetensors."""
    folder = tmp_path / "model"
    model = save_model(folder, tokenizer, SimCSEModel, SimCSEConfig,
                       dict(pooler_type="cls", mlp_only_train=mlp_only_train))
    assert not (folder / "model.safetensors").exists()
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == set(model.state_dict())
    with safe_open(folder / "encoder" / "model.safetensors", "pt") as stored:
        assert set(stored.keys()) == {key for key in model.state_dict() if key.startswith("encoder.")}
    head_file = "model-head.safetensors" if mlp_only_train else "2_Dense/model.safetensors"
    assert {index["mlp.dense.weight"], index["mlp.dense.bias"]} == {head_file}
    assert (folder / "model-head.safetensors").exists() == mlp_only_train
    assert (folder / "2_Dense").exists() != mlp_only_train
    with safe_open(folder / head_file, "pt") as stored:
        names = {"mlp.dense.weight", "mlp.dense.bias"} if mlp_only_train else {"linear.weight", "linear.bias"}
        assert set(stored.keys()) == names
        head = dict(model.mlp.dense.named_parameters())
        for name in names:
            assert torch.equal(stored.get_tensor(name), head[name.rsplit(".", 1)[1]].detach())
    loaded = AutoModel.from_pretrained(folder)
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key


def test_a_dense_file_that_disagrees_with_the_config_is_refused(tmp_path, tokenizer):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    save_model(folder, tokenizer, SimCSEModel, SimCSEConfig, dict(pooler_type="cls", mlp_only_train=False))
    weights = load_file(folder / "2_Dense" / "model.safetensors")
    save_file({"linear.scale": weights["linear.bias"].clone(), **weights}, folder / "2_Dense" / "model.safetensors")
    with pytest.raises(ValueError, match="linear.scale is not a weight of SimCSEModel's inference head"):
        AutoModel.from_pretrained(folder)


def test_roberta_backbone_loads_in_sentence_transformers(tmp_path, tokenizer):
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "model"
    save_model(folder, tokenizer, SimCSEModel, SimCSEConfig, dict(pooler_type="cls", mlp_only_train=False),
               encoder_config=tiny_roberta_config(max_position_embeddings=514))
    expected = AutoModel.from_pretrained(folder).encode(SENTENCES)
    actual = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("options", [dict(pooler_type="avg_first_last"), dict(pooler_type="avg_top2")])
def test_multi_layer_poolers_get_no_sentence_transformers_files_and_say_why(options, tmp_path, tokenizer):
    folder = tmp_path / "model"
    model = save_model(folder, tokenizer, SimCSEModel, SimCSEConfig, options)
    assert "reads several layers" in sentence_transformers_layout_problem(model)
    assert not (folder / "modules.json").exists() and (folder / "model.safetensors").is_file()
    np.testing.assert_allclose(AutoModel.from_pretrained(folder).encode(SENTENCES), model.encode(SENTENCES),
                               atol=1e-6)


def test_whitened_representation_gets_no_sentence_transformers_files(tmp_path, tokenizer):
    folder = tmp_path / "model"
    model = save_model(folder, tokenizer, WhitenedCSEModel, WhitenedCSEConfig,
                       dict(pooler_type="cls", inference_representation="head"))
    assert "not a chain" in sentence_transformers_layout_problem(model)
    assert not (folder / "modules.json").exists()
