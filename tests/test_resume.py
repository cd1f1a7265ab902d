"""Resuming a recipe from a checkpoint.

* In process: a run that crashes in step 5 (after checkpoint-4), started again with ``--resume_from_checkpoint
  last``, begins at step 4 with the checkpoint's optimizer moments and scheduler position, runs only steps 5 and 6,
  and ends with the uninterrupted run's weights, logs and STS-B dev scores. The backbone has dropout, so the random
  state must be restored too. (Every method and each of its random draws: ``test_conformance.py``.)
* As a user does it: ``python recipes/simcse.py`` killed with SIGKILL mid-run, then run again with
  ``--resume_from_checkpoint last``, ends with the uninterrupted run's STS-B dev scores and model, without writing
  the checkpoint it resumed from again.
"""

import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from conftest import REPO_ROOT, BoundedProcess, load_weights, recipe_flags, run_bounded
from csekit.recipe_run import run_recipe

STEPS = 6


class Interrupted(Exception):
    pass


class Killed(Exception):
    """A kill after training, in the final save, scoring or commit."""


class Probe(TrainerCallback):
    """What one ``trainer.train()`` did: where it started (step, scheduler, optimizer state) and the steps it ran."""

    def __init__(self, crash_at=None):
        self.crash_at, self.steps = crash_at, []

    def on_train_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        self.start_step = state.global_step
        self.start_lr = lr_scheduler.get_last_lr()[0]
        self.trainable = sum(1 for p in model.parameters() if p.requires_grad)
        self.moments = len(optimizer.state)  # parameters with Adam moments
        self.moment_steps = {int(s["step"]) for s in optimizer.state.values()}

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)
        if state.global_step == self.crash_at:
            raise Interrupted  # a crash in the middle of the run, not a clean stop


def train(backbone: Path, corpus: Path, output_dir: Path, *extra, crash_at=None) -> Probe:
    """SimCSE through its recipe, STS-B dev every 2 steps (the best-checkpoint selection)."""
    from csekit.recipes.simcse import RECIPE as recipe

    probe = Probe(crash_at)

    class Probed(recipe.trainer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(probe)

    argv = ["--model_name_or_path", backbone, "--train_file", corpus, "--output_dir", output_dir,
            "--per_device_train_batch_size", 8, "--max_steps", STEPS, "--save_steps", 2, "--save_total_limit", 5,
            "--logging_steps", 1, "--learning_rate", "1e-3", "--max_seq_length", 16, "--do_test_eval", "false",
            "--seed", 7, "--eval_steps", 2, "--keep_checkpoints", "true", *recipe_flags("simcse"), *extra]
    try:
        run_recipe(dataclasses.replace(recipe, trainer_class=Probed), *recipe.parse([str(a) for a in argv]))
    except Interrupted:
        assert crash_at is not None
    return probe


def history(output_dir: Path, step: int = STEPS) -> list:
    return json.loads((output_dir / f"checkpoint-{step}" / "trainer_state.json").read_text())["log_history"]


def step_logs(output_dir: Path) -> dict:
    """``{step: {loss, learning_rate, grad_norm}}`` of the training steps logged up to the last checkpoint."""
    return {h["step"]: h for h in history(output_dir) if "loss" in h and "train_loss" not in h}


@pytest.mark.parametrize("flags", [(), ("--mlp_only_train", "false")], ids=["mlp-in-training", "mlp-at-inference"])
def test_resumed_run_runs_only_the_remaining_steps_and_ends_like_an_uninterrupted_one(flags, tiny_backbone, corpus,
                                                                                      tmp_path):
    """With the MLP used at inference, the published folder stores it in its sentence-transformers Dense module
    only; a checkpoint keeps it in its weights index too, which is what the Trainer resumes from."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    uninterrupted = train(tiny_backbone, corpus, full, *flags)
    crashed = train(tiny_backbone, corpus, cut, *flags, crash_at=5)
    assert crashed.steps == [1, 2, 3, 4, 5] and not (cut / "checkpoint-6").exists()
    resumed = train(tiny_backbone, corpus, cut, *flags, "--resume_from_checkpoint", "last")

    # the resumed process started from checkpoint-4 and ran steps 5 and 6 only
    assert uninterrupted.start_step == 0 and uninterrupted.steps == list(range(1, STEPS + 1))
    assert resumed.start_step == 4 and resumed.steps == [5, 6]
    # ... with the scheduler at the learning rate the uninterrupted run used in step 5, and Adam moments of 4 steps
    # for every trainable parameter
    full_steps, cut_steps = step_logs(full), step_logs(cut)
    assert resumed.start_lr == pytest.approx(full_steps[5]["learning_rate"], rel=1e-12) != uninterrupted.start_lr
    assert resumed.moments == resumed.trainable and resumed.moment_steps == {4}
    assert uninterrupted.moments == 0

    # ... and ended where the uninterrupted run ended (dropout: the random state was restored too)
    for step in (5, 6):
        for key in ("loss", "grad_norm", "learning_rate"):
            assert cut_steps[step][key] == pytest.approx(full_steps[step][key], rel=1e-5), (step, key)
    full_weights = load_weights(full / f"checkpoint-{STEPS}")
    cut_weights = load_weights(cut / f"checkpoint-{STEPS}")
    assert full_weights.keys() == cut_weights.keys()
    for name, tensor in full_weights.items():
        torch.testing.assert_close(cut_weights[name], tensor, rtol=1e-5, atol=1e-7, msg=name)

    # STS-B dev at steps 2, 4, 6; the final folder holds the best checkpoint
    scores = [[h["eval_STSBenchmark"] for h in history(d) if "eval_STSBenchmark" in h] for d in (full, cut)]
    assert len(scores[0]) == 3 and scores[1] == scores[0]
    best = json.loads((full / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())["best_metric"]
    assert best == max(scores[0])


def test_recipe_killed_mid_run_resumes_to_the_uninterrupted_result(tiny_backbone, corpus, tmp_path):
    def command(output_dir: Path, *extra) -> list:
        return [sys.executable, REPO_ROOT / "recipes" / "simcse.py", "--model_name_or_path", tiny_backbone,
                "--train_file", corpus, "--output_dir", output_dir, "--per_device_train_batch_size", 8,
                "--max_steps", 8, "--eval_steps", 4, "--save_steps", 4, "--save_total_limit", 5, "--learning_rate",
                "1e-3", "--max_seq_length", 16, "--do_test_eval", "false", "--seed", 7, "--disable_tqdm", "true",
                "--keep_checkpoints", "true", *recipe_flags("simcse"), *extra]

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    full, killed = tmp_path / "full", tmp_path / "killed"
    reference = BoundedProcess(command(full), 400, cwd=REPO_ROOT, env=env)
    victim = BoundedProcess(command(killed), 400, cwd=REPO_ROOT, env=env)
    try:
        written = killed / "checkpoint-4" / "trainer_state.json"  # the last file of a checkpoint
        while not written.exists():
            assert victim.process.poll() is None, "the run ended before its first checkpoint"
            assert time.monotonic() < victim.deadline, "no checkpoint-4 in time"
            time.sleep(0.02)
        os.kill(victim.process.pid, signal.SIGKILL)
        assert victim.wait(check=False).returncode == -signal.SIGKILL
    finally:
        victim.kill()
    assert not (killed / "checkpoint-8").exists()  # killed mid-run
    def contents(folder):  # every file, the sentence-transformers module folders included
        return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*")
                if p.is_file()}

    checkpoint_4 = contents(killed / "checkpoint-4")

    run_bounded(command(killed, "--resume_from_checkpoint", "last"), 400, cwd=REPO_ROOT, env=env)
    reference.wait()
    # a restart from step 0 would have written checkpoint-4 again
    assert contents(killed / "checkpoint-4") == checkpoint_4
    scores = [[h["eval_STSBenchmark"] for h in history(d, 8) if "eval_STSBenchmark" in h] for d in (full, killed)]
    assert len(scores[0]) == 2 and scores[1] == scores[0]
    full_model, resumed_model = load_weights(full), load_weights(killed)
    for name, tensor in full_model.items():
        torch.testing.assert_close(resumed_model[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


def test_resume_with_another_setup_is_refused_naming_each_flag_unless_accepted_and_then_recorded(
        tiny_backbone, corpus, tmp_path, capsys):
    """The checkpoint records every setting that changes the trained model (the argument groups less the commented
    bookkeeping list); a resume that changes any of them is refused naming the flag and both values."""
    from csekit import cli

    out = tmp_path / "out"
    argv = ["train", "simcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus), "--output_dir",
            str(out), "--max_steps", "2", "--save_steps", "2", "--eval_strategy", "no", "--load_best_model_at_end",
            "false", "--max_seq_length", "16", "--do_test_eval", "false", "--disable_tqdm", "true",
            "--keep_checkpoints", "true", "--per_device_train_batch_size", "8"]
    assert cli.main(argv) == 0
    record = json.loads((out / "checkpoint-2" / "csekit_run.json").read_text())
    assert {key: record[key] for key in ("method", "processes", "per_device_train_batch_size", "learning_rate",
                                         "max_seq_length", "train_file", "temperature", "padding_free")} == {
        "method": "csekit-simcse", "processes": 1, "per_device_train_batch_size": 8, "learning_rate": 3e-5,
        "max_seq_length": 16, "train_file": str(corpus), "temperature": 0.05, "padding_free": True}
    assert not {"output_dir", "logging_steps", "save_steps", "report_to", "hub_token", "resume_from_checkpoint"} & set(
        record)
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    restored = " (cannot take effect: the restored optimizer keeps the checkpoint's)"
    for change, difference in (
            (["--per_device_train_batch_size", "16"], "--per_device_train_batch_size 8 -> 16"),
            (["--gradient_accumulation_steps", "2"], "--gradient_accumulation_steps 1 -> 2"),
            (["--mini_batch_size", "4"], "--mini_batch_size None -> 4"),
            (["--mini_batch_tokens", "64"], "--mini_batch_tokens None -> 64"),
            (["--matryoshka_dims", "16"], f"--matryoshka_dims {record['matryoshka_dims']} -> [16]"),
            (["--learning_rate", "1e-3"], f"--learning_rate 3e-05 -> 0.001{restored}"),
            (["--max_seq_length", "12", "--temperature", "0.1"],
             "--temperature 0.05 -> 0.1; --max_seq_length 16 -> 12"),
            (["--padding_free", "false"], "--padding_free True -> False")):
        assert cli.main([*argv, *change, "--resume_from_checkpoint", "last"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()[-1:]
        assert line == (f"csekit: error: --resume_from_checkpoint {out}/checkpoint-2: the checkpoint was made with "
                        f"another setup ({difference}); resume with its settings, or pass --resume_accept_changes "
                        "true to continue anyway (the run records it)")
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert cli.main([*argv, "--learning_rate", "1e-3", "--logging_steps", "1", "--resume_from_checkpoint", "last",
                     "--resume_accept_changes", "true"]) == 0
    recorded = json.loads((out / "training_args.json").read_text())["resume"]
    assert recorded == {"checkpoint": f"{out}/checkpoint-2",
                        "accepted_changes": [f"--learning_rate 3e-05 -> 0.001{restored}"]}


@pytest.mark.parametrize("stage", ["score_run", "commit_files"])
def test_a_kill_after_the_last_checkpoint_resumes_to_zero_steps_and_the_uninterrupted_folder(stage, tiny_backbone,
                                                                                             corpus, tmp_path,
                                                                                             monkeypatch):
    """A kill in the final commit or in the scoring after it leaves a checkpoint at the run's last step (and, once the
    commit is done, the trained model in the folder); resuming from it runs no step and ends with the uninterrupted
    run's model (the best STS-B dev checkpoint)."""
    import csekit.recipe_run
    import csekit.trainers.runner

    runner = csekit.recipe_run if stage == "score_run" else csekit.trainers.runner  # where the stage is looked up
    full, cut = tmp_path / "full", tmp_path / "cut"
    train(tiny_backbone, corpus, full)
    real = getattr(runner, stage)

    def killed(*args, **kwargs):
        raise Killed

    monkeypatch.setattr(runner, stage, killed)
    with pytest.raises(Killed):
        train(tiny_backbone, corpus, cut)
    assert (cut / f"checkpoint-{STEPS}").is_dir() and (cut / "config.json").exists() == (stage == "score_run")
    monkeypatch.setattr(runner, stage, real)
    resumed = train(tiny_backbone, corpus, cut, "--resume_from_checkpoint", "last")
    assert resumed.start_step == STEPS and resumed.steps == []
    full_weights, cut_weights = load_weights(full), load_weights(cut)
    assert full_weights.keys() == cut_weights.keys()
    for name, tensor in full_weights.items():
        torch.testing.assert_close(cut_weights[name], tensor, rtol=0, atol=0, msg=name)


def test_a_resume_on_changed_training_data_under_the_same_name_is_refused_naming_it(tiny_backbone, corpus, tmp_path,
                                                                                    capsys):
    """The run record holds a content hash of the examples trained on, not only ``--train_file``'s name: a resume
    after the file changed is refused in one line naming the data (nothing written), the same examples in another
    file of the same name resume, and ``--resume_accept_changes`` continues on the new data."""
    from csekit import cli

    data, out = tmp_path / "data.txt", tmp_path / "out"
    lines = corpus.read_text(encoding="utf-8").splitlines(keepends=True)
    data.write_text("".join(lines), encoding="utf-8")
    argv = ["train", "simcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(data), "--output_dir",
            str(out), "--max_steps", "2", "--save_steps", "1", "--eval_strategy", "no", "--load_best_model_at_end",
            "false", "--max_seq_length", "16", "--do_test_eval", "false", "--disable_tqdm", "true",
            "--keep_checkpoints", "true", "--per_device_train_batch_size", "8"]
    assert cli.main(argv) == 0
    resume = ["--resume_from_checkpoint", str(out / "checkpoint-1")]
    record = json.loads((out / "checkpoint-1" / "csekit_run.json").read_text())
    assert record["train_data"].startswith("sha256:") and record["train_data"].endswith(f", {len(lines)} examples")
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    data.write_text("".join(["A sentence that was not there.\n", *lines[1:]]), encoding="utf-8")
    assert cli.main([*argv, *resume]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "the training data (--train_file's contents) sha256:" in line and "--resume_accept_changes" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    data.write_text("".join(lines) + "\n", encoding="utf-8")  # the same sentences (a trailing empty line is skipped)
    assert cli.main([*argv, *resume]) == 0
    data.write_text("".join(["A sentence that was not there.\n", *lines[1:]]), encoding="utf-8")
    assert cli.main([*argv, *resume, "--resume_accept_changes", "true"]) == 0
    accepted = json.loads((out / "training_args.json").read_text())["resume"]["accepted_changes"]
    assert len(accepted) == 1 and accepted[0].startswith("the training data (--train_file's contents)")
