"""Nothing half-written: a process killed (SIGKILL) in the middle of a save leaves the old state or nothing.

The kill comes from an audit hook (``tests/killer.py``), so csekit carries no test hook: the process dies at its
N-th touch of the destination (just before a rename or removal there, or just after it opened a file there for
writing). ``commit_files`` / ``staged_folder`` are killed at every step in forked children; the commands are killed
in real subprocesses at the step that matters.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import killer
from conftest import tiny_bert_config
from csekit import cli
from csekit.atomic import commit_files, staged_folder, write_text

NEVER = 10**6
STAGING = ".staging"  # where a commit's new files wait (a run's is .csekit-staging-<host>-<pid>)


def killed_at(nth: int, target, function, *args) -> int:
    """Run ``function(*args)`` in a forked child killed at its ``nth`` touch of ``target``; the child's status:
    ``-SIGKILL`` when killed, else its exit code."""
    pid = os.fork()
    if pid == 0:  # the child: file operations only (no torch), then leave without pytest's teardown
        try:
            killer.install(target, nth)
            function(*args)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def run_killed(argv: list, target, nth: int, cwd) -> subprocess.CompletedProcess:
    """``csekit ARGV`` in a subprocess, SIGKILLed at its ``nth`` touch of ``target``."""
    command = [sys.executable, str(Path(killer.__file__)), str(target), str(nth), "csekit", *argv]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files(folder: Path) -> dict:
    """``{name: sha256}`` of the visible top-level files of ``folder`` (a model folder's model)."""
    return {p.name: digest(p) for p in sorted(folder.iterdir()) if p.is_file() and not p.name.startswith(".")}


def make_folder(folder: Path, contents: dict) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in contents.items():
        (folder / name).write_bytes(content)
    return files(folder)


# ------------------------------------------------------------------------------------------------ the primitives
OLD = {"config.json": b'{"v": "old"}', "model.safetensors": b"old weights" * 100, "vocab.txt": b"same",
       "README.md": b"old card"}
NEW = {"config.json": b'{"v": "new"}', "model.safetensors": b"new weights" * 100, "vocab.txt": b"same",
       "eval_results.json": b'{"new": 1}'}
# the old config.json goes, 3 entries move in, the stale README.md goes, config.json moves in, staging is removed
COMMIT_STEPS = 7


@pytest.mark.parametrize("nth", [*range(1, COMMIT_STEPS + 1), NEVER])
def test_commit_files_killed_at_every_step_leaves_the_old_model_or_none(tmp_path, nth):
    destination = tmp_path / "out"
    old = make_folder(destination, OLD)
    checkpoint = make_folder(destination / "checkpoint-2", {"trainer_state.json": b"{}"})
    new = make_folder(destination / STAGING, NEW)
    status = killed_at(nth, destination, commit_files, destination / STAGING, destination)
    assert status == (0 if nth == NEVER else -signal.SIGKILL)
    now = files(destination)
    if "config.json" in now:  # a model: the old one or the new one, whole
        assert now in (old, new)
    else:  # no model, and every file is whole (its old or its new version)
        assert all(value in (old.get(name), new.get(name)) for name, value in now.items())
    assert (now == old) == (nth == 1) and (now == new) == (nth >= COMMIT_STEPS)
    assert files(destination / "checkpoint-2") == checkpoint


def test_commit_files_refuses_a_staging_folder_without_its_marker(tmp_path):
    destination = tmp_path / "out"
    old = make_folder(destination, OLD)
    make_folder(tmp_path / "staging", {"model.safetensors": b"x"})
    with pytest.raises(FileNotFoundError, match="commit record"):
        commit_files(tmp_path / "staging", destination)
    assert files(destination) == old


def test_commit_files_removes_stale_model_files_only(tmp_path):
    """A stale weight shard or card goes; a file that is no part of a model folder (a log, another process's record
    written while the main process saves) stays."""
    destination = tmp_path / "out"
    make_folder(destination, {**OLD, "model-00002-of-00002.safetensors": b"stale shard", "train.log": b"mine",
                              "record_rank1.json": b"{}"})
    new = make_folder(destination / STAGING, NEW)
    commit_files(destination / STAGING, destination)
    now = files(destination)
    assert {name: now[name] for name in new} == new
    assert set(now) == {*NEW, "train.log", "record_rank1.json"} and (destination / "train.log").read_bytes() == b"mine"


def replace_folder(destination):
    with staged_folder(destination, replace=True) as staging:
        make_folder(staging, NEW)


def replace_folder_killed(destination, when):
    """``replace_folder`` whose process dies just before or just after the atomic exchange of the two folders."""
    import csekit.atomic as atomic

    real = atomic.exchange

    def exchange(first, second):
        if when == "before the exchange":
            os.kill(os.getpid(), signal.SIGKILL)
        swapped = real(first, second)
        if when == "after the exchange":
            os.kill(os.getpid(), signal.SIGKILL)
        return swapped

    atomic.exchange = exchange
    replace_folder(destination)


@pytest.mark.parametrize("when", ["before the exchange", "after the exchange", "never"])
def test_staged_folder_killed_leaves_the_old_folder_or_the_new_one(tmp_path, when):
    """Replacing a folder swaps old and new in one step (renameat2 RENAME_EXCHANGE): a kill anywhere leaves one of
    them at the destination, never nothing; the next replacement removes what the dead process left beside it."""
    destination = tmp_path / "export"
    old = make_folder(destination, OLD)
    new = {name: hashlib.sha256(data).hexdigest() for name, data in NEW.items()}
    status = killed_at(NEVER, destination, replace_folder_killed, destination, when)
    assert status == (0 if when == "never" else -signal.SIGKILL)
    assert files(destination) == (old if when == "before the exchange" else new)
    replace_folder(destination)  # tidies the dead process's staging folder (holding the old or the new files)
    assert files(destination) == new and sorted(p.name for p in tmp_path.iterdir()) == ["export"]


@pytest.mark.parametrize("nth", [1, 2, NEVER])
def test_without_an_atomic_exchange_the_next_run_restores_the_old_folder(tmp_path, monkeypatch, nth):
    """Where the file system cannot exchange, the old folder is renamed aside first: killed between the two renames
    the destination is briefly missing, and the next replacement (or ``recover_abandoned``) puts the old one back."""
    import csekit.atomic as atomic

    monkeypatch.setattr(atomic, "exchange", lambda first, second: False)
    destination = tmp_path / "export"
    old = make_folder(destination, OLD)
    status = killed_at(nth, destination, replace_folder, destination)
    assert status == (0 if nth == NEVER else -signal.SIGKILL)
    now = files(destination) if destination.exists() else None
    new = {name: hashlib.sha256(data).hexdigest() for name, data in NEW.items()}
    assert now == {1: old, 2: None, NEVER: new}[nth]
    atomic.recover_abandoned(destination)
    assert files(destination) == {1: old, 2: old, NEVER: new}[nth]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_written_files_get_the_usual_permissions_not_mkstemps(tmp_path):
    umask = os.umask(0o022)
    try:
        assert write_text(tmp_path / "card.md", "card").stat().st_mode & 0o777 == 0o644
    finally:
        os.umask(umask)


# ------------------------------------------------------------------------------------------------ the commands
@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tokenizer):
    import torch
    from transformers import BertModel

    from csekit.modeling import SimCSEConfig, SimCSEModel

    folder = tmp_path_factory.mktemp("atomic")
    torch.manual_seed(0)
    config = SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(), pooler_type="avg")
    model = SimCSEModel(config)
    model.tokenizer = tokenizer
    model.save_pretrained(folder / "tiny")
    scores = dict.fromkeys(("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"), 1.0)
    (folder / "tiny" / "eval_results.json").write_text(json.dumps({"model": "tiny", "pooler": "avg", "sts": scores}))
    BertModel(tiny_bert_config(max_position_embeddings=512)).save_pretrained(folder / "bert")
    tokenizer.save_pretrained(folder / "bert")
    (folder / "sentences.txt").write_text("".join(f"sentence number {i} about things\n" for i in range(32)))
    return folder


@pytest.mark.parametrize(
    "argv, target",
    [(["evaluate", "tiny", "--tasks", "geometry", "--output", "results.json"], "results.json"),
     (["card", "tiny", "--figure", "always"], "tiny/alignment_uniformity.png")],
    ids=["evaluate --output", "card figure"],
)
def test_command_killed_while_writing_keeps_the_old_file(workspace, argv, target):
    path = workspace / target
    path.write_bytes(b"the old file, whole")
    result = run_killed(argv, path, 1, cwd=workspace)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert path.read_bytes() == b"the old file, whole"
    for leftover in path.parent.glob(f".{path.name}.*.tmp"):  # what the killed writer leaves: hidden, removable
        leftover.unlink()


RECIPE = ["train", "simcse", "--model_name_or_path", "bert", "--train_file", "sentences.txt", "--output_dir", "out",
          "--per_device_train_batch_size", "8", "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no",
          "--load_best_model_at_end", "false", "--report_to", "none"]


def test_recipe_killed_mid_save_leaves_no_model_and_no_truncated_file(workspace, monkeypatch):
    monkeypatch.chdir(workspace)
    assert cli.main(RECIPE) == 0  # the previous run's model
    out = workspace / "out"
    old = files(out)
    assert {"config.json", "model.safetensors.index.json", "eval_results.json", "training_args.json"} <= set(old)
    # the second run's touches of out: 1-2 check that it can write there (an anonymous file), 3 creates its lock's
    # temporary file, 4 removes it, 5-7 remove the folder the model's own staged save wrote in (committed into the
    # run's staging folder), 8 removes config.json, 9.. move the new files in
    killed = run_killed(RECIPE + ["--seed", "1"], out, 9, cwd=workspace)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    now = files(out)
    assert "config.json" not in now and now != old and len(list(out.glob(".csekit-staging-*"))) == 1
    from csekit.loading import check_safetensors

    for name, value in now.items():  # every file whole: the old one, or a new one that parses
        if value != old.get(name):
            json.loads((out / name).read_text()) if name.endswith(".json") else check_safetensors(out)
    # the folder is still csekit's, and the dead run's lock is taken over: training again completes the model
    assert cli.main(RECIPE) == 0
    assert set(files(out)) == set(old) and not (out / ".csekit-lock").exists()
