"""Resuming a recipe from a checkpoint.

* In process, for SimCSE, CMLM-CSE and WhitenedCSE: a run that crashes in step 5 (after checkpoint-4), started again
  with ``--resume_from_checkpoint last``, begins at step 4 with the checkpoint's optimizer moments and scheduler
  position, runs only steps 5 and 6, and ends with the uninterrupted run's weights and logs. The backbone has
  dropout, so the random state must be restored too. CMLM-CSE: the auxiliary network and its optimizer state are in
  the checkpoint (its masks are a fixed rule here; random masks and augmentations: the next test);
  WhitenedCSE: the running whitening statistics are.
* As a user does it: ``python recipes/simcse.py`` killed with SIGKILL mid-run, then run again with
  ``--resume_from_checkpoint last``, ends with the uninterrupted run's STS-B dev scores and model, without writing
  the checkpoint it resumed from again.
"""

import dataclasses
import importlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

from conftest import REPO_ROOT, BoundedProcess, fixed_masks, load_weights, recipe_flags, run_bounded
from csekit.trainers.runner import run_recipe

STEPS = 6


class Interrupted(Exception):
    pass


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


def train(method: str, backbone: Path, corpus: Path, output_dir: Path, *extra, crash_at=None,
          random_masks: bool = False) -> Probe:
    recipe = importlib.import_module(f"csekit.recipes.{method}").RECIPE
    probe = Probe(crash_at)
    if method == "cmlm_cse" and not random_masks:  # see test_cmlm_cse_random_masks_after_resuming
        original = recipe
        recipe = dataclasses.replace(recipe, make_collator=lambda *args: fixed_masks(original.collator(*args)))

    class Probed(recipe.trainer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(probe)

    # STS-B dev only for SimCSE (its best-checkpoint selection); the others skip evaluation to stay fast
    evaluation = ["--eval_steps", 2] if method == "simcse" else ["--eval_strategy", "no", "--load_best_model_at_end",
                                                                   "false"]
    argv = ["--model_name_or_path", backbone, "--train_file", corpus, "--output_dir", output_dir,
            "--per_device_train_batch_size", 8, "--max_steps", STEPS, "--save_steps", 2, "--save_total_limit", 5,
            "--logging_steps", 1, "--learning_rate", "1e-3", "--max_seq_length", 16, "--do_test_eval", "false",
            "--seed", 7, *evaluation, *recipe_flags(method), *extra]
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


@pytest.mark.parametrize("method, options", [("simcse", []), ("cmlm_cse", []), ("whitenedcse", []),
                                             ("whitenedcse", ["--positive_source", "dropout", "--num_positives", "2"])],
                         ids=["simcse", "cmlm_cse", "whitenedcse", "whitenedcse-dropout-positives"])
def test_resumed_run_runs_only_the_remaining_steps_and_ends_like_an_uninterrupted_one(
    method, options, tiny_backbone, corpus, tmp_path
):
    full, cut = tmp_path / "full", tmp_path / "cut"
    uninterrupted = train(method, tiny_backbone, corpus, full, *options)
    crashed = train(method, tiny_backbone, corpus, cut, *options, crash_at=5)
    assert crashed.steps == [1, 2, 3, 4, 5] and not (cut / "checkpoint-6").exists()
    resumed = train(method, tiny_backbone, corpus, cut, *options, "--resume_from_checkpoint", "last")

    # the resumed process started from checkpoint-4 and ran steps 5 and 6 only
    assert uninterrupted.start_step == 0 and uninterrupted.steps == list(range(1, STEPS + 1))
    assert resumed.start_step == 4 and resumed.steps == [5, 6]
    # ... with the scheduler at the learning rate the uninterrupted run used in step 5, and Adam moments of 4 steps
    # for every trainable parameter (CMLM-CSE: the auxiliary network's too)
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

    if method == "simcse":  # STS-B dev at steps 2, 4, 6; the final folder holds the best checkpoint
        scores = [[h["eval_STSBenchmark"] for h in history(d) if "eval_STSBenchmark" in h] for d in (full, cut)]
        assert len(scores[0]) == 3 and scores[1] == scores[0]
        best = json.loads((full / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())["best_metric"]
        assert best == max(scores[0])
    if method == "cmlm_cse":  # the training checkpoint keeps the auxiliary network; the final model does not
        checkpoint = load_weights(cut / "checkpoint-4")
        assert any(name.startswith("auxiliary.fusioner.") for name in checkpoint)
        assert not any(name.startswith("auxiliary.") for name in load_weights(cut))
    if method == "whitenedcse":  # running statistics: saved at step 4, restored, equal at the end
        running = [name for name in full_weights if name.startswith("whitening.") and "running" in name]
        checkpoint = load_weights(cut / "checkpoint-4")
        assert len(running) == 2 and checkpoint[running[0]].abs().max() > 0  # trained, not the initial zeros
        for name in running:
            assert not torch.equal(checkpoint[name], cut_weights[name])  # steps 5-6 moved them on



@pytest.mark.parametrize("options", [[], ["--contrastive_augmentation", "word_repetition"],
                                     ["--contrastive_augmentation", "drop_one_word"]],
                         ids=["mlm-masks", "word-repetition", "drop-one-word"])
def test_cmlm_cse_random_draws_after_resuming(options, tiny_backbone, corpus, tmp_path):
    """Every stochastic option of CMLM-CSE as users run it (random MLM masks, the Table 3 augmentations): the
    resumed run's first batch is the uninterrupted run's, although transformers collates it before it restores the
    checkpoint's random state (the collator's draws derive from seed, epoch and example: randomness.py)."""
    for name, extra in (("full", {}), ("cut", {"crash_at": 5}), ("cut", {})):
        resume = ("--resume_from_checkpoint", "last") if name == "cut" and not extra else ()
        train("cmlm_cse", tiny_backbone, corpus, tmp_path / name, *options, *resume, random_masks=True, **extra)
    full_steps, cut_steps = step_logs(tmp_path / "full"), step_logs(tmp_path / "cut")
    for step in (5, 6):
        for key in ("loss", "loss_mlm", "loss_contrastive", "grad_norm"):
            assert cut_steps[step][key] == pytest.approx(full_steps[step][key], rel=1e-5), (step, key)
    full_weights, cut_weights = load_weights(tmp_path / "full" / "checkpoint-6"), load_weights(tmp_path / "cut" /
                                                                                                "checkpoint-6")
    for name, tensor in full_weights.items():
        torch.testing.assert_close(cut_weights[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


def test_recipe_killed_mid_run_resumes_to_the_uninterrupted_result(tiny_backbone, corpus, tmp_path):
    def command(output_dir: Path, *extra) -> list:
        return [sys.executable, REPO_ROOT / "recipes" / "simcse.py", "--model_name_or_path", tiny_backbone,
                "--train_file", corpus, "--output_dir", output_dir, "--per_device_train_batch_size", 8,
                "--max_steps", 8, "--eval_steps", 4, "--save_steps", 4, "--save_total_limit", 5, "--learning_rate",
                "1e-3", "--max_seq_length", 16, "--do_test_eval", "false", "--seed", 7, "--disable_tqdm", "true",
                *recipe_flags("simcse"), *extra]

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


def test_resume_with_another_setup_is_refused_unless_accepted_and_then_recorded(tiny_backbone, corpus, tmp_path,
                                                                               capsys):
    from csekit import cli

    out = tmp_path / "out"
    argv = ["train", "simcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus), "--output_dir",
            str(out), "--max_steps", "4", "--save_steps", "2", "--eval_strategy", "no", "--load_best_model_at_end",
            "false", "--max_seq_length", "16", "--do_test_eval", "false", "--disable_tqdm", "true"]
    assert cli.main([*argv, "--per_device_train_batch_size", "8", "--max_steps", "2"]) == 0
    record = json.loads((out / "checkpoint-2" / "csekit_run.json").read_text())
    assert record == {"method": "csekit-simcse", "per_device_train_batch_size": 8, "processes": 1,
                      "gradient_accumulation_steps": 1}
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for change, difference in ((["--per_device_train_batch_size", "16"], "per_device_train_batch_size 8 -> 16"),
                               (["--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"],
                                "gradient_accumulation_steps 1 -> 2")):
        assert cli.main([*argv, *change, "--resume_from_checkpoint", "last"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()[-1:]
        assert line == (f"csekit: error: --resume_from_checkpoint {out}/checkpoint-2: the checkpoint was made with "
                        f"another setup ({difference}); resume with its settings, or pass --resume_accept_changes "
                        "true to continue anyway (the run records it)")
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert cli.main([*argv, "--per_device_train_batch_size", "16", "--resume_from_checkpoint", "last",
                     "--resume_accept_changes", "true"]) == 0
    recorded = json.loads((out / "training_args.json").read_text())["resume"]
    assert recorded == {"checkpoint": f"{out}/checkpoint-2",
                        "accepted_changes": ["per_device_train_batch_size 8 -> 16"]}
