"""The Hub paths, offline: model ids through a hand-built Hugging Face cache (and a loopback Hub), `csekit download`
from a loopback Hub (verified, atomic, nothing left by a truncated or corrupt transfer), Hub datasets as training
files."""

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import datasets
import numpy as np
import pytest
from datasets import Dataset

from conftest import REPO_ROOT
from csekit.download import CORPORA, WIKI1M_QUICKSTART_SENTENCES, download
from csekit.errors import DataError
from csekit.loading import resolve_model_path
from csekit.trainers.data import load_training_dataset
from fake_hub import COMMIT, FakeHub, build_hub_cache


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache (HF_HUB_CACHE) in a temp folder; offline, as the whole suite runs."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    return cache


@pytest.fixture
def online(monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def run_csekit(*args, env_extra: dict, cwd) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "csekit", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


# ------------------------------------------------------------------------------------------------ model ids
def test_every_model_argument_takes_a_cached_hub_id_offline(saved_tiny_model, hub_cache, tmp_path, data_dir):
    snapshot = build_hub_cache(hub_cache, "someone/tiny-simcse", saved_tiny_model)
    assert resolve_model_path("someone/tiny-simcse") == str(snapshot)

    from csekit.evaluation.encoders import load_embedder
    from csekit.extraction.extractor import load_source
    from csekit.publishing.model_card import write_model_card
    from csekit.publishing.st_export import export_sentence_transformers

    sentences = ["a man plays a guitar", "two dogs run"]
    by_id, _ = load_embedder("someone/tiny-simcse")
    by_folder, _ = load_embedder(str(saved_tiny_model))
    np.testing.assert_array_equal(by_id(sentences), by_folder(sentences))  # evaluate
    assert load_source("someone/tiny-simcse", data_dir).num_hidden_layers == 2  # extract
    export_sentence_transformers("someone/tiny-simcse", tmp_path / "st")  # export-st
    assert (tmp_path / "st" / "modules.json").is_file()
    record = {"model": "x", "pooler": "avg", "sts": {t: 1.0 for t in ("STS12", "STS13", "STS14", "STS15", "STS16",
                                                                       "STSBenchmark", "SICKRelatedness", "avg")}}
    (snapshot / "eval_results.json").write_text(json.dumps(record))
    with pytest.raises(DataError, match="--output"):  # the cache is not written to
        write_model_card("someone/tiny-simcse", figure="never")
    card = write_model_card("someone/tiny-simcse", figure="never", output=tmp_path / "card.md")  # card
    assert 'from_pretrained("someone/tiny-simcse"' in card.read_text()
    assert not (snapshot / "README.md").exists()


def test_recipe_trains_from_a_cached_hub_id(tiny_backbone, hub_cache, tmp_path, data_dir):
    from csekit.recipe_run import run_recipe
    from csekit.recipes.simcse import RECIPE

    build_hub_cache(hub_cache, "someone/tiny-bert", tiny_backbone)
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"sentence {i} about things" for i in range(16)) + "\n")
    args = RECIPE.parse(["--model_name_or_path", "someone/tiny-bert", "--train_file", str(corpus), "--output_dir",
                         str(tmp_path / "out"), "--per_device_train_batch_size", "8", "--max_steps", "1",
                         "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
                         "--do_test_eval", "false", "--report_to", "none"])
    run_recipe(RECIPE, *args)
    saved = json.loads((tmp_path / "out" / "training_args.json").read_text())
    assert saved["model_args"]["model_name_or_path"] == "someone/tiny-bert"
    assert (tmp_path / "out" / "config.json").is_file() and (tmp_path / "out" / "modules.json").is_file()


def test_uncached_hub_id_offline_is_one_line(tmp_path):
    result = run_csekit("evaluate", "someone/not-cached", env_extra={"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE":
                        str(tmp_path / "empty-cache")}, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "someone/not-cached" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0], result.stderr


def test_hub_id_downloads_through_the_cache_when_online(saved_tiny_model, hub_cache, online, monkeypatch):
    files = {path.relative_to(saved_tiny_model).as_posix(): path.read_bytes()
             for path in saved_tiny_model.rglob("*") if path.is_file()}
    files["pytorch_model.bin"] = b"pickled weights must not be fetched when safetensors exist"
    with FakeHub({("models", "someone/remote-simcse"): files}) as hub:
        monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", hub.url)
        monkeypatch.setattr("huggingface_hub.constants.HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.url + "/{repo_id}/resolve/{revision}/{filename}")
        folder = Path(resolve_model_path("someone/remote-simcse"))
        fetched = [path for method, path in hub.requests if method == "GET" and "/resolve/" in path]
    assert folder == hub_cache / "models--someone--remote-simcse" / "snapshots" / COMMIT
    weights = [name for name in files if name.endswith(".safetensors")]
    assert weights and all((folder / name).read_bytes() == files[name] for name in weights)
    assert not (folder / "pytorch_model.bin").exists() and not any("pytorch_model.bin" in p for p in fetched)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # now cached: works offline
    assert resolve_model_path("someone/remote-simcse") == str(folder)


# ------------------------------------------------------------------------------------------------ csekit download
def senteval_tar() -> bytes:
    """A minimal senteval.tar laid out as SimCSE's (top-level task folders meant for SentEval/data/downstream)."""
    members = {
        "STS/STSBenchmark/sts-test.csv": b"main-captions\tMSRvid\t2012test\t0001\t5.000\ta man\ta man\n",
        "STS/STS12-en-test/STS.input.MSRpar.txt": b"a\tb\n",
        "SICK/SICK_test_annotated.txt": b"pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n",
        "MR/rt-polarity.pos": b"good\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


WIKI = ("\n".join(f"wikipedia sentence number {i}" for i in range(200)) + "\n").encode()


def simcse_repo() -> dict:
    return {("datasets", "princeton-nlp/datasets-for-simcse"): {
        "senteval.tar": senteval_tar(), "wiki1m_for_simcse.txt": WIKI, "nli_for_simcse.csv": b"sent0,sent1,hard_neg\n"
        b"a,b,c\n",
    }}


def leftovers(folder: Path) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".partial" in p.name or p.suffix in
                  (".tmp", ".incomplete"))


def test_download_unpacks_verified_senteval_and_places_corpora(hub_cache, online, tmp_path):
    data = tmp_path / "data"
    with FakeHub(simcse_repo()) as hub:
        downstream = download("senteval", data, endpoint=hub.url)
        wiki = download("wiki1m", data, endpoint=hub.url)
        nli = download("nli", data, endpoint=hub.url)
    assert downstream == data / "senteval" / "downstream"
    assert (downstream / "STS" / "STSBenchmark" / "sts-test.csv").read_bytes().startswith(b"main-captions")
    assert (downstream / "MR" / "rt-polarity.pos").is_file()
    assert wiki.read_bytes() == WIKI and wiki == data / CORPORA["wiki1m"].target
    assert nli.read_text().startswith("sent0,sent1,hard_neg")
    assert leftovers(data) == [] and leftovers(hub_cache) == []
    # the layout csekit reads: the STS loader finds the pair
    from csekit.evaluation.sts import load_sts_task

    assert load_sts_task(data, "STSBenchmark", "test").sentences1 == ["a man"]


@pytest.mark.parametrize("fault, message", [("truncate", "download failed"), ("corrupt", "does not match the Hub")])
def test_failed_download_leaves_nothing_behind(hub_cache, online, tmp_path, fault, message):
    data = tmp_path / "data"
    data.mkdir()
    with FakeHub(simcse_repo(), fault=fault) as hub:
        with pytest.raises(DataError, match=message):
            download("wiki1m", data, endpoint=hub.url)
    assert list(data.iterdir()) == []  # the data folder is as it was
    blobs = list(hub_cache.rglob("blobs/*"))
    assert blobs == [] and leftovers(hub_cache) == []  # no partial or unverified copy stays in the cache


def test_download_cli_uses_hf_endpoint_and_reports_errors_in_one_line(tmp_path):
    with FakeHub(simcse_repo()) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(tmp_path / "cache"),
               "NO_PROXY": "127.0.0.1,localhost", "HF_HUB_DISABLE_TELEMETRY": "1"}
        result = run_csekit("download", "wiki1m", "--data-dir", str(tmp_path / "data"), env_extra=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        assert (tmp_path / "data" / "wiki" / "wiki1m_for_simcse.txt").read_bytes() == WIKI
        again = run_csekit("download", "wiki1m", "--data-dir", str(tmp_path / "data"), env_extra=env, cwd=tmp_path)
        assert "already exists" in again.stdout
    offline = run_csekit("download", "nli", "--data-dir", str(tmp_path / "data"), env_extra={
        "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty")}, cwd=tmp_path)
    assert offline.returncode == 2 and len(offline.stderr.strip().splitlines()) == 1
    assert "HF_HUB_OFFLINE=1" in offline.stderr and not (tmp_path / "data" / "nli").exists()


def release_tar(downstream: Path) -> bytes:
    """A senteval.tar laid out as the release is: SimCSE's ``SentEval/data/downstream/download_dataset.sh`` runs
    ``tar xvf senteval.tar`` inside ``downstream/``, where SentEval reads ``downstream/STS/...``, so the task folders
    (``STS/``, ``SICK/``, ``MR/``, ...) are the tar's top level."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for task in sorted(downstream.iterdir()):
            tar.add(task, arcname=task.name)
    return buffer.getvalue()


def test_quickstart_download_step_places_what_it_trains_and_scores_on(data_dir, tmp_path, monkeypatch):
    """The quickstart's own `csekit download` line, against a loopback Hub serving the release's layout: the files
    land where the quickstart's evaluation and training read them, a second run asks the Hub nothing, and training
    reads exactly the first max_train_samples sentences of the full wiki1m file."""
    import shlex

    import yaml

    from csekit.data import resolve_data_dir, resolve_data_file
    from csekit.evaluation.sts import STS_TASKS, STSEvaluator

    script = (REPO_ROOT / "recipes" / "quickstart.sh").read_text().splitlines()
    steps = [line for line in script if line.startswith("csekit download ")]
    assert len(steps) == 1 and "HF_HUB_OFFLINE=1" not in "\n".join(script)  # never forced offline
    config = yaml.safe_load((REPO_ROOT / "recipes" / "configs" / "quickstart.yaml").read_text())
    limit = config["max_train_samples"]
    assert (config["train_file"], limit) == (CORPORA["wiki1m"].target, WIKI1M_QUICKSTART_SENTENCES)
    wiki = [f"wikipedia sentence {i} of the full file ." for i in range(limit + 500)]
    served = {("datasets", "princeton-nlp/datasets-for-simcse"): {
        "senteval.tar": release_tar(data_dir / "senteval" / "downstream"),
        "wiki1m_for_simcse.txt": ("\n".join(wiki) + "\n").encode()}}
    data = tmp_path / "data"  # a user's default data folder; nothing there yet
    with FakeHub(served) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(tmp_path / "cache"),
               "NO_PROXY": "127.0.0.1,localhost", "HF_HUB_DISABLE_TELEMETRY": "1", "CSEKIT_DATA_DIR": str(data)}
        first = run_csekit(*shlex.split(steps[0])[1:], env_extra=env, cwd=tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        fetched = [path for method, path in hub.requests if method == "GET" and "/resolve/" in path]
        assert len(fetched) == 2  # senteval.tar and wiki1m_for_simcse.txt, once each
        hub.requests.clear()
        again = run_csekit(*shlex.split(steps[0])[1:], env_extra=env, cwd=tmp_path)
        assert again.returncode == 0 and again.stdout.count("already exists") == 2
        assert hub.requests == []  # the second run fetches nothing
    monkeypatch.setenv("CSEKIT_DATA_DIR", str(data))
    assert resolve_data_dir() == data  # where `csekit evaluate` and the recipe look first
    assert STSEvaluator(resolve_data_dir(), STS_TASKS, split="test").pairs.keys() == set(STS_TASKS)
    assert resolve_data_file(config["train_file"]) == data / "wiki" / "wiki1m_for_simcse.txt"
    dataset = load_training_dataset(config["train_file"], max_examples=limit)
    assert dataset["sent0"] == wiki[:limit]


# ------------------------------------------------------------------------------------------------ Hub datasets
def test_training_file_may_be_a_hub_dataset(monkeypatch, tmp_path):
    served = {"org/unsup": Dataset.from_dict({"text": ["first sentence", "", "second sentence", "third"]}),
              "org/pairs": Dataset.from_dict({"sent0": ["a", "b"], "sent1": ["c", "d"], "label": [1, 0]}),
              "org/badcols": Dataset.from_dict({"premise": ["a"], "hypothesis": ["b"]}),
              "org/hole": Dataset.from_dict({"sent0": ["a", "b", "c"], "sent1": ["x", " ", "z"]}),
              "org/tuples": Dataset.from_dict({"hard_neg_2": ["n2"], "sent1": ["p"], "hard_neg_1": ["n1"],
                                               "sent0": ["a"], "score": [0.5]}),
              "org/gap": Dataset.from_dict({"sent0": ["a"], "sent1": ["p"], "hard_neg_2": ["n2"]})}
    calls = []

    def fake_load_dataset(name, config=None, split=None):
        calls.append((name, config, split))
        if name not in served:
            raise FileNotFoundError(f"Dataset '{name}' doesn't exist on the Hub or cannot be accessed.")
        return served[name]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.chdir(tmp_path)  # no local file of that name
    unsup = load_training_dataset("org/unsup", min_examples=2)
    assert unsup.column_names == ["sent0", "example_index"]
    assert unsup["sent0"] == ["first sentence", "second sentence", "third"]
    pairs = load_training_dataset("org/pairs:plain")
    assert pairs.column_names == ["sent0", "sent1", "example_index"]
    assert calls[-1] == ("org/pairs", "plain", "train")
    tuples = load_training_dataset("org/tuples")  # k hard negatives a row, in number order whatever the dataset's
    assert tuples.column_names == ["sent0", "sent1", "hard_neg_1", "hard_neg_2", "example_index"]
    assert tuples[0] == {"sent0": "a", "sent1": "p", "hard_neg_1": "n1", "hard_neg_2": "n2", "example_index": 0}
    with pytest.raises(DataError, match=r"org/gap \(train split\): columns are sent0, sent1, hard_neg_2"):
        load_training_dataset("org/gap")
    with pytest.raises(DataError, match=r"org/badcols \(train split\): columns are premise, hypothesis"):
        load_training_dataset("org/badcols")
    with pytest.raises(DataError, match=r"org/hole \(train split\) row 2: empty sent1"):
        load_training_dataset("org/hole")
    with pytest.raises(DataError, match="org/missing: no such local file or Hub dataset"):
        load_training_dataset("org/missing")
    with pytest.raises(DataError, match="fewer than one batch of 8"):
        load_training_dataset("org/unsup", min_examples=8)


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory, tokenizer):
    import torch
    from transformers import BertModel

    from conftest import tiny_bert_config

    folder = tmp_path_factory.mktemp("tiny_backbone_hub")
    torch.manual_seed(0)
    BertModel(tiny_bert_config(max_position_embeddings=512)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_docs_document_the_hub_paths():
    section = (REPO_ROOT / "docs" / "hub.md").read_text()
    for needle in ("csekit download", "princeton-nlp/datasets-for-simcse", "HF_HUB_OFFLINE", "--model_name_or_path",
                   "csekit evaluate"):
        assert needle in section, needle


def dead_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_download_removes_what_a_killed_download_left(hub_cache, online, tmp_path):
    """A SIGKILLed download leaves its hidden full copy; the next download of that corpus removes it, and leaves a
    running download's folder alone."""
    wiki = tmp_path / "data" / "wiki"
    abandoned, running = wiki / f".wiki1m.partial-{dead_pid()}-x1", wiki / f".wiki1m.partial-{os.getpid()}-x2"
    for folder in (abandoned, running):
        folder.mkdir(parents=True)
        (folder / "wiki1m_for_simcse.txt").write_bytes(WIKI[:100])
    with FakeHub(simcse_repo()) as hub:
        assert download("wiki1m", tmp_path / "data", endpoint=hub.url).read_bytes() == WIKI
    assert not abandoned.exists() and running.is_dir()


def crafted_tar(kind: str) -> bytes:
    """A tar whose one member would escape the folder (``../``), link out of it, or create a device."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo({"parent": "../escaped.txt", "link": "STS/link", "device": "STS/dev"}[kind])
        if kind == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        elif kind == "device":
            info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
        else:
            info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["parent", "link", "device"])
def test_unsafe_tar_member_is_refused_in_one_line(tmp_path, kind):
    from csekit.download import unpack_senteval

    archive = tmp_path / "senteval.tar"
    archive.write_bytes(crafted_tar(kind))
    (tmp_path / "staging").mkdir()
    with pytest.raises(DataError, match=r"senteval.tar: refused member '.*' \(.*\); not SentEval's release"):
        unpack_senteval(archive, tmp_path / "staging")
    assert not (tmp_path / "escaped.txt").exists() and not any(p.is_symlink() for p in tmp_path.rglob("*"))
