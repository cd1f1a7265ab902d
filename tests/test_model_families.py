"""A sentence-transformers folder is read as the family it declares, never converted into another.

``SentenceTransformer(folder)`` loads a ``SparseEncoder`` (SPLADE) or ``CrossEncoder`` folder by *converting* it
into a mean-pooled dense model; csekit refuses both (and any family it does not read) in one line naming the family,
for scoring and for training alike. Dense folders that sentence-transformers loads as they are (a Router, a
StaticEmbedding, the older layout with the Transformer in ``0_Transformer/``) are scored with the vectors
sentence-transformers gives them, the oracle; a command that needs a model at the folder's root (training, export,
``--pooler``) refuses them in one line, never with a false "no weights".
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from csekit import cli
from csekit.errors import DataError
from csekit.evaluation.encoders import load_embedder
from csekit.loading import resolve_model_path

pytest.importorskip("sentence_transformers")
from sentence_transformers import CrossEncoder, SentenceTransformer, SparseEncoder  # noqa: E402
from sentence_transformers.base.modules import Router, Transformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling, StaticEmbedding  # noqa: E402
from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling  # noqa: E402
from transformers import BertForMaskedLM  # noqa: E402

from conftest import tiny_bert_config  # noqa: E402

SENTENCES = ["A man is playing a guitar.", "Two dogs run across a snowy field.", "Hi."]


@pytest.fixture(scope="module")
def families(tmp_path_factory, tiny_backbone, tokenizer):
    """``{name: folder}``: each saved by sentence-transformers itself on tiny random weights."""
    root = tmp_path_factory.mktemp("families")
    torch.manual_seed(3)
    masked_lm = root / "masked-lm"
    BertForMaskedLM(tiny_bert_config(vocab_size=len(tokenizer))).save_pretrained(masked_lm)
    tokenizer.save_pretrained(masked_lm)
    SparseEncoder(modules=[MLMTransformer(str(masked_lm)), SpladePooling("max")], device="cpu").save(
        str(root / "sparse"))
    CrossEncoder(str(tiny_backbone), num_labels=1, device="cpu").save(str(root / "cross"))
    old_cross = root / "cross-st4"  # sentence-transformers 4 wrote a plain transformers folder with this entry
    shutil.copytree(tiny_backbone, old_cross)
    config = json.loads((old_cross / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.activation.Sigmoid", "version": "4.1.0"}
    (old_cross / "config.json").write_text(json.dumps(config))
    multi = root / "multi-vector"
    shutil.copytree(tiny_backbone, multi)
    SentenceTransformer(modules=[Transformer(str(tiny_backbone))], device="cpu").save(str(multi))
    st_config = json.loads((multi / "config_sentence_transformers.json").read_text())
    (multi / "config_sentence_transformers.json").write_text(json.dumps({**st_config,
                                                                        "model_type": "MultiVectorEncoder"}))
    SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_dim=16)], device="cpu").save(
        str(root / "static"))
    router = Router.for_query_document(
        query_modules=[Transformer(str(tiny_backbone)), Pooling(32, "mean")],
        document_modules=[Transformer(str(tiny_backbone)), Pooling(32, "cls")])
    SentenceTransformer(modules=[router], device="cpu").save(str(root / "router"))
    plain = root / "plain"
    transformer = Transformer(str(tiny_backbone))
    SentenceTransformer(modules=[transformer, Pooling(32, "mean")], device="cpu").save(str(plain))
    old = root / "old-layout"  # sentence-transformers 2's layout: the Transformer in its own numbered folder
    (old / "0_Transformer").mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "sentence_bert_config.json", "tokenizer.json",
                 "tokenizer_config.json"):
        shutil.copy(plain / name, old / "0_Transformer" / name)
    shutil.copytree(plain / "1_Pooling", old / "1_Pooling")
    (old / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    return {path.name: path for path in root.iterdir()}


@pytest.mark.parametrize("name, family", [("sparse", "SparseEncoder"), ("cross", "CrossEncoder"),
                                          ("cross-st4", "CrossEncoder"), ("multi-vector", "MultiVectorEncoder")])
def test_another_family_is_refused_in_one_line_never_converted(families, name, family, tmp_path, capsys):
    folder = str(families[name])
    message = f"{folder}: a sentence-transformers {family} folder"
    for load in (lambda: load_embedder(folder, device="cpu"), lambda: resolve_model_path(folder),
                 lambda: resolve_model_path(folder, any_pipeline=True)):
        with pytest.raises(DataError, match="never converts one family into another") as error:
            load()
        assert str(error.value).startswith(message)
    assert cli.main(["evaluate", folder, "--tasks", "sts", "--output", str(tmp_path / "r.json")]) == 2
    assert capsys.readouterr().err.strip().startswith(f"csekit: error: {message}")
    assert not (tmp_path / "r.json").exists()


def removed(folder):
    (folder / "config_sentence_transformers.json").unlink()


def declared(value):
    def edit(folder):
        path = folder / "config_sentence_transformers.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "model_type": value}))
    return edit


def modules_renamed(folder):  # the modules' class paths rewritten: their class names still say SPLADE
    path = folder / "modules.json"
    path.write_text(path.read_text().replace("sentence_transformers.sparse_encoder", "my_package"))
    removed(folder)


@pytest.mark.parametrize("edit", [removed, declared(None), declared("SentenceTransformer"), modules_renamed,
                                  lambda folder: (folder / "modules.json").unlink()],
                         ids=["declaration removed", "declaration null", "declared dense", "module paths rewritten",
                              "modules.json lost"])
def test_a_sparse_folder_is_refused_whatever_its_declaration_says_or_lacks(families, edit, tmp_path):
    """The family is read from the module types too (and from the declaration when modules.json is gone), so a
    sparse folder is never scored as a dense one."""
    folder = tmp_path / "sparse"
    shutil.copytree(families["sparse"], folder)
    edit(folder)
    with pytest.raises(DataError, match="never converts one family into another"):
        load_embedder(str(folder), device="cpu")


@pytest.mark.parametrize("name, modules", [("static", "StaticEmbedding"), ("router", "Router(default route: document)"),
                                           ("old-layout", "Transformer > Pooling(mean)")])
def test_a_dense_folder_sentence_transformers_loads_as_it_is_is_scored_with_its_own_vectors(families, name, modules):
    folder = families[name]
    embed, info = load_embedder(str(folder), device="cpu")
    expected = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    np.testing.assert_allclose(embed(SENTENCES), expected, atol=1e-6, rtol=0)
    assert info["pooler"] == f"sentence-transformers: {modules}"


@pytest.mark.parametrize("name", ["static", "router", "old-layout"])
def test_a_pipeline_without_a_model_at_its_root_is_refused_where_one_is_needed(families, name, tmp_path, capsys):
    folder = str(families[name])
    with pytest.raises(DataError, match="no model at the folder's root") as error:
        resolve_model_path(folder)
    assert "no weights" not in str(error.value)
    with pytest.raises(DataError, match="no model at the folder's root"):
        load_embedder(folder, pooler="avg", device="cpu")
    assert cli.main(["export-onnx", folder, str(tmp_path / "onnx")]) == 2
    assert "no model at the folder's root" in capsys.readouterr().err


def test_a_module_entry_without_a_path_is_one_line(families, tmp_path, capsys):
    folder = tmp_path / "no-path"
    shutil.copytree(families["plain"], folder)
    entries = json.loads((folder / "modules.json").read_text())
    del entries[1]["path"]
    (folder / "modules.json").write_text(json.dumps(entries))
    assert cli.main(["evaluate", str(folder), "--tasks", "sts"]) == 2
    assert capsys.readouterr().err.strip() == (f"csekit: error: {Path(folder) / 'modules.json'}: module 1 (Pooling) "
                                               "has no path; refused (save the model again with sentence-transformers)")
