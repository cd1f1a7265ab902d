"""Finite or refused: a setting that is NaN or infinite never starts a run, a non-finite loss or gradient stops it
before the update it would spoil, and no non-finite weight is ever written.

The oracle is the user's view: the exit status, the one line on stderr, and the bytes of the model already in the
output folder (which must not change). The settings' rows (flags, YAML, a model folder's config.json) are in
``test_bad_input.py``.
"""

import hashlib
import math
from pathlib import Path

import pytest
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import Trainer

from conftest import recipe_flags, tiny_bert_config
from csekit import cli
from csekit.errors import DataError
from csekit.methods import METHODS
from csekit.modeling import CLSRConfig, CMLMCSEConfig, SimCSEConfig, WhitenedCSEConfig
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
    """A learning rate that blows the weights up in step 1 makes step 2's loss NaN: the run stops at step 2, before
    its update and its checkpoint, names the step and the loss components, and the folder (the model already there)
    stays byte-identical."""
    out = tmp_path / "out"
    assert cli.main(train(method, tiny_backbone, corpus, out, "--save_strategy", "no", "--max_steps", "1")) == 0
    before = contents(out)
    capsys.readouterr()
    code = cli.main(train(method, tiny_backbone, corpus, out, "--learning_rate", "1e12", "--seed", "8"))
    [line] = capsys.readouterr().err.strip().splitlines()[-1:]
    assert code == 2, line
    assert line.startswith("csekit: error: step 2: the loss or its gradient is not finite (loss nan, loss_")
    assert line.endswith("the run stopped before this update (checkpoints and --output_dir keep only finite weights); "
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
