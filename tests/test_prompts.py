"""Instruction prompts (``--prompt``, a config's ``prompt``): prepended to every text in training (the collator),
evaluation and ``encode``, and written as the folder's default sentence-transformers prompt, so
``SentenceTransformer(folder).encode(texts)`` equals csekit's ``encode(texts)``. A model trained from a
sentence-transformers folder with a default prompt keeps it, at every door.

Oracles: ``SentenceTransformer(folder)`` (its own prompt handling) on the saved folder; the tokenizer on the prompted
text for the collator's batches."""

import json

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoModel, AutoTokenizer

from csekit import cli
from csekit.errors import DataError
from csekit.evaluation.encoders import load_embedder
from csekit.modeling import ESimCSEConfig, ESimCSEForPreTraining, SimCSEModel
from csekit.trainers import CSETrainingArguments, ESimCSETrainer, SimCSETrainer
from test_decoders import SENTENCES, decoders_dir  # noqa: F401  (the tiny decoders fixture)

PROMPT = "query: "
ROWS = Dataset.from_dict({"sent0": [f"sentence {i} tells of the harbour {i * 7}" for i in range(32)]})


def arguments(out, **overrides) -> CSETrainingArguments:
    return CSETrainingArguments(**{**dict(output_dir=str(out), per_device_train_batch_size=8, max_steps=2,
                                          save_strategy="no", eval_strategy="no", load_best_model_at_end=False,
                                          report_to="none", use_cpu=True, learning_rate=1e-3), **overrides})


def test_the_command_line_trains_with_a_prompt_and_sentence_transformers_encodes_as_csekit(
        decoders_dir, corpus, tmp_path, capsys):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "out"
    flags = ["--model_name_or_path", str(decoders_dir / "qwen3"), "--pooler_type", "last_token", "--train_file",
             str(corpus), "--per_device_train_batch_size", "8", "--max_steps", "2", "--save_strategy", "no",
             "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_seq_length", "16",
             "--do_test_eval", "false"]
    assert cli.main(["train", "simcse", *flags, "--lora_r", "8", "--prompt", PROMPT, "--output_dir", str(out),
                     "--do_test_eval", "true"]) == 0  # scored and carded with the prompt
    assert 'prompt `"query: "` before\nevery sentence' in (out / "README.md").read_text()
    model = AutoModel.from_pretrained(out)
    expected = model.encode(SENTENCES)
    assert np.abs(SentenceTransformer(str(out), device="cpu").encode(SENTENCES) - expected).max() <= 1e-6
    assert np.abs(model.encode(SENTENCES, prompt_name="default") - expected).max() == 0
    assert np.abs(model.encode([PROMPT + text for text in SENTENCES], prompt="") - expected).max() <= 1e-6
    assert np.abs(model.encode(SENTENCES, prompt="") - expected).max() > 1e-3  # the prompt is applied
    assert cli.main(["export-onnx", str(out), str(tmp_path / "onnx")]) == 2  # the graph cannot prepend it
    assert "its default prompt 'query: ', which the ONNX graph" in capsys.readouterr().err
    assert not (tmp_path / "onnx").exists()
    embed, _ = load_embedder(str(out))  # csekit evaluate's reader
    assert np.abs(embed(SENTENCES) - expected).max() <= 1e-6
    layout = json.loads((out / "config_sentence_transformers.json").read_text())
    assert layout["prompts"] == {"default": PROMPT} and layout["default_prompt_name"] == "default"
    refused = tmp_path / "refused"
    long_prompt = "Represent this sentence for retrieving the most similar sentences of the harbour: "
    assert cli.main(["train", "simcse", *flags, "--prompt", long_prompt, "--output_dir", str(refused)]) == 2
    assert "which leaves no room for the sentence at --max_seq_length 16" in capsys.readouterr().err
    assert not refused.exists()
    assert cli.main(["train", "esimcse", *flags, "--prompt", PROMPT, "--output_dir", str(refused)]) == 2
    assert not refused.exists()


def test_the_collator_prepends_the_models_prompt_to_every_training_text(decoders_dir, tmp_path):  # noqa: F811
    folder = decoders_dir / "qwen3"
    model = SimCSEModel.from_encoder(str(folder), pooler_type="last_token", prompt=PROMPT)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    trainer = SimCSETrainer(model=model, args=arguments(tmp_path / "run"), train_dataset=ROWS,
                            processing_class=tokenizer)
    batch = trainer.data_collator([{"sent0": "snow"}, {"sent0": "the red boats"}])
    for row, text in enumerate(["snow", "the red boats"]):
        ids = tokenizer(PROMPT + text)["input_ids"]  # as sentence-transformers tokenizes a prompted sentence
        assert batch["input_ids"][row, 0, batch["attention_mask"][row, 0].bool()].tolist() == ids
    trainer.train()


def test_a_sentence_transformers_backbones_default_prompt_is_kept_at_every_door(tiny_backbone, tmp_path):
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(tiny_backbone), max_seq_length=32)
    pooling = models.Pooling(transformer.auto_model.config.hidden_size, "cls")
    backbone = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    backbone.prompts, backbone.default_prompt_name = {"query": PROMPT, "passage": "passage: "}, "query"
    backbone.save(str(tmp_path / "st"))
    torch.manual_seed(0)
    model = SimCSEModel.from_encoder(str(tmp_path / "st"), pooler_type="cls")
    assert model.config.default_prompt == PROMPT and model.prompts()["passage"] == "passage: "
    trainer = SimCSETrainer(model=model, args=arguments(tmp_path / "run"), train_dataset=ROWS)
    assert trainer.data_collator.prompt == PROMPT
    trainer.train()
    trainer.save_model(str(tmp_path / "model"))
    expected = model.encode(SENTENCES)
    assert np.abs(SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(SENTENCES) - expected).max() \
        <= 1e-6
    passage = SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(SENTENCES, prompt_name="passage")
    assert np.abs(model.encode(SENTENCES, prompt_name="passage") - passage).max() <= 1e-6
    esimcse = ESimCSEForPreTraining.from_encoder(str(tmp_path / "st"), pooler_type="cls")
    with pytest.raises(DataError, match="the model's prompt 'query: ' .* ESimCSE repeats tokens"):
        ESimCSETrainer(model=esimcse, args=arguments(tmp_path / "esimcse", lora_r=None), train_dataset=ROWS)


def test_a_prompt_a_method_cannot_train_with_is_refused():
    with pytest.raises(Exception, match="ESimCSE repeats tokens of the tokenized sentence"):  # the @strict check
        ESimCSEConfig(prompt=PROMPT)
    with pytest.raises(Exception, match="prompt must hold words"):
        SimCSEModel.config_class(prompt="  ")
