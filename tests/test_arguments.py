"""Recipe argument parsing (YAML then flags) and encoding invariances; resuming is in test_resume.py, mixed precision in
test_mixed_precision.py, every method resumed, in half precision and in several processes in test_conformance.py."""

import numpy as np
import pytest
import torch

from csekit.modeling import SimCSEModel
from csekit.recipes.simcse import RECIPE


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


def test_train_file_given_twice_to_a_recipe_taking_one_is_one_line(capsys):
    """CLSR trains on one set of pairs: a second --train_file, which the other recipes add, would silently replace the
    first (argparse keeps the last)."""
    from csekit.recipes.clsr import RECIPE as clsr

    with pytest.raises(SystemExit) as exit_:
        clsr.parse(["--train_file", "a.csv", "--seed", "3", "--train_file=b.csv"])
    error = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "--train_file is given more than once, but this recipe takes one" in error
    assert "\n" not in error
    assert RECIPE.parse(["--seed", "1", "--seed", "2"])[2].seed == 2  # another flag: the last, as argparse keeps it


def test_train_file_given_several_times_or_with_several_values_is_the_list_of_them(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("train_file:\n  - a.csv\n  - b.txt\n")
    for argv in (["--train_file", "a.csv", "--train_file", "b.txt"], ["--train_file", "a.csv", "b.txt"],
                 ["--config", str(config)]):
        assert RECIPE.parse(argv)[1].train_file == ["a.csv", "b.txt"]
    assert RECIPE.parse(["--train_file", "a.csv"])[1].train_file == "a.csv"  # one is recorded as a path
    assert RECIPE.parse(["--config", str(config), "--train_file", "c.csv"])[1].train_file == "c.csv"  # flags win


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


class CountingTokenizer:
    """A tokenizer that counts its calls (each a pass over sentences on the host)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.tokenizer(*args, **kwargs)


def test_a_batch_cache_tokenizes_a_repeated_sentence_list_once(tokenizer):
    """An evaluation repeated every few steps tokenizes its sentences once; the vectors are the uncached ones, and
    another sentence list (or batch size) is tokenized anew."""
    from csekit.modeling.encoding import BatchCache, encode_sentences

    def embed_batch(batch):
        return batch["input_ids"].float().sum(1, keepdim=True)

    counting, cache = CountingTokenizer(tokenizer), BatchCache()
    sentences = [f"sentence number {i} " + "word " * (i % 7) for i in range(10)]
    expected = encode_sentences(embed_batch, tokenizer, sentences, batch_size=4)
    first = encode_sentences(embed_batch, counting, sentences, batch_size=4, cache=cache)
    calls = counting.calls
    assert calls == 4  # the length pass, then 3 batches
    assert torch.equal(encode_sentences(embed_batch, counting, sentences, batch_size=4, cache=cache), expected)
    assert torch.equal(first, expected) and counting.calls == calls
    other = sentences[::-1][:7]
    assert torch.equal(encode_sentences(embed_batch, counting, other, batch_size=4, cache=cache),
                       encode_sentences(embed_batch, tokenizer, other, batch_size=4))
    assert counting.calls == calls + 3
    encode_sentences(embed_batch, counting, other, batch_size=2, cache=cache)
    assert counting.calls == calls + 3 + 5


def test_in_loop_evaluation_tokenizes_the_dev_set_once(saved_tiny_model, tokenizer, data_dir, tmp_path):
    """The trainer's STS-B dev evaluation, run every ``eval_steps``, reuses the dev set's tokenized batches: the
    second evaluation calls the tokenizer no more and scores the same."""
    from csekit.evaluation.sts import STSEvaluator
    from csekit.trainers import CSETrainingArguments, SimCSETrainer

    counting = CountingTokenizer(tokenizer)
    model = SimCSEModel.from_pretrained(saved_tiny_model)
    args = CSETrainingArguments(output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True)
    trainer = SimCSETrainer(model=model, args=args, processing_class=counting,
                            sts_evaluator=STSEvaluator(data_dir, ("STSBenchmark",), split="dev"))
    first = trainer.evaluate()
    calls = counting.calls
    assert calls > 1 and trainer.evaluate() == first and counting.calls == calls


def test_encode_rejects_a_bare_string(saved_tiny_model):
    model = SimCSEModel.from_pretrained(saved_tiny_model)
    with pytest.raises(TypeError, match="list of sentences"):
        model.encode("just one string")


def test_training_log_lines_print_numbers_not_quoted_strings(saved_tiny_model, tokenizer, tmp_path, capsys):
    """transformers' progress bar prints ``{'loss': '0.0123'}``; the csekit trainers print ``loss=0.0123``."""
    from transformers import TrainerState
    from transformers.trainer_callback import ProgressCallback

    from csekit.trainers.simcse import SimCSETrainer
    from csekit.trainers.trainer import NumericProgressCallback

    args = RECIPE.parse(["--model_name_or_path", str(saved_tiny_model), "--output_dir", str(tmp_path),
                         "--report_to", "none", "--eval_strategy", "no", "--load_best_model_at_end", "false"])[2]
    model = SimCSEModel.from_pretrained(saved_tiny_model)
    trainer = SimCSETrainer(model=model, args=args, processing_class=tokenizer)
    callbacks = [type(callback) for callback in trainer.callback_handler.callbacks]
    assert NumericProgressCallback in callbacks and ProgressCallback not in callbacks
    assert model.config.pad_token_id == tokenizer.pad_token_id  # recorded, so the Trainer has nothing to align
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, NumericProgressCallback))
    callback.training_bar = __import__("tqdm").tqdm(disable=True)
    callback.training_bar.write = print
    state = TrainerState()
    state.is_world_process_zero = True
    callback.on_log(args, state, None, logs={"loss": 0.012345678, "epoch": 0.5, "total_flos": 1.0})
    assert capsys.readouterr().out.strip() == "loss=0.01235  epoch=0.5"
