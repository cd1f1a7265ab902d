"""Finite or refused: a setting that is NaN or infinite never starts a run, a non-finite loss or gradient stops it
(its update skipped on the device by the fused optimizer, its flag read at the next update or before a checkpoint,
an evaluation, a save or the end of training), and no non-finite weight is ever written.

The oracle is the user's view: the exit status, the one line on stderr, and the bytes of the model already in the
output folder (which must not change). The settings' rows (flags, YAML, a model folder's config.json) are in
``test_bad_input.py``.
"""

import hashlib
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from huggingface_hub.errors import StrictDataclassError
from transformers import Trainer, TrainerCallback

from conftest import recipe_flags, tiny_bert_config
from csekit import cli
from csekit.errors import DataError
from csekit.evaluation import STSEvaluator
from csekit.methods import METHODS
from csekit.modeling import CLSRConfig, CMLMCSEConfig, SimCSEConfig, SimCSEModel, WhitenedCSEConfig
from csekit.trainers import CSETrainingArguments, SimCSETrainer
from csekit.trainers.trainer import require_finite_weights


def contents(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(".")}


def train(method: str, backbone: Path, corpus: Path, out: Path, *extra) -> list:
    return ["train", method, "--model_name_or_path", str(backbone), "--train_file", str(corpus), "--output_dir",
            str(out), "--per_device_train_batch_size", "8", "--max_steps", "4", "--save_steps", "2", "--eval_strategy",
            "no", "--load_best_model_at_end", "false", "--max_seq_length", "16", "--do_test_eval", "false",
            "--disable_tqdm", "true", *recipe_flags(method, backbone), *extra]


@pytest.mark.parametrize("method", [name for name, method in METHODS.items()
                                    if issubclass(method.trainer_class, Trainer)])
def test_a_non_finite_loss_stops_the_run_before_its_update_and_keeps_the_folder(method, tiny_backbone, corpus,
                                                                               tmp_path, capsys):
    """A learning rate that blows the weights up in step 1 makes step 2's loss NaN: the update is skipped on the
    device, its flag is read before step 2's checkpoint, and the run stops there naming the step and the loss
    components; the folder (the model already there) stays byte-identical."""
    out = tmp_path / "out"
    assert cli.main(train(method, tiny_backbone, corpus, out, "--save_strategy", "no", "--max_steps", "1")) == 0
    before = contents(out)
    capsys.readouterr()
    code = cli.main(train(method, tiny_backbone, corpus, out, "--learning_rate", "1e12", "--seed", "8"))
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert code == 2, line
    assert line.startswith("csekit: error: step 2: the loss or its gradient is not finite (loss nan, loss_")
    assert line.endswith("the run stopped and saved nothing of this update (checkpoints and --output_dir keep only "
                         "finite weights); "
                         "lower --learning_rate or check the data")
    assert contents(out) == before  # no checkpoint, no new model: every weight written is finite


def test_a_non_finite_clsr_loss_stops_the_run(tiny_backbone, tmp_path, data_dir, capsys):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("sent0,sent1\n" + "".join(f"first sentence {i},second sentence {i}\n" for i in range(32)))
    argv = ["train", "clsr", "--model_name_or_path", str(tiny_backbone), "--train_file", str(pairs), "--output_dir",
            str(tmp_path / "out"), "--cache_dir", str(tmp_path / "cache"), "--per_device_train_batch_size", "16",
            "--num_train_epochs", "3", "--eval_epochs", "1", "--warmup_epochs", "0", "--do_test_eval", "false",
            "--temperature", "1e-45"]  # finite, but cosine / 1e-45 overflows: the loss is NaN from the first step
    assert cli.main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith("csekit: error: epoch 1, step 1: the loss is not finite (nan); the run stopped before")
    assert not (tmp_path / "out" / "config.json").exists()


def test_non_finite_weights_are_never_written():
    model = torch.nn.Linear(2, 2)
    require_finite_weights(model, "the final model")  # finite: nothing to say
    with torch.no_grad():
        model.bias[1] = math.inf
    with pytest.raises(DataError, match=r"the final model: not written, 1 tensor\(s\) hold NaN or infinite values "
                                        r"\(bias\)"):
        require_finite_weights(model, "the final model")


@pytest.mark.parametrize("config_class, field", [(SimCSEConfig, "temperature"), (SimCSEConfig, "hard_negative_weight"),
                                                 (CMLMCSEConfig, "mlm_weight"), (CMLMCSEConfig, "mask_rate"),
                                                 (WhitenedCSEConfig, "temperature"), (CLSRConfig, "temperature")])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_every_float_field_of_every_config_is_finite(config_class, field, value):
    """The configs' own validator: NaN passes every range check (it compares False), so a range alone lets it in."""
    with pytest.raises(StrictDataclassError, match=f"{field} must be a finite number"):
        config_class(encoder_config=tiny_bert_config(num_hidden_layers=12).to_dict(), **{field: value})


def python_run(backbone: Path, out: Path, max_steps: int, sts_evaluator=None, **settings) -> SimCSETrainer:
    """Unsupervised SimCSE from Python with a learning rate that blows the weights up in step 1 (step 2's loss is
    NaN), snapshots of the weights after each step in ``trainer.snapshots``."""
    model = SimCSEModel.from_encoder(str(backbone), pooler_type="cls")
    args = CSETrainingArguments(output_dir=str(out), per_device_train_batch_size=8, max_steps=max_steps,
                                learning_rate=1e12, **{"save_strategy": "no", "eval_strategy": "no",
                                                       "load_best_model_at_end": False, **settings},
                                report_to="none", use_cpu=True, disable_tqdm=True, seed=8)
    sentences = [f"sentence {i} about the {['red', 'old', 'new'][i % 3]} harbour" for i in range(64)]
    snapshots = {}

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            snapshots[state.global_step] = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    trainer = SimCSETrainer(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": sentences}),
                            callbacks=[Snapshot()], sts_evaluator=sts_evaluator)
    trainer.snapshots = snapshots
    return trainer


def test_the_default_fused_optimizer_skips_a_non_finite_update_on_the_device(tiny_backbone, tmp_path):
    """transformers' default optimizer (fused AdamW) leaves the weights as they were for the non-finite update of
    step 2 (the flag is its ``found_inf``), and the run stops at the next update, when the flag is read: the model
    in memory is step 1's."""
    trainer = python_run(tiny_backbone, tmp_path / "out", max_steps=4)
    with pytest.raises(DataError, match=r"^step 2: the loss or its gradient is not finite \(loss nan"):
        trainer.train()
    assert trainer.state.global_step == 2
    weights = trainer.model.state_dict()
    assert all(torch.equal(weights[name], tensor) for name, tensor in trainer.snapshots[1].items())


def test_a_non_finite_last_update_stops_train_and_no_save_writes_it(tiny_backbone, tmp_path):
    """With an optimizer that cannot skip on the device (``adamw_torch``) the non-finite update of the last step
    reaches the weights in memory: ``train()`` still raises for it (the flag is read before it returns), and a
    caller's ``save_model`` afterwards is refused in one line, nothing written."""
    trainer = python_run(tiny_backbone, tmp_path / "out", max_steps=2, optim="adamw_torch")
    with pytest.raises(DataError, match=r"^step 2: the loss or its gradient is not finite"):
        trainer.train()
    with pytest.raises(DataError, match=r"^the final model: not written, \d+ tensor\(s\) hold NaN"):
        trainer.save_model(str(tmp_path / "saved"))
    assert not (tmp_path / "saved").exists()


def test_an_evaluation_after_a_non_finite_update_is_not_run(tiny_backbone, tmp_path, data_dir):
    """Step 2's update is not finite and step 2 evaluates: the flag is read before the evaluation, which never
    scores (nor selects) the weights of that update."""
    scored = []

    class Recording(STSEvaluator):
        def __call__(self, encode):
            scored.append(1)
            return super().__call__(encode)

    trainer = python_run(tiny_backbone, tmp_path / "out", max_steps=4, eval_strategy="steps", eval_steps=2,
                         sts_evaluator=Recording(data_dir, ["STSBenchmark"], "dev"))
    with pytest.raises(DataError, match=r"^step 2: the loss or its gradient is not finite"):
        trainer.train()
    assert not scored
