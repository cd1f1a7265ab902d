"""Training end to end on a tiny model: resume equivalence, bf16, logging, YAML/flag parsing, encode invariance."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertModel, TrainerCallback

from conftest import tiny_bert_config
from csekit.modeling import SimCSEModel
from csekit.recipes.simcse import RECIPE
from csekit.trainers.recipe import run_recipe
from csekit.trainers.trainer import SimCSETrainer


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory, tokenizer):
    folder = tmp_path_factory.mktemp("tiny_backbone")
    torch.manual_seed(0)
    BertModel(tiny_bert_config(max_position_embeddings=512)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, data_dir):
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.head11914.txt").read_text().splitlines()[:96]
    path = tmp_path_factory.mktemp("corpus") / "wiki.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def train(parsed, trainer_class=SimCSETrainer):
    """Run the SimCSE recipe on parsed arguments, with ``trainer_class`` in place of its trainer."""
    return run_recipe(dataclasses.replace(RECIPE, trainer_class=trainer_class), *parsed)


def recipe_args(backbone, corpus, output_dir, *extra):
    argv = ["--model_name_or_path", str(backbone), "--pooler_type", "cls", "--train_file", str(corpus),
            "--output_dir", str(output_dir), "--per_device_train_batch_size", "8", "--max_steps", "6",
            "--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1", "--save_total_limit", "5",
            "--do_test_eval", "false", "--seed", "7", *extra]
    return RECIPE.parse(argv)


class Interrupted(Exception):
    pass


class InterruptAfterStep5(SimCSETrainer):
    """Dies in the middle of step 5, after checkpoint-4 was written: a crash, not a clean stop."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

        class Crash(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == 5:
                    raise Interrupted

        self.add_callback(Crash)


def final_state(output_dir: Path):
    checkpoint = output_dir / "checkpoint-6"
    history = json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
    weights = SimCSEModel.from_pretrained(checkpoint).state_dict()
    return history, weights


def test_resumed_run_ends_like_an_uninterrupted_one(tiny_backbone, corpus, tmp_path):
    train(recipe_args(tiny_backbone, corpus, tmp_path / "full"))
    with pytest.raises(Interrupted):
        train(recipe_args(tiny_backbone, corpus, tmp_path / "cut"), InterruptAfterStep5)
    assert (tmp_path / "cut" / "checkpoint-4").is_dir() and not (tmp_path / "cut" / "checkpoint-6").exists()
    train(recipe_args(tiny_backbone, corpus, tmp_path / "cut", "--resume_from_checkpoint", "last"))

    full_history, full_weights = final_state(tmp_path / "full")
    cut_history, cut_weights = final_state(tmp_path / "cut")
    full_evals = [h["eval_STSBenchmark"] for h in full_history if "eval_STSBenchmark" in h]
    cut_evals = [h["eval_STSBenchmark"] for h in cut_history if "eval_STSBenchmark" in h]
    assert len(full_evals) == 3 and cut_evals == full_evals
    full_losses = [h["loss"] for h in full_history if "loss" in h]
    cut_losses = [h["loss"] for h in cut_history if "loss" in h]
    assert cut_losses[-2:] == pytest.approx(full_losses[-2:], rel=1e-5)
    for name, tensor in full_weights.items():
        torch.testing.assert_close(cut_weights[name], tensor, rtol=1e-5, atol=1e-7, msg=name)
    # the final folder holds the best checkpoint by STS-B dev
    best = json.loads((tmp_path / "full" / "checkpoint-6" / "trainer_state.json").read_text())["best_metric"]
    assert best == max(full_evals)


def test_components_logged_and_bf16_training_step(tiny_backbone, corpus, tmp_path):
    train(recipe_args(tiny_backbone, corpus, tmp_path / "bf16", "--bf16", "true", "--max_steps", "2", "--use_cpu",
                      "true"))
    history = json.loads((tmp_path / "bf16" / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    losses = [h for h in history if "loss" in h]
    assert all(np.isfinite(h["loss"]) and h["loss_contrastive"] == pytest.approx(h["loss"], rel=1e-3)
               for h in losses)
    saved = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert saved["model_type"] == "csekit-simcse" and saved["temperature"] == 0.05


def test_yaml_then_flags_precedence(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("learning_rate: 1.0e-4\ntemperature: 0.1\nmax_steps: 7\n")
    model, data, training, _ = RECIPE.parse(["--config", str(config), "--temperature", "0.2"])
    assert training.learning_rate == 1e-4 and training.max_steps == 7 and model.temperature == 0.2
    assert training.per_device_train_batch_size == 64 and training.eval_steps == 125  # paper defaults


def test_yaml_unknown_key_is_rejected(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("learning_rte: 1.0e-4\n")
    with pytest.raises(SystemExit):
        RECIPE.parse(["--config", str(config)])
    assert "unknown key(s) learning_rte" in capsys.readouterr().err


def test_embeddings_do_not_depend_on_batch_composition(saved_tiny_model):
    model = SimCSEModel.from_pretrained(saved_tiny_model)
    sentences = [f"sentence number {i} " + "word " * (i % 13) for i in range(64)]
    alone = model.encode(sentences[5:6])
    in_batch = model.encode(sentences, batch_size=64)[5:6]
    np.testing.assert_allclose(alone, in_batch, atol=1e-5)
    normalized = model.encode(sentences[:3], normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, rtol=1e-6)
    tensor = model.encode(sentences[:3], convert_to_numpy=False)
    assert isinstance(tensor, torch.Tensor) and tensor.shape == (3, 32)


def test_encode_sentences_encodes_each_distinct_sentence_once(tokenizer):
    from csekit.modeling.encoding import encode_sentences

    batch_rows = []

    def embed_batch(batch):
        batch_rows.append(len(batch["input_ids"]))
        return batch["attention_mask"].sum(1, keepdim=True).float()  # token count: one value per sentence

    sentences = ["a man sleeps .", "a cat", "a man sleeps .", "two dogs run in the park .", "a cat"]
    vectors = encode_sentences(embed_batch, tokenizer, sentences, batch_size=2)
    assert sum(batch_rows) == 3
    alone = [encode_sentences(embed_batch, tokenizer, [s]).item() for s in sentences]
    assert vectors[:, 0].tolist() == alone


def test_encode_rejects_a_bare_string(saved_tiny_model):
    model = SimCSEModel.from_pretrained(saved_tiny_model)
    with pytest.raises(TypeError, match="list of sentences"):
        model.encode("just one string")
