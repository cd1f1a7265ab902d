"""No lost work: a training run survives the faults a user meets, and nothing it completed is lost.

* A kill inside a checkpoint save: the checkpoint never becomes visible, ``--resume_from_checkpoint last`` takes the
  newest complete one, and the result equals the uninterrupted run's (``save_total_limit 1`` keeps that one).
* Two runs into one ``--output_dir``: the second stops at once, naming the first, which finishes intact; the lock of
  a dead process is taken over. A process of a two-process run killed: the run ends at once, nothing is claimed.
* A full disk at the final save: the previous model is unchanged, the message says where the trained weights are,
  and the next run keeps them. The trained model is committed before it is scored: a scoring that stops leaves it in
  place with the commands that finish the folder; the run's last line names the folder and its card.
* Publishing: no local path in what is uploaded; every model file has the folder's permissions.
"""

import errno
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, BoundedProcess, free_ports, load_weights, mounted_tmpfs, recipe_flags, run_bounded
from csekit import cli
from csekit.errors import DataError
from csekit.evaluation.sts import STSEvaluator

KILLER = REPO_ROOT / "tests" / "killer.py"


def flags(backbone: Path, corpus: Path, output_dir: Path, *extra) -> list:
    return ["train", "simcse", "--model_name_or_path", str(backbone), "--train_file", str(corpus), "--output_dir",
            str(output_dir), "--per_device_train_batch_size", "8", "--max_steps", "6", "--save_steps", "2",
            "--eval_strategy", "no", "--learning_rate", "1e-3", "--max_seq_length", "16", "--do_test_eval", "false",
            "--seed", "7", "--disable_tqdm", "true", "--keep_checkpoints", "true", *recipe_flags("simcse"), *extra]


def files(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())
            if p.is_file() and not p.name.startswith(".")}


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# ------------------------------------------------------------------------------------------------ checkpoints
def csekit_process(*argv, check: bool = True) -> subprocess.CompletedProcess:
    """``csekit ARGV`` in a process of its own: the runs compared to the last bit share its conditions (threads,
    global state), which the pytest process does not."""
    return run_bounded([sys.executable, *map(str, argv)], 400, check=check, cwd=REPO_ROOT,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_kill_inside_a_checkpoint_save_then_resume_last_equals_the_uninterrupted_run(tiny_backbone, corpus, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    # --eval_strategy no alone means no best-model selection
    csekit_process("-m", "csekit", *flags(tiny_backbone, corpus, full))
    # SIGKILL at the first file the Trainer writes for checkpoint-4 (its model), with save_total_limit 1
    victim = csekit_process(KILLER, killed / ".partial-checkpoint-4" / "checkpoint-4", "1", "csekit",
                            *flags(tiny_backbone, corpus, killed, "--save_total_limit", "1"), check=False)
    assert victim.returncode == -signal.SIGKILL, victim.stderr[-2000:]
    # the checkpoint being written is not visible; the complete one before it was not rotated away
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-2"]
    assert (killed / ".partial-checkpoint-4").is_dir()

    def contents(folder):  # every file, the sentence-transformers module folders included
        return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*")
                if p.is_file()}

    checkpoint_2 = contents(killed / "checkpoint-2")
    csekit_process("-m", "csekit", *flags(tiny_backbone, corpus, killed, "--resume_from_checkpoint", "last",
                                          "--save_total_limit", "5"))
    assert not (killed / ".partial-checkpoint-4").exists()  # removed by the run that resumed
    # it resumed from checkpoint-2 (a restart from step 0 would have written it again) and ran to step 6
    assert contents(killed / "checkpoint-2") == checkpoint_2
    assert json.loads((killed / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6
    expected, resumed = load_weights(full), load_weights(killed)
    for name, tensor in expected.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


def write_checkpoint(folder: Path, record: str) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    (folder / "trainer_state.json").write_text(record)


def test_resume_last_skips_incomplete_checkpoints_and_says_so(tmp_path, caplog):
    from csekit.preflight import find_checkpoint

    write_checkpoint(tmp_path / "checkpoint-2", '{"global_step": 2}')
    write_checkpoint(tmp_path / "checkpoint-4", '{"global_st')  # a kill inside the record, without atomic renames
    write_checkpoint(tmp_path / "checkpoint-6", '{"global_step": 6}')
    (tmp_path / "checkpoint-6" / "model.safetensors").write_bytes(b"\0" * 7)  # a truncated copy
    with caplog.at_level(logging.WARNING):
        assert find_checkpoint(tmp_path, "last") == str(tmp_path / "checkpoint-2")
    assert "checkpoint-6: incomplete checkpoint (truncated model.safetensors)" in caplog.text
    assert "checkpoint-4: incomplete checkpoint (unreadable trainer_state.json" in caplog.text


# ------------------------------------------------------------------------------------------------ one run per folder
@pytest.mark.core("csekit's folder lock")
def test_second_run_into_a_held_folder_is_refused_and_the_first_finishes_intact(tiny_backbone, corpus, tmp_path,
                                                                                capsys):
    out = tmp_path / "out"
    first = BoundedProcess([str(c) for c in [sys.executable, "-m", "csekit",
                                             *flags(tiny_backbone, corpus, out, "--max_steps", "40")]],
                           400, cwd=REPO_ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        while not (out / ".csekit-lock").exists():
            assert first.process.poll() is None, "the first run ended before it took the folder"
            assert time.monotonic() < first.deadline
            time.sleep(0.05)
        assert cli.main(flags(tiny_backbone, corpus, out, "--seed", "8")) == 2
        message = capsys.readouterr().err.strip().splitlines()
        assert message == [f"csekit: error: --output_dir {out}: in use by process {first.process.pid} on "
                           f"{socket.gethostname()} ({out / '.csekit-lock'}); wait for it to end or choose another "
                           "--output_dir (delete the lock file only if that run is gone)"]
        first.wait()
    finally:
        first.kill()
    arguments = json.loads((out / "training_args.json").read_text())
    assert arguments["training_args"]["seed"] == 7 and arguments["training_args"]["max_steps"] == 40
    assert load_weights(out) and not (out / ".csekit-lock").exists()
    assert list(out.glob(".csekit-staging*")) == []


def test_lock_of_a_dead_process_is_taken_over(tiny_backbone, corpus, tmp_path, caplog):
    out = tmp_path / "out"
    out.mkdir()
    pid = dead_pid()
    (out / ".csekit-lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
    with caplog.at_level(logging.WARNING):
        assert cli.main(flags(tiny_backbone, corpus, out, "--max_steps", "2")) == 0
    assert f"taking over the lock of process {pid}, which is no longer running" in caplog.text
    assert (out / "config.json").is_file() and not (out / ".csekit-lock").exists()


def test_a_killed_process_of_a_two_process_run_ends_the_run_and_loses_nothing(tiny_backbone, corpus, tmp_path):
    """SIGKILL of rank 1 mid-training: the launcher ends the run at once (rank 0 with it, no orphan), no model is
    claimed in the folder, and the next run into it takes the dead run's lock over and completes."""
    import psutil

    out = tmp_path / "out"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--main_process_port",
               free_ports()[0], "--num_processes", 2, "--num_machines", 1, "--mixed_precision", "no",
               "--dynamo_backend", "no", "-m", "csekit.recipes.simcse",
               *flags(tiny_backbone, corpus, out, "--max_steps", "100000", "--save_steps", "50")[2:]]
    launch = BoundedProcess(command, 300, cwd=REPO_ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        while not (out / ".csekit-lock").exists():
            assert launch.process.poll() is None, "the run ended before it took the folder"
            assert time.monotonic() < launch.deadline
            time.sleep(0.05)
        workers = [p for p in psutil.Process(launch.process.pid).children(recursive=True)
                   if p.environ().get("RANK") in ("0", "1")]
        assert sorted(p.environ()["RANK"] for p in workers) == ["0", "1"]
        [rank_1] = [p for p in workers if p.environ()["RANK"] == "1"]
        rank_1.kill()
        killed_at = time.monotonic()
        assert launch.wait(check=False).returncode != 0
        assert time.monotonic() - killed_at < 60
        _, alive = psutil.wait_procs(workers, timeout=10)
        assert alive == []  # no orphan
    finally:
        launch.kill()
    assert not (out / "config.json").exists()  # no model claimed
    assert cli.main(flags(tiny_backbone, corpus, out, "--max_steps", "2")) == 0
    assert (out / "config.json").is_file() and not (out / ".csekit-lock").exists()


# ------------------------------------------------------------------------------------------------ a failed end
def fail_commit(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


REAL_EVALUATE = STSEvaluator.evaluate


def fail_test_evaluation(self, embed):
    if self.split == "test":
        raise RuntimeError("a bug in the test evaluation")
    return REAL_EVALUATE(self, embed)


def test_a_full_disk_at_the_commit_keeps_the_previous_model_and_the_trained_weights(tiny_backbone, corpus, tmp_path,
                                                                                     monkeypatch, capsys, caplog):
    out = tmp_path / "out"
    base = flags(tiny_backbone, corpus, out, "--max_steps", "2", "--save_strategy", "no")
    assert cli.main(base) == 0
    previous = files(out)
    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr("csekit.trainers.runner.commit_files", fail_commit)
        assert cli.main(base + ["--seed", "8"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()[-1:]
        assert line.startswith(f"csekit: error: no space left on device while writing the final model to {out}; "
                               f"the previous model in {out} is unchanged; this run's trained weights are in "
                               f"{out}/.csekit-staging-")
    [staging] = out.glob(".csekit-staging-*")
    assert files(out) == previous and (staging / "config.json").is_file()
    trained = load_weights(staging)
    # the next run leaves the kept model where the message said, and says so again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cli.main(base + ["--seed", "9"]) == 0
    assert f"{staging} holds the model of an earlier run whose end failed; it is kept" in caplog.text
    assert all(torch.equal(tensor, load_weights(staging)[name])
               for name, tensor in trained.items())


@pytest.mark.parametrize("fault", [RuntimeError("a bug in the test evaluation"), KeyboardInterrupt()],
                         ids=["bug", "ctrl-c"])
def test_the_model_is_in_the_folder_before_scoring_and_an_interrupted_scoring_says_how_to_finish(
        fault, tiny_backbone, corpus, tmp_path, monkeypatch, capsys, caplog):
    """The trained model is committed as soon as training ends (a loadable folder with its arguments, the previous
    model's card and scores gone with it); scoring that stops leaves it in place, and a line gives the commands that
    score it and write its card, which then work."""
    out = tmp_path / "out"
    base = flags(tiny_backbone, corpus, out, "--max_steps", "2", "--save_strategy", "no", "--do_test_eval", "true")
    assert cli.main(base) == 0
    assert {"eval_results.json", "README.md"} <= set(files(out))
    seen = {}

    def interrupted(self, embed):
        if self.split == "test":
            seen["files"] = set(files(out))
            raise fault
        return REAL_EVALUATE(self, embed)

    with monkeypatch.context() as patch, caplog.at_level(logging.ERROR):
        patch.setattr("csekit.evaluation.sts.STSEvaluator.evaluate", interrupted)
        with pytest.raises(type(fault)):
            cli.main(base + ["--seed", "8"])
    # when scoring began, the new model was in the folder with its arguments, without the old model's scores and card
    assert {"config.json", "training_args.json"} <= seen["files"] and any(".safetensors" in f for f in seen["files"])
    assert not {"eval_results.json", "README.md"} & seen["files"]
    assert files(out) == {name: digest for name, digest in files(out).items() if name in seen["files"]}
    where = out.resolve()
    assert (f"the scoring of the trained model did not finish; the model is in {where}: score it with `csekit "
            f"evaluate {where} --output {where}/eval_results.json` and write its card with `csekit card {where}`"
            ) in caplog.text
    assert not list(out.glob(".csekit-staging*")) and not (out / ".csekit-lock").exists()
    capsys.readouterr()
    assert cli.main(["evaluate", str(where), "--output", f"{where}/eval_results.json"]) == 0
    assert cli.main(["card", str(where)]) == 0
    assert (out / "README.md").is_file()


def test_a_run_ends_with_a_line_naming_its_folder_and_card(tiny_backbone, corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(flags(tiny_backbone, corpus, Path("rel") / "out", "--max_steps", "2", "--save_strategy", "no",
                          "--do_test_eval", "true")) == 0
    where = (tmp_path / "rel" / "out").resolve()
    assert capsys.readouterr().out.strip().splitlines()[-1] == (f"The model is in {where}; its card: "
                                                                 f"{where}/README.md")


@pytest.fixture
def small_disk(tmp_path):
    """A 12 MiB tmpfs mounted for the test (root only; skipped where mounting is not allowed): a real full disk."""
    with mounted_tmpfs(tmp_path / "small-disk", "12m") as folder:
        yield folder


def test_full_disk_is_one_line_and_nothing_half_kept(tiny_backbone, corpus, small_disk, capsys):
    """A real full disk (a 12 MiB tmpfs; the tiny model's weights take 4 MiB, a checkpoint with Adam's moments 12):
    a checkpoint that does not fit is one line, leaves no partial checkpoint, and the model already in the folder
    stays byte-identical; a final model that does not fit says the same and names no folder as holding weights
    that it does not hold."""
    out = small_disk / "out"
    assert cli.main(flags(tiny_backbone, corpus, out, "--max_steps", "2", "--save_strategy", "no")) == 0
    previous = files(out)
    capsys.readouterr()
    assert cli.main(flags(tiny_backbone, corpus, out, "--seed", "8", "--save_steps", "1")) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line == (f"csekit: error: no space left on device while writing {out}/checkpoint-1; the partial checkpoint "
                    f"was removed and the previous model in {out} is unchanged; complete checkpoints: none")
    assert files(out) == previous and not list(out.glob("*checkpoint*")) and not list(out.glob(".csekit-staging*"))

    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * max(free - 2 * 2**20, 0))  # 2 MiB left: less than the final model
    assert cli.main(flags(tiny_backbone, corpus, out, "--seed", "9", "--max_steps", "2", "--save_strategy", "no")) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line == (f"csekit: error: no space left on device while writing the final model to {out}; the previous "
                    f"model in {out} is unchanged; this run's trained weights are lost (no complete checkpoint was "
                    "saved)")
    assert files(out) == previous and not list(out.glob(".csekit-staging*"))


# ------------------------------------------------------------------------------------------------ publishing
def pushed(folder: Path, monkeypatch) -> dict:
    """``{name: bytes}`` that ``push_to_hub(folder)`` uploads, through a mock Hub API."""
    from unittest import mock

    from csekit.publishing.hub import push_to_hub

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    uploaded = {}

    def upload_folder(folder_path, allow_patterns, **kwargs):
        uploaded.update({name: (Path(folder_path) / name).read_bytes() for name in allow_patterns})

    api = mock.MagicMock()
    api.upload_folder.side_effect = upload_folder
    push_to_hub(folder, "someone/tiny", api=api)
    return uploaded


def test_local_paths_become_base_names_and_hub_ids_stay():
    from csekit.publishing.hub import strip_local_paths

    replaced = {}
    record = {"model_name_or_path": "/home/alice/clientX/backbone", "train_file": "/data/wiki1m.txt",
              "base_model": "princeton-nlp/sup-simcse-bert-base-uncased", "runs": ["~/runs/a"], "lr": 3e-5}
    assert strip_local_paths(record, replaced) == {
        "model_name_or_path": "backbone", "train_file": "wiki1m.txt",
        "base_model": "princeton-nlp/sup-simcse-bert-base-uncased", "runs": ["a"], "lr": 3e-5}
    assert replaced["/home/alice/clientX/backbone"] == "backbone"


@pytest.mark.parametrize("value, published", [
    ("C:\\Users\\alice\\models\\backbone", "backbone"),
    ("D:/runs/out", "out"),
    ("\\\\fileserver\\share\\backbone", "backbone"),
    ("file:///home/alice/backbone", "backbone"),
    ("~bob/models/backbone", "backbone"),
    ("csekit train simcse --model_name_or_path /home/alice/backbone --train_file C:\\data\\wiki.txt",
     "csekit train simcse --model_name_or_path backbone --train_file wiki.txt"),
    ("https://huggingface.co/org/name", "https://huggingface.co/org/name"),
    ("sentence-transformers/all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"),
    ("12/02/2026, 80 it/s, see docs/training.md", "12/02/2026, 80 it/s, see docs/training.md"),
], ids=["windows", "drive with slashes", "unc", "file url", "another user's home", "inside a command", "url",
        "hub id", "text"])
def test_a_local_path_of_any_platform_anywhere_in_a_string_is_published_as_its_base_name(value, published):
    from csekit.publishing.hub import strip_local_paths

    replaced = {}
    assert strip_local_paths({"field": value, "list": [value]}, replaced) == {"field": published, "list": [published]}
    assert bool(replaced) == (value != published)


def test_push_uploads_no_local_path_and_model_files_have_the_folder_mode(tiny_backbone, corpus, tmp_path,
                                                                          monkeypatch):

    from csekit.publishing.model_folder import PATHS_NOTE

    out = tmp_path / "clientX" / "out"
    umask = os.umask(0o022)
    try:
        assert cli.main(flags(tiny_backbone, corpus, out, "--max_steps", "2", "--save_strategy", "no",
                              "--do_test_eval", "true")) == 0
    finally:
        os.umask(umask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert set(modes.values()) == {0o644}, modes

    uploaded = pushed(out, monkeypatch)
    local = [str(tmp_path), str(tiny_backbone.parent), str(corpus.parent)]
    for name, content in uploaded.items():
        if not name.endswith((".safetensors", ".png")):
            text = content.decode()
            assert not any(path in text for path in local), (name, [p for p in local if p in text])
    assert uploaded["README.md"].decode().endswith(PATHS_NOTE)
    arguments = json.loads(uploaded["training_args.json"])
    assert arguments["model_args"]["model_name_or_path"] == tiny_backbone.name
    assert arguments["data_args"]["train_file"] == corpus.name
    assert not list(out.glob(".csekit-upload-*"))  # the upload copy is gone
    local = json.loads((out / "training_args.json").read_text())  # the local record is untouched
    assert local["model_args"]["model_name_or_path"] == str(tiny_backbone)
    assert str(tiny_backbone) in local["local_paths"]


def test_every_file_csekit_writes_follows_the_umask(tiny_backbone, corpus, tmp_path):
    """Checkpoints (the Trainer's files, the sentence-transformers modules safetensors writes owner-only), the final
    model and an export: 0644 files and 0755 folders under umask 022, as ``open`` and ``mkdir`` give."""
    out, export = tmp_path / "out", tmp_path / "export"
    umask = os.umask(0o022)
    try:
        assert cli.main(flags(tiny_backbone, corpus, out, "--max_steps", "2")) == 0
        assert cli.main(["export-st", str(out), str(export)]) == 0
    finally:
        os.umask(umask)
    written = [path for folder in (out, export) for path in (folder, *folder.rglob("*"))
               if not path.name.startswith(".")]
    assert any(path.match("checkpoint-2/encoder/model.safetensors") for path in written)
    modes = {str(path): path.stat().st_mode & 0o777 for path in written}
    assert {mode for path, mode in modes.items() if Path(path).is_file()} == {0o644}, modes
    assert {mode for path, mode in modes.items() if Path(path).is_dir()} == {0o755}, modes


def test_debug_shows_the_traceback_of_bad_input(tmp_path, monkeypatch):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("")
    (tmp_path / "model" / "model.safetensors").write_bytes(b"")
    monkeypatch.setenv("CSEKIT_DEBUG", "1")
    with pytest.raises(DataError, match="not valid JSON"):
        cli.main(["evaluate", str(tmp_path / "model")])


def test_a_card_and_an_upload_made_from_another_folder_hold_no_relative_local_path(tiny_backbone, corpus, tmp_path,
                                                                                   monkeypatch):
    """A run given relative paths, its card, and a push run from another working directory: the paths were local
    where the run was (``local_paths`` of its records), so neither the card nor the upload shows them."""


    run = tmp_path / "project"
    shutil.copytree(tiny_backbone, run / "models" / "backbone")
    (run / "data").mkdir()
    shutil.copy(corpus, run / "data" / "corpus.txt")
    monkeypatch.chdir(run)
    assert cli.main(flags(Path("models/backbone"), Path("data/corpus.txt"), Path("outputs/tiny"), "--max_steps", "2",
                          "--save_strategy", "no", "--do_test_eval", "true")) == 0
    relative = ["models/backbone", "data/corpus.txt", "outputs/tiny"]
    card = (run / "outputs" / "tiny" / "README.md").read_text()
    assert not [path for path in relative + [str(tmp_path)] if path in card]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the relative paths name nothing here
    uploaded = pushed(run / "outputs" / "tiny", monkeypatch)
    texts = {name: content.decode() for name, content in uploaded.items() if name.endswith((".json", ".md"))}
    assert not [(name, path) for name, text in texts.items() for path in relative + [str(tmp_path)] if path in text]
    arguments = json.loads(texts["training_args.json"])
    assert "local_paths" not in arguments and arguments["model_args"]["model_name_or_path"] == "backbone"
