"""``csekit export-onnx``: one graph from token ids and mask to the pooled, headed (and normalised) sentence vector,
equal to ``encode`` on the STS-B test sentences; its int8 variant; ``csekit evaluate --backend onnx``; refusals."""

import json
import os
import shutil
import tempfile

import numpy as np
import pytest

from conftest import mounted_tmpfs
from csekit import cli
from csekit.evaluation.sts import STSEvaluator
from csekit.modeling import SimCSEConfig, SimCSEModel
from test_sentence_transformers_layout import save_model

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def save(folder, tokenizer, **options):
    return save_model(folder, tokenizer, SimCSEModel, SimCSEConfig, options)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer) -> dict:
    """A csekit model whose inference is [CLS] -> MLP -> Normalize (a head and normalisation inside the graph),
    exported in float32 and in int8."""
    root = tmp_path_factory.mktemp("onnx")
    model = save(root / "model", tokenizer, pooler_type="cls", mlp_only_train=False,
                 sentence_transformers_settings={"normalize": True})
    for name, extra in (("fp32", []), ("int8", ["--quantize", "int8"])):
        assert cli.main(["export-onnx", str(root / "model"), str(root / name), *extra]) == 0
    return {"model": model, "root": root}


def run_graph(folder, sentences: list) -> np.ndarray:
    """The exported graph run with onnxruntime directly: the tokenizer beside it, truncation at the recorded length."""
    import onnxruntime
    from transformers import AutoTokenizer

    record = json.loads((folder / "onnx_export.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    rows = []
    for start in range(0, len(sentences), 16):
        tokens = tokenizer(sentences[start:start + 16], padding=True, truncation=True,
                           max_length=record["max_length"], return_tensors="np")
        feed = {name: tokens[name].astype(np.int64) for name in ("input_ids", "attention_mask")}
        rows.append(session.run(["sentence_embedding"], feed)[0])
    return np.concatenate(rows)


def test_the_graph_equals_encode_on_the_sts_b_test_sentences(exported, data_dir):
    sentences = STSEvaluator(data_dir, ["STSBenchmark"], split="test").sentences()
    expected = exported["model"].encode(sentences, normalize=True)  # the folder's Normalize module
    actual = run_graph(exported["root"] / "fp32", sentences)
    assert actual.shape == expected.shape == (len(sentences), 32)
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(actual, axis=1), 1.0, atol=1e-5)
    record = json.loads((exported["root"] / "fp32" / "onnx_export.json").read_text())
    assert record["normalize"] is True and record["quantize"] is None and record["dimension"] == 32
    assert record["check"]["max_abs_difference"] <= 1e-5


def test_the_int8_graph_has_int8_weights_and_stays_close(exported, data_dir):
    import onnx

    graph = onnx.load(str(exported["root"] / "int8" / "model.onnx"))
    operators = {node.op_type for node in graph.graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= operators
    assert "DynamicQuantizeLinear" not in {node.op_type for node in
                                           onnx.load(str(exported["root"] / "fp32" / "model.onnx")).graph.node}
    sentences = STSEvaluator(data_dir, ["STSBenchmark"], split="test").sentences()[:64]
    full, quantized = (run_graph(exported["root"] / name, sentences) for name in ("fp32", "int8"))
    cosine = (full * quantized).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(quantized, axis=1)
    assert cosine.min() > 0.9 and not np.allclose(full, quantized, atol=1e-5)
    record = json.loads((exported["root"] / "int8" / "onnx_export.json").read_text())
    assert record["quantize"] == "int8" and record["check"]["min_cosine"] > 0.9
    # one weight scale per output channel (INT8_SETTINGS): every MatMulInteger's int8 weight has a vector of scales
    initializers = {tensor.name: tensor for tensor in graph.graph.initializer}
    weights = [node.input[1] for node in graph.graph.node if node.op_type == "MatMulInteger"]
    assert weights and all(list(initializers[name.replace("_quantized", "_scale")].dims) == [
        initializers[name].dims[1]] for name in weights)
    # the remaining dependence on the batch is measured and recorded
    assert 0.9 < record["check"]["batch_min_cosine"] <= 1.0 + 1e-6
    assert record["check"]["settings"] == {"weight_type": "QInt8", "per_channel": True}


def test_an_int8_graph_too_far_from_float32_is_refused_and_nothing_is_written(exported, monkeypatch, tmp_path,
                                                                               capsys):
    from csekit.publishing import onnx_export

    monkeypatch.setattr(onnx_export, "INT8_MIN_COSINE", 1.0)  # no int8 graph reaches cosine 1 on every sentence
    out = tmp_path / "refused"
    assert cli.main(["export-onnx", str(exported["root"] / "model"), str(out), "--quantize", "int8"]) == 2
    assert "int8 moves this model's vectors too far (lowest cosine" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".*"))


def test_evaluate_scores_the_export_as_the_trained_model(exported, tmp_path):
    results = {}
    for name, argv in (("torch", [str(exported["root"] / "model")]),
                       ("onnx", [str(exported["root"] / "fp32"), "--backend", "onnx"]),
                       ("int8", [str(exported["root"] / "int8"), "--backend", "onnx", "--truncate-dim", "16"])):
        assert cli.main(["evaluate", *argv, "--output", str(tmp_path / f"{name}.json")]) == 0
        results[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert results["onnx"]["sts"] == results["torch"]["sts"]  # cosine: Normalize changes nothing
    assert results["onnx"]["backend"] == "onnx" and results["int8"]["quantize"] == "int8"
    assert results["int8"]["truncate_dim"] == 16


def test_sentence_transformers_onnx_backend_reads_a_csekit_folder(exported, data_dir, tmp_path):
    """``SentenceTransformer(folder, backend="onnx")``: sentence-transformers' own ONNX path, where optimum exports the
    folder's ``encoder/`` Transformer module and sentence-transformers runs pooling, head and Normalize in PyTorch."""
    try:  # the class sentence-transformers imports (optimum.onnxruntime imports its members lazily)
        from optimum.onnxruntime import ORTModelForFeatureExtraction  # noqa: F401
    except ImportError:
        pytest.skip("sentence-transformers[onnx] is not installed: its optimum-onnx (releases up to 0.1.0) requires "
                    "transformers<4.58, sentence-transformers 6 transformers>=5, so pip cannot install the extra")
    import shutil

    from sentence_transformers import SentenceTransformer

    folder = shutil.copytree(exported["root"] / "model", tmp_path / "model")  # whatever optimum writes stays here
    sentences = STSEvaluator(data_dir, ["STSBenchmark"], split="test").sentences()
    actual = SentenceTransformer(str(folder), backend="onnx").encode(sentences, convert_to_numpy=True)
    np.testing.assert_allclose(actual, exported["model"].encode(sentences, normalize=True), atol=1e-5, rtol=0)


def test_what_cannot_be_exported_or_scored_is_refused_in_one_line(exported, tokenizer, tmp_path, capsys):
    save(tmp_path / "layers", tokenizer, pooler_type="avg_first_last")  # no sentence-transformers modules
    capsys.readouterr()
    cases = [
        (["export-onnx", str(tmp_path / "layers"), str(tmp_path / "out")], "no sentence-transformers modules"),
        (["export-onnx", str(exported["root"] / "model"), str(exported["root"] / "fp32")], "already exists"),
        (["evaluate", str(exported["root"] / "model"), "--backend", "onnx"], "not an ONNX export"),
        (["evaluate", str(exported["root"] / "fp32"), "--backend", "onnx", "--pooler", "avg"], "inside its graph"),
        (["evaluate", str(exported["root"] / "fp32"), "--backend", "onnx", "--truncate-dim", "33"],
         "--truncate-dim 33"),
    ]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and message in error[0], (argv, error)
    assert not (tmp_path / "out").exists()


def test_a_missing_onnxruntime_is_one_line_naming_the_extra(exported, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    assert cli.main(["evaluate", str(exported["root"] / "fp32"), "--backend", "onnx"]) == 2
    assert cli.main(["export-onnx", str(exported["root"] / "model"), str(exported["root"] / "new")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == ["csekit: error: --backend onnx needs onnxruntime: pip install 'csekit[onnx]'",
                      "csekit: error: export-onnx needs onnxruntime: pip install 'csekit[onnx]'"]


def test_a_bare_tokenizers_runtime_gives_encodes_vectors_on_long_text(exported):
    """The shipped tokenizer.json truncates at the recorded length, so tokenizers + onnxruntime alone (no csekit,
    no transformers) feed the graph what encode feeds the model."""
    import onnxruntime
    from tokenizers import Tokenizer

    folder = exported["root"] / "fp32"
    long = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)  # over 700 tokens
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    encoding = tokenizer.encode(long)
    record = json.loads((folder / "onnx_export.json").read_text())
    assert len(encoding.ids) == record["max_length"]
    session = onnxruntime.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = {"input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64)}
    actual = session.run(["sentence_embedding"], feed)[0]
    np.testing.assert_allclose(actual, exported["model"].encode([long], normalize=True), atol=1e-5, rtol=0)


def test_the_export_is_checked_on_200_sentences_of_varied_length(exported):
    from csekit.publishing.onnx_export import check_sentences

    lengths = [len(sentence.split()) for sentence in check_sentences()]
    assert len(lengths) == 200 and min(lengths) <= 5 and max(lengths) >= 290
    for name in ("fp32", "int8"):
        check = json.loads((exported["root"] / name / "onnx_export.json").read_text())["check"]
        assert check["sentences"] == 200 and 0 < check["min_cosine"] <= check["mean_cosine"] <= 1.0 + 1e-6


def test_a_damaged_graph_another_opset_and_a_second_writer_are_one_line(exported, tmp_path, capsys):
    from csekit.atomic import RunLock

    damaged = tmp_path / "damaged"
    shutil.copytree(exported["root"] / "fp32", damaged)
    graph = damaged / "model.onnx"
    graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
    out = tmp_path / "out"
    held = RunLock(tmp_path / ".out.csekit-lock", "OUT", out)  # another export of the same folder, running
    held.record = {"pid": 1, "host": held.record["host"]}  # a live process (init) holds it
    held.acquire()
    capsys.readouterr()
    cases = [(["evaluate", str(damaged), "--backend", "onnx"], "onnxruntime cannot load this graph"),
             (["export-onnx", str(exported["root"] / "model"), str(tmp_path / "opset7"), "--opset", "7"],
              "--opset 7: torch's exporter wrote opset 18"),
             (["export-onnx", str(exported["root"] / "model"), str(out)], "OUT " + str(out) + ": in use by process 1")]
    for argv, message in cases:
        assert cli.main(argv) == 2, argv
        error = [line for line in capsys.readouterr().err.strip().splitlines() if "Loading weights" not in line]
        assert len(error) == 1 and message in error[0], (argv, error)
    assert not out.exists() and not (tmp_path / "opset7").exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == [".out.csekit-lock", "damaged"]


@pytest.fixture
def second_disk(tmp_path):
    """A tmpfs mounted for the test: a real second file system beside the temporary folder (root only)."""
    with mounted_tmpfs(tmp_path / "disk", "200m") as folder:
        yield folder


def test_every_staged_write_works_on_another_file_system(exported, second_disk, data_dir, capsys):
    """export-onnx, export-st, card and evaluate --output onto a second file system (no cross-device rename), then
    the same export onto a full one: one line, nothing left behind."""
    assert os.stat(second_disk).st_dev != os.stat(tempfile.gettempdir()).st_dev
    model = exported["root"] / "model"
    assert cli.main(["export-onnx", str(model), str(second_disk / "onnx")]) == 0
    assert cli.main(["export-st", str(model), str(second_disk / "st")]) == 0
    shutil.copytree(model, second_disk / "model")
    assert cli.main(["evaluate", str(model), "--output", str(second_disk / "model" / "eval_results.json")]) == 0
    assert cli.main(["card", str(second_disk / "model"), "--figure", "never"]) == 0
    assert (second_disk / "onnx" / "model.onnx").is_file() and (second_disk / "st" / "modules.json").is_file()
    filler = second_disk / "filler"
    free = os.statvfs(second_disk).f_bavail * os.statvfs(second_disk).f_frsize
    filler.write_bytes(b"\0" * max(free - 2**20, 0))  # 1 MiB left: less than the graph
    capsys.readouterr()
    assert cli.main(["export-onnx", str(model), str(second_disk / "full")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "no space left on device" in line
    assert not (second_disk / "full").exists() and not list(second_disk.glob(".full*"))
