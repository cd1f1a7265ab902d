"""``csekit evaluate MODEL --mteb TASK`` runs the mteb package on the model, with mteb's own task loading.

mteb/stsbenchmark-sts is served by the loopback Hub (tests/fake_hub.py) from the synthetic STS-B test file, so the
run goes through mteb's real path: ``datasets.load_dataset`` of the pinned revision, then the Hugging Face datasets
cache, which a second run reads with ``HF_HUB_OFFLINE=1``. The oracle is csekit's own STS-B score of the same pairs:
mteb's Spearman of cosine must equal it.
"""

import gzip
import io
import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from csekit.evaluation.score_cache import model_revision
from csekit.evaluation.sts import load_sts_task
from fake_hub import FakeHub

pytest.importorskip("mteb")


def stsbenchmark_repo(data_dir) -> dict:
    pairs = load_sts_task(data_dir, "STSBenchmark", "test")
    rows = [{"sentence1": a, "sentence2": b, "score": float(score)}
            for a, b, score in zip(pairs.sentences1, pairs.sentences2, pairs.scores)]
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as stream:
        stream.write("".join(json.dumps(row) + "\n" for row in rows).encode())
    return {("datasets", "mteb/stsbenchmark-sts"): {"test.jsonl.gz": buffer.getvalue()}}


def evaluate(*args, env: dict, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "csekit", "evaluate", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})


def test_mteb_stsbenchmark_equals_csekits_score_online_then_offline(saved_tiny_model, data_dir, tmp_path):
    home = {"HF_HOME": str(tmp_path / "hf")}  # an empty Hugging Face cache
    with FakeHub(stsbenchmark_repo(data_dir)) as hub:
        online = evaluate(str(saved_tiny_model), "--mteb", "STSBenchmark", cwd=tmp_path,
                          env={**home, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"})
        assert online.returncode == 0, online.stderr[-3000:]
        model_requests = [path for _, path in hub.requests if "tiny_simcse" in path or "/api/models/" in path]
        assert model_requests == []  # a local model folder is never looked up on the Hub
    output = tmp_path / "results.json"
    offline = evaluate(str(saved_tiny_model), "--mteb", "STSBenchmark", "--tasks", "sts", "--output", str(output),
                       cwd=tmp_path, env={**home, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr[-3000:]
    record = json.loads(output.read_text())
    assert abs(record["mteb"]["STSBenchmark"] - record["sts"]["STSBenchmark"]) <= 0.05
    # a task mteb marks superseded is scored as asked, with a warning naming its successor
    assert "superseded by STSBenchmark.v2" in offline.stderr
    # mteb's own results files beside the record, read back by mteb's own loader
    from mteb.cache import ResultCache
    from mteb.models.model_meta import ModelMeta

    name = f"csekit/{saved_tiny_model.name}"
    [task_file] = record["protocol"]["mteb"]["results_files"]
    # the revision of a local folder is its content hash: other weights, another revision
    revision = model_revision(saved_tiny_model).partition(":")[2][:40]
    assert task_file == f"results/{name.replace('/', '__')}/{revision}/STSBenchmark.json"
    loaded = ResultCache(tmp_path).load_results(models=[name], include_remote=False, require_model_meta=True)
    [model_result] = loaded.model_results
    [task_result] = model_result.task_results
    assert abs(100 * task_result.get_score() - record["mteb"]["STSBenchmark"]) <= 0.01  # mteb keeps 5 digits
    meta = ModelMeta.model_validate(json.loads((tmp_path / task_file).with_name("model_meta.json").read_text()))
    assert (meta.name, meta.embed_dim, meta.similarity_fn_name) == (name, 32, "cosine")
    weights = [load_file(path) for path in saved_tiny_model.rglob("*.safetensors")]  # the encoder/ module's too
    assert meta.n_parameters == sum(t.numel() for tensors in weights for t in tensors.values())
    # MTEB's results keep MTEB's names and dataset ids, SentEval's keep SentEval's
    assert record["protocol"]["mteb"]["tasks"]["STSBenchmark"]["dataset"] == "mteb/stsbenchmark-sts"
    assert "STSBenchmark" in record["protocol"]["sts"]["tasks"]


def test_unknown_mteb_task_is_one_line_before_any_work(saved_tiny_model, tmp_path, capsys):
    from csekit import cli

    output = tmp_path / "scores.json"
    assert cli.main(["evaluate", str(saved_tiny_model), "--mteb", "NoSuchTask", "--output", str(output)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("csekit: error: --mteb:") and len(captured.err.strip().splitlines()) == 1
    assert captured.out == "" and not output.exists()


def test_mteb_task_data_is_checked_before_any_other_suite(saved_tiny_model, tmp_path):
    """An MTEB task whose data cannot be had (offline, empty cache) stops the run in one line before SentEval's STS
    suite runs, not after it."""
    result = evaluate(str(saved_tiny_model), "--mteb", "STS12", "--tasks", "sts", cwd=tmp_path,
                      env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("csekit: error: --mteb STS12: its data (mteb/sts12-sts) cannot be read")
    assert len(result.stderr.strip().splitlines()) == 1 and "STS12" not in result.stdout  # no STS table printed


def test_evaluate_folder_mteb_adds_to_the_folders_record_and_card_and_leaves_the_rest(saved_tiny_model, data_dir,
                                                                                      tmp_path):
    """``csekit evaluate FOLDER --mteb TASK`` (or ``--output FOLDER/eval_results.json``) adds its scores to the
    folder's own record, atomically, keeping what training wrote; the card follows with MTEB in its model-index. A
    setting that scores something other than the folder's model is refused there, and the record is unchanged."""
    import shutil

    from huggingface_hub import ModelCard

    from csekit import cli

    folder = tmp_path / "model"
    shutil.copytree(saved_tiny_model, folder)
    assert cli.main(["evaluate", str(folder), "--output", str(folder / "eval_results.json")]) == 0
    record = json.loads((folder / "eval_results.json").read_text())
    record["training_curve"] = [{"step": 2, "loss": 1.5}]  # what a run keeps beside the scores
    (folder / "eval_results.json").write_text(json.dumps(record))
    assert cli.main(["card", str(folder), "--figure", "never"]) == 0
    with FakeHub(stsbenchmark_repo(data_dir)) as hub:
        run = evaluate(str(folder), "--mteb", "STSBenchmark", cwd=tmp_path,
                       env={"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"added to {folder / 'eval_results.json'}: mteb" in run.stdout
    merged = json.loads((folder / "eval_results.json").read_text())
    assert {key: merged[key] for key in record} == {**record, "protocol": merged["protocol"]}
    assert merged["protocol"]["sts"] == record["protocol"]["sts"] and "STSBenchmark" in merged["mteb"]
    card = ModelCard.load(folder / "README.md")
    mteb_rows = [result for result in card.data.eval_results if result.dataset_type == "mteb/stsbenchmark-sts"]
    assert [result.metric_value for result in mteb_rows] == [merged["mteb"]["STSBenchmark"]]
    before = (folder / "eval_results.json").read_bytes()
    for flags in (["--pooler", "cls"], ["--truncate-dim", "8"], ["--max-length", "16"], ["--sts-aggregation", "mean"]):
        argv = ["evaluate", str(folder), "--output", str(folder / "eval_results.json"), *flags]
        assert cli.main(argv) == 2
    assert (folder / "eval_results.json").read_bytes() == before


def test_a_second_mteb_run_adds_its_tasks_to_the_folders_record_and_keeps_the_first(tmp_path):
    """Two ``--mteb`` runs into one folder's record: the second's tasks join the first's (scores, protocol entries
    and results files), a task scored again is replaced, and what training wrote stays."""
    from csekit.evaluation.cli import add_to_folder_record

    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps({"sts": {"STSBenchmark": 80.0}, "training_curve": [1], "protocol": {"sts": "p"}}))
    first = {"mteb": {"STS12": 70.0, "STS13": 71.0}, "protocol": {"mteb": {
        "version": "2", "tasks": {"STS12": {"main_score": "a"}, "STS13": {"main_score": "b"}},
        "results_files": ["results/m/r/STS12.json", "results/m/r/STS13.json"]}}}
    add_to_folder_record(path, first)
    second = {"mteb": {"STS13": 72.0, "STS14": 73.0}, "protocol": {"mteb": {
        "version": "2", "tasks": {"STS13": {"main_score": "b"}, "STS14": {"main_score": "c"}},
        "results_files": ["results/m/r/STS13.json", "results/m/r/STS14.json"]}}}
    merged = add_to_folder_record(path, second)
    assert merged["mteb"] == {"STS12": 70.0, "STS13": 72.0, "STS14": 73.0}
    assert sorted(merged["protocol"]["mteb"]["tasks"]) == ["STS12", "STS13", "STS14"]
    assert merged["protocol"]["mteb"]["results_files"] == [f"results/m/r/STS1{i}.json" for i in (2, 3, 4)]
    assert merged["training_curve"] == [1] and merged["sts"] == {"STSBenchmark": 80.0}
    assert json.loads(path.read_text()) == merged


def test_mteb_results_without_mteb_and_an_output_folder_are_refused_in_one_line(saved_tiny_model, tmp_path, capsys):
    from csekit import cli

    assert cli.main(["evaluate", str(saved_tiny_model), "--mteb-results", str(tmp_path / "r")]) == 2
    assert "--mteb-results" in capsys.readouterr().err
    assert cli.main(["evaluate", str(saved_tiny_model), "--output", f"{tmp_path / 'new'}/"]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and not (tmp_path / "r").exists()


# mteb picks the task name's prompt over the task type's; the second key is mteb's composed form
PROMPTS = {"STS": "A sentence: ", "STSBenchmark": "Represent the meaning of this sentence: ",
           "Retrieval-query": "Find the passage for: "}
MTEB_WRAPPER = """
import json, sys
import mteb
from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper
from sentence_transformers import SentenceTransformer

folder, prompts, plain = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
model = SentenceTransformerEncoderWrapper(SentenceTransformer(folder, device="cpu"), model_prompts=prompts)
result = mteb.evaluate(model, [mteb.get_task("STSBenchmark")], cache=None, show_progress_bar=False)
score = 100 * result.task_results[0].get_score()
assert not [name for name in sys.modules if name.split(".")[0] == "csekit"]  # the oracle ran without csekit
from csekit import cli

assert cli.main(["evaluate", folder, "--mteb", "STSBenchmark", "--output", plain]) == 0
print(json.dumps(score))
"""


def test_mteb_prompts_are_picked_and_applied_as_mtebs_own_sentence_transformers_wrapper_does(
        saved_tiny_model, data_dir, tmp_path):
    """The oracle is mteb's own SentenceTransformerEncoderWrapper on the folder with the same model_prompts."""
    pytest.importorskip("sentence_transformers")
    home = {"HF_HOME": str(tmp_path / "hf")}
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    with FakeHub(stsbenchmark_repo(data_dir)) as hub:
        run = evaluate(str(saved_tiny_model), "--mteb", "STSBenchmark", "--mteb-prompts", str(prompts), "--output",
                       str(tmp_path / "prompted.json"), cwd=tmp_path,
                       env={**home, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"})
    assert run.returncode == 0, run.stderr[-3000:]
    # the oracle, then csekit's unprompted run, in one interpreter, offline on the cache the first run filled
    oracle = subprocess.run([sys.executable, "-c", MTEB_WRAPPER, str(saved_tiny_model), json.dumps(PROMPTS),
                             str(tmp_path / "plain.json")], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env={**os.environ, **home, "HF_HUB_OFFLINE": "1"})
    assert oracle.returncode == 0, oracle.stderr[-3000:]
    prompted = json.loads((tmp_path / "prompted.json").read_text())
    score = prompted["mteb"]["STSBenchmark"]
    assert abs(score - json.loads(oracle.stdout.strip().splitlines()[-1])) <= 0.01
    assert abs(score - json.loads((tmp_path / "plain.json").read_text())["mteb"]["STSBenchmark"]) > 0.05  # live
    assert prompted["protocol"]["mteb"]["prompts"] == PROMPTS


def test_mteb_prompts_mteb_cannot_read_are_one_line_before_any_work(saved_tiny_model, tmp_path, capsys):
    from csekit import cli

    unread = "--mteb-prompts: Foo-query, NoSuchTask: not keys mteb reads (a task name, a task type, query / document"
    for content, line in ((json.dumps({"NoSuchTask": "x: ", "STS": "y: ", "Foo-query": "z: "}), unread),
                          (json.dumps({"STS": ""}), "--mteb-prompts: a JSON object of non-blank prompts"),
                          ("[1]", "--mteb-prompts: a JSON object"), ("{", "not valid JSON")):
        path = tmp_path / "prompts.json"
        path.write_text(content)
        output = tmp_path / "out.json"
        assert cli.main(["evaluate", str(saved_tiny_model), "--mteb", "STSBenchmark", "--mteb-prompts", str(path),
                         "--output", str(output)]) == 2
        assert line in capsys.readouterr().err and not output.exists()
    assert cli.main(["evaluate", str(saved_tiny_model), "--mteb-prompts", str(path)]) == 2
    assert "--mteb-prompts gives instructions for MTEB tasks: it needs --mteb" in capsys.readouterr().err
