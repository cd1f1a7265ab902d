"""Mixed precision through the recipes' real Trainer loop. Every method with ``--bf16 true`` (``--fp16 true`` on a
GPU): ``test_conformance.py``. Here: without either flag everything is float32, the similarities are computed in
float32 (``losses.py`` upcasts), and on CPU ``--fp16`` is refused: accelerate would silently train in float32.
"""

import dataclasses
import importlib
from collections import defaultdict
from pathlib import Path

import pytest
import torch

from conftest import recipe_flags, record_output_dtypes
from csekit.errors import DataError
from csekit.modeling import losses
from csekit.recipe_run import run_recipe


def train_recording(method: str, backbone: Path, corpus: Path, output_dir: Path, monkeypatch, *extra) -> dict:
    """Train 2 steps; returns ``{what: {dtypes seen in training}}`` for the encoder's linear layers, the whitening,
    the cosine similarities, the model's embeddings and every loss component."""
    recipe = importlib.import_module(f"csekit.recipes.{method}").RECIPE
    seen = defaultdict(set)

    class Recording(recipe.trainer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            record_output_dtypes(self.model, seen)

        def compute_losses(self, model, outputs, inputs):
            components = super().compute_losses(model, outputs, inputs)
            seen["embeddings"].add(outputs.embeddings.dtype)
            seen["losses"].update(value.dtype for value in components.values())
            return components

    cosine_logits = losses.cosine_logits

    def recorded_cosine_logits(*args, **kwargs):
        logits = cosine_logits(*args, **kwargs)
        seen["similarities"].add(logits.dtype)
        return logits

    monkeypatch.setattr(losses, "cosine_logits", recorded_cosine_logits)
    argv = ["--model_name_or_path", backbone, "--train_file", corpus, "--output_dir", output_dir,
            "--per_device_train_batch_size", 8, "--max_steps", 2, "--save_steps", 2, "--eval_strategy", "no",
            "--load_best_model_at_end", "false", "--logging_steps", 1, "--max_seq_length", 16, "--do_test_eval",
            "false", "--seed", 7, *recipe_flags(method, backbone), *extra]
    run_recipe(dataclasses.replace(recipe, trainer_class=Recording), *recipe.parse([str(a) for a in argv]))
    return seen


def test_without_bf16_everything_is_float32(tiny_backbone, corpus, tmp_path, monkeypatch):
    seen = train_recording("simcse", tiny_backbone, corpus, tmp_path, monkeypatch)
    assert seen["encoder"] == seen["embeddings"] == seen["losses"] == {torch.float32}


def test_under_bf16_the_cosine_similarities_are_float32(tiny_backbone, corpus, tmp_path, monkeypatch):
    seen = train_recording("simcse", tiny_backbone, corpus, tmp_path, monkeypatch, "--bf16", "true")
    assert seen["encoder"] == {torch.bfloat16} and seen["similarities"] == {torch.float32}


def test_fp16_on_cpu_is_refused(tiny_backbone, corpus, tmp_path, monkeypatch):
    with pytest.raises(DataError, match="--fp16 needs a GPU"):
        train_recording("simcse", tiny_backbone, corpus, tmp_path, monkeypatch, "--fp16", "true", "--use_cpu", "true")


def test_the_recorded_test_scores_of_a_bf16_run_are_its_published_folders(tiny_backbone, corpus, data_dir, tmp_path):
    """The card's scores are those of the folder a user downloads: the trained model is scored in float32 as the
    folder loads, not through the bf16 autocast accelerate wrapped its training forward in."""
    import json

    from transformers import AutoModel

    from csekit import cli
    from csekit.evaluation.sts import STS_TASKS, STSEvaluator

    out = tmp_path / "out"
    assert cli.main(["train", "simcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus),
                     "--output_dir", str(out), "--per_device_train_batch_size", "8", "--max_steps", "2",
                     "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                     "--max_seq_length", "16", "--bf16", "true", *recipe_flags("simcse", tiny_backbone)]) == 0
    recorded = json.loads((out / "eval_results.json").read_text())["sts_aggregations"]
    test = STSEvaluator(data_dir, STS_TASKS, split="test")
    model = AutoModel.from_pretrained(out)
    assert test.evaluate(lambda sentences: model.encode(sentences, batch_size=128)) == recorded
