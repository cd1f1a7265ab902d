"""A sentence-transformers folder csekit did not write is scored with the vectors its own library gives.

The oracle is ``SentenceTransformer(folder).encode`` on the same folder: every pooling mode, a Dense head, Normalize
and a default prompt, with the Pooling config in sentence-transformers 6's format (``"pooling_mode": "mean"``) and in
the older one (``"pooling_mode_mean_tokens": true``). Without sentence-transformers, csekit's own reader gives the
same vectors for what it applies (mean or [CLS] pooling, Normalize) and refuses the rest in one line naming the
module. A csekit model exported with ``export-st --layout plain`` scores what its source scores.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from csekit import cli
from csekit.errors import DataError
from csekit.evaluation.encoders import load_embedder

pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.base.modules import Dense, Transformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling  # noqa: E402

SENTENCES = ["A man is playing a guitar.", "Two dogs run across a snowy field near the old barn.", "Hi.",
             "The quick brown fox jumps over the lazy dog while the farmer watches from a distance, unimpressed."]
MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
OLD_KEYS = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
            "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
            "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
# (mode, Dense, Normalize, prompt): the pipelines scored; the first ones are those csekit's own reader applies
PIPELINES = [(mode, False, False, None) for mode in MODES] + [
    ("mean", False, True, None), ("cls", False, True, None),
    ("mean", True, False, None), ("cls", True, True, None), ("mean", False, False, "query: ")]
PLAIN_READER = {("mean", False, False, None), ("cls", False, False, None), ("mean", False, True, None),
                ("cls", False, True, None)}


def pipeline_id(pipeline) -> str:
    mode, dense, normalize, prompt = pipeline
    return "-".join([mode] + ["dense"] * dense + ["normalize"] * normalize + ["prompt"] * bool(prompt))


def write_old_pooling_config(folder: Path) -> None:
    """Rewrite ``1_Pooling/config.json`` in the format sentence-transformers 2.x wrote (one boolean a mode)."""
    path = folder / "1_Pooling" / "config.json"
    config = json.loads(path.read_text())
    modes = config.pop("pooling_mode")
    modes = [modes] if isinstance(modes, str) else modes
    old = {"word_embedding_dimension": config.pop("embedding_dimension", None) or config.pop(
        "word_embedding_dimension"), **{key: name in modes for name, key in OLD_KEYS.items()}}
    path.write_text(json.dumps(old, indent=2))


@pytest.fixture(scope="module")
def st_folders(tmp_path_factory, tiny_backbone):
    """``{(pipeline, format): folder}``, each saved by sentence-transformers on the tiny backbone."""
    folders = {}
    for pipeline in PIPELINES:
        mode, dense, normalize, prompt = pipeline
        for config_format in ("new", "old"):
            torch.manual_seed(1)
            transformer = Transformer(str(tiny_backbone), max_seq_length=24)
            modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=mode)]
            if dense:
                modules.append(Dense(32, 16, activation_function=torch.nn.Tanh()))
            if normalize:
                modules.append(Normalize())
            prompts = {"query": prompt} if prompt else None
            model = SentenceTransformer(modules=modules, prompts=prompts,
                                        default_prompt_name="query" if prompt else None, device="cpu")
            folder = tmp_path_factory.mktemp(f"st-{pipeline_id(pipeline)}-{config_format}")
            model.save(str(folder))
            if config_format == "old":
                write_old_pooling_config(folder)
            folders[pipeline, config_format] = folder
    return folders


def reference(folder: Path) -> np.ndarray:
    """The oracle: sentence-transformers' own vectors for the folder."""
    return SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_numpy=True)


@pytest.mark.parametrize("config_format", ["new", "old"])
@pytest.mark.parametrize("pipeline", PIPELINES, ids=pipeline_id)
def test_a_sentence_transformers_folder_is_scored_with_its_own_librarys_vectors(st_folders, pipeline, config_format):
    folder = st_folders[pipeline, config_format]
    embed, info = load_embedder(str(folder), device="cpu")
    np.testing.assert_allclose(embed(SENTENCES), reference(folder), atol=1e-5, rtol=0)
    mode, dense, normalize, prompt = pipeline
    assert info["modules"][1] == f"Pooling({mode})"
    assert ("Dense(32->16)" in info["modules"]) == dense and ("Normalize" in info["modules"]) == normalize
    assert info["prompt"] == prompt and info["dimension"] == (16 if dense else 32)


def test_the_pipelines_give_different_vectors(st_folders):
    """Each pipeline is its own model: scoring them all alike (one pooler for every folder) is what this guards."""
    vectors = [reference(st_folders[pipeline, "new"]) for pipeline in PIPELINES if not pipeline[2]]
    for index, first in enumerate(vectors):
        for second in vectors[index + 1:]:
            if first.shape == second.shape:
                assert np.abs(first - second).max() > 1e-3


@pytest.mark.parametrize("config_format", ["new", "old"])
@pytest.mark.parametrize("pipeline", PIPELINES, ids=pipeline_id)
def test_without_sentence_transformers_csekit_applies_what_it_reproduces_and_refuses_the_rest(
        st_folders, pipeline, config_format, monkeypatch):
    folder = st_folders[pipeline, config_format]
    expected = reference(folder)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # an install without csekit[st]
    if pipeline not in PLAIN_READER:
        with pytest.raises(DataError) as refused:
            load_embedder(str(folder), device="cpu")
        message = str(refused.value)
        assert "\n" not in message and "csekit[st]" in message
        assert ("prompt" in message) if pipeline[3] else ("module" in message)
        return
    embed, info = load_embedder(str(folder), device="cpu")
    vectors = embed(SENTENCES)
    if pipeline[2]:  # Normalize: cosine scores see the direction only, which the reader keeps
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, atol=1e-5, rtol=0)
    assert info["max_length"] == 24


def test_the_embedded_minilm_is_scored_alike_with_and_without_sentence_transformers(minilm_path, monkeypatch):
    with_st, info = load_embedder(str(minilm_path), device="cpu")
    assert info["modules"] == ["Transformer", "Pooling(mean)", "Normalize"]
    first = with_st(SENTENCES)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    without, plain = load_embedder(str(minilm_path), device="cpu")
    assert {key: plain[key] for key in info} == info  # the record names the same pipeline either way
    second = without(SENTENCES)
    second /= np.linalg.norm(second, axis=1, keepdims=True)
    np.testing.assert_allclose(first, second, atol=1e-5, rtol=0)


def test_evaluate_records_the_pipeline_it_applied(st_folders, tmp_path, capsys):
    folder = st_folders[("cls", True, True, None), "old"]
    output = tmp_path / "record.json"
    assert cli.main(["evaluate", str(folder), "--output", str(output), "--device", "cpu"]) == 0
    record = json.loads(output.read_text())
    assert record["modules"] == ["Transformer", "Pooling(cls)", "Dense(32->16)", "Normalize"]
    assert record["dimension"] == 16 and record["prompt"] is None
    assert record["pooler"] == "sentence-transformers: Transformer > Pooling(cls) > Dense(32->16) > Normalize"


@pytest.mark.parametrize("entry, why", [
    ({"path": "../outside", "type": "sentence_transformers.models.Dense"}, "not a sub-folder"),
    ({"path": "/etc", "type": "sentence_transformers.models.Dense"}, "not a sub-folder"),
    ({"path": "2_Custom", "type": "my_package.MyModule"}, "not a sentence-transformers module"),
])
def test_a_module_csekit_cannot_apply_safely_is_refused_in_one_line(st_folders, tmp_path, entry, why):
    source = st_folders[("mean", False, False, None), "new"]
    folder = tmp_path / "folder"
    import shutil

    shutil.copytree(source, folder)
    (folder / "2_Custom").mkdir()
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules + [{"idx": 2, "name": "2", **entry}]))
    with pytest.raises(DataError, match=why) as refused:
        load_embedder(str(folder), device="cpu")
    assert "\n" not in str(refused.value)


def test_a_module_folder_with_pickled_weights_only_is_refused(st_folders, tmp_path):
    import shutil

    folder = tmp_path / "folder"
    shutil.copytree(st_folders[("mean", True, False, None), "new"], folder)
    dense = folder / "2_Dense"
    (dense / "model.safetensors").rename(dense / "pytorch_model.bin")
    with pytest.raises(DataError, match="pickled weights only"):
        load_embedder(str(folder), device="cpu")


def test_a_plain_export_scores_what_its_csekit_source_scores(saved_tiny_model, tmp_path):
    from csekit.publishing.st_export import export_sentence_transformers

    out = tmp_path / "plain"
    export_sentence_transformers(saved_tiny_model, out, layout="plain")
    source, _ = load_embedder(str(saved_tiny_model), device="cpu")
    exported, info = load_embedder(str(out), device="cpu")
    assert info["pooler"] == "sentence-transformers: Transformer > Pooling(mean)"
    first, second = source(SENTENCES), exported(SENTENCES)
    first /= np.linalg.norm(first, axis=1, keepdims=True)
    second /= np.linalg.norm(second, axis=1, keepdims=True)
    np.testing.assert_allclose(first, second, atol=1e-5, rtol=0)
