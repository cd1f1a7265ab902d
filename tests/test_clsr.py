"""CLSR: NT-Xent (eq. 1), frozen encoder, embedding cache, LARS, data guards, save/load round trips."""

import json
import math
import re
import shutil

import numpy as np
import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError
from transformers import AutoModel

from conftest import loss_settings, run_isolated_python, tiny_bert_config
from csekit.errors import DataError
from csekit.evaluation.sts import STS_TASKS, CachedSTSEvaluator, STSEvaluator, load_sts_task
from csekit.methods import METHODS
from csekit.modeling import CLSRConfig, CLSRModel, nt_xent_loss
from csekit.trainers.clsr import CLSRTrainer, CLSRTrainingArguments
from csekit.trainers.clsr_data import (
    HeldOutSentences,
    assert_disjoint_from_held_out,
    build_pair_corpus,
    held_out_sentences,
    load_positive_pairs,
    normalize_sentence,
)
from csekit.trainers.embedding_cache import EmbeddingCache
from csekit.trainers.lars import LARS, lars_param_groups

NO_HELD_OUT = HeldOutSentences({})
SENTENCES = [f"sentence number {i} about a {animal} that {verb} ." for i, (animal, verb) in enumerate(
    [(a, v) for a in ("dog", "cat", "horse", "bird") for v in ("runs", "sleeps", "eats", "jumps")])]


def tiny_clsr(tokenizer, **config_kwargs) -> CLSRModel:
    model = CLSRModel(CLSRConfig(encoder_config=tiny_bert_config().to_dict(), **config_kwargs))
    model.tokenizer = tokenizer
    return model


# ------------------------------------------------------------------------------------------------- loss (eq. 1)
def direct_eq1(first: torch.Tensor, second: torch.Tensor, tau: float, exclude_self: bool = True,
               anchors=None) -> float:
    """Eq. 1 written out: each anchor's positive is its partner, the indicator drops the anchor itself."""
    vectors = torch.cat([first, second]).double()
    m = first.shape[0]
    anchors = range(2 * m) if anchors is None else anchors
    total = 0.0
    for a in anchors:
        b = a + m if a < m else a - m
        sim = lambda i: torch.nn.functional.cosine_similarity(vectors[a], vectors[i], dim=0).item() / tau  # noqa: E731
        denominator = sum(math.exp(sim(i)) for i in range(2 * m) if i != a or not exclude_self)
        total += -math.log(math.exp(sim(b)) / denominator)
    return total / len(anchors)


@pytest.mark.parametrize("settings", loss_settings("clsr"))
def test_nt_xent_matches_direct_formula(settings):
    tau = CLSRConfig(encoder_config=tiny_bert_config().to_dict(), **settings).temperature
    first, second = torch.randn(5, 7), torch.randn(5, 7)
    loss = nt_xent_loss(first, second, temperature=tau).item()
    assert loss == pytest.approx(direct_eq1(first, second, tau), rel=1e-5)
    # the indicator matters: keeping cos(v_a, v_a) / tau in the denominator gives a different value
    assert abs(loss - direct_eq1(first, second, tau, exclude_self=False)) > 1e-2
    # both directions: the mean of the (a, b) terms and the (b, a) terms, not either one alone
    forward, backward = direct_eq1(first, second, tau, anchors=range(5)), direct_eq1(first, second, tau,
                                                                                    anchors=range(5, 10))
    assert loss == pytest.approx((forward + backward) / 2, rel=1e-5)
    assert abs(loss - forward) > 1e-3 and abs(loss - backward) > 1e-3
    assert nt_xent_loss(second, first, tau).item() == pytest.approx(loss, rel=1e-6)


def test_nt_xent_self_similarity_is_excluded():
    """With identical pairs far apart, the loss tends to 0 only if an anchor's own logit is not in its softmax."""
    base = torch.eye(4) * 10
    assert nt_xent_loss(base, base.clone(), temperature=0.01).item() == pytest.approx(0.0, abs=1e-6)


def test_nt_xent_rejects_bad_shapes():
    with pytest.raises(ValueError, match="one shape"):
        nt_xent_loss(torch.randn(4, 3), torch.randn(5, 3))


# --------------------------------------------------------------------------------------------------- model
def test_config_validation():
    with pytest.raises(StrictDataclassClassValidationError, match="temperature"):
        CLSRConfig(encoder_config=tiny_bert_config().to_dict(), temperature=0.0)
    with pytest.raises(StrictDataclassClassValidationError, match="mlp_hidden_size"):
        CLSRConfig(encoder_config=tiny_bert_config().to_dict(), mlp_hidden_size=0)
    with pytest.raises(StrictDataclassClassValidationError, match="encoder_layout"):
        CLSRConfig(encoder_config=tiny_bert_config().to_dict(), encoder_layout="relu")


@pytest.mark.parametrize("layout", ["simclr", "literal"])
def test_encoder_layouts_follow_their_equations(tokenizer, layout):
    """simclr: e(x) = W2 relu(W1 x + b1) + b2 (SimCLR's MLP); literal: relu of that ("ReLU nonlinearity on the
    output"), written out here from the weights."""
    model = tiny_clsr(tokenizer, mlp_hidden_size=16, representation_size=8, encoder_layout=layout)
    pooled = torch.randn(6, 32)
    w1, b1 = model.mlp.dense_in.weight.detach(), model.mlp.dense_in.bias.detach()
    w2, b2 = model.mlp.dense_out.weight.detach(), model.mlp.dense_out.bias.detach()
    expected = torch.clamp(pooled @ w1.T + b1, min=0) @ w2.T + b2
    if layout == "literal":
        expected = torch.clamp(expected, min=0)
    with torch.no_grad():
        torch.testing.assert_close(model.head(pooled), expected)
    assert (expected < 0).any() == (layout == "simclr")  # the layouts differ on this input


def test_encoder_frozen_and_in_eval_mode(tokenizer):
    model = tiny_clsr(tokenizer, mlp_hidden_size=16, representation_size=8)
    assert not any(module.training for module in model.encoder.modules())  # no dropout, even when just built
    model.train()
    assert not any(module.training for module in model.encoder.modules()) and model.mlp.training
    assert not any(p.requires_grad for p in model.encoder.parameters())
    batch = tokenizer(SENTENCES[:4], padding=True, return_tensors="pt")
    output = model(**batch)
    assert output.pooled.shape == (4, 32) and output.embeddings.shape == (4, 8)
    output.embeddings.sum().backward()
    assert all(p.grad is None for p in model.encoder.parameters())
    assert all(p.grad is not None for p in model.mlp.parameters())


def test_training_leaves_encoder_bit_identical(tokenizer, tmp_path):
    model = tiny_clsr(tokenizer)
    before = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    mlp_before = {k: v.clone() for k, v in model.mlp.state_dict().items()}
    corpus = build_pair_corpus(SENTENCES[0::2], SENTENCES[1::2], held_out=NO_HELD_OUT)
    vectors = EmbeddingCache(tmp_path).get(model, corpus.sentences).vectors
    args = CLSRTrainingArguments(output_dir=str(tmp_path), num_train_epochs=4, per_device_train_batch_size=4,
                                 warmup_epochs=1, eval_epochs=2)
    summary = CLSRTrainer(model, args, vectors, corpus, held_out=NO_HELD_OUT).train()
    assert summary["steps"] == 8 and len(summary["history"]) == 2
    after = model.encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.grad is None for p in model.encoder.parameters())
    assert any(not torch.equal(mlp_before[k], v) for k, v in model.mlp.state_dict().items())


def test_trainer_keeps_best_dev_state(tokenizer, tmp_path, data_dir):
    model = tiny_clsr(tokenizer)
    corpus = build_pair_corpus(SENTENCES[0::2], SENTENCES[1::2], held_out=NO_HELD_OUT)
    cache = EmbeddingCache(tmp_path)
    dev = STSEvaluator(data_dir, ("STSBenchmark",), split="dev")
    dev.pairs["STSBenchmark"].sentences1 = dev.pairs["STSBenchmark"].sentences1[:40]  # small and fast
    dev.pairs["STSBenchmark"].sentences2 = dev.pairs["STSBenchmark"].sentences2[:40]
    dev.pairs["STSBenchmark"].scores = dev.pairs["STSBenchmark"].scores[:40]
    dev_evaluator = CachedSTSEvaluator(dev, cache.get(model, dev.sentences()).vectors)
    args = CLSRTrainingArguments(num_train_epochs=6, per_device_train_batch_size=4, warmup_epochs=1, eval_epochs=2)
    vectors = cache.get(model, corpus.sentences).vectors
    summary = CLSRTrainer(model, args, vectors, corpus, NO_HELD_OUT, dev_evaluator).train()
    scores = [record["dev_STSBenchmark"] for record in summary["history"]]
    assert summary["best_dev_STSBenchmark"] == max(scores)
    # the restored e reproduces the best score, and e(cached vectors) is what the saved model's encode returns
    assert dev_evaluator(model.mlp)["STSBenchmark"] == pytest.approx(max(scores), abs=0.01)
    with torch.no_grad():
        cached_path = model.mlp(dev_evaluator.pooled[:10])
    torch.testing.assert_close(model.encode(dev.sentences()[:10], convert_to_numpy=False), cached_path,
                               atol=1e-5, rtol=1e-4)


def test_trainer_rejects_too_few_pairs(tokenizer, tmp_path):
    model = tiny_clsr(tokenizer)
    held_out = HeldOutSentences({"STS12": {normalize_sentence(SENTENCES[0])}})
    corpus = build_pair_corpus(SENTENCES[:3], SENTENCES[3:6], held_out=held_out)
    vectors = torch.zeros(len(corpus.sentences), 32)
    with pytest.raises(DataError, match=r"^2 positive pairs \(1 dropped.*fewer than one batch of 8; lower "
                                        r"--per_device_train_batch_size$"):
        CLSRTrainer(model, CLSRTrainingArguments(per_device_train_batch_size=8), vectors, corpus, held_out)


def test_save_load_round_trip(tokenizer, tmp_path):
    model = tiny_clsr(tokenizer).eval()
    torch.nn.init.normal_(model.mlp.dense_out.weight)
    expected = model.encode(SENTENCES[:3])
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, CLSRModel)
    assert not any(p.requires_grad for p in loaded.encoder.parameters())
    np.testing.assert_allclose(loaded.encode(SENTENCES[:3]), expected, atol=1e-6)
    # the training-only projection head is not part of the saved model
    assert not any("projection" in key for key in loaded.state_dict())


def test_trust_remote_code_round_trip(tokenizer, tmp_path):
    """Each encoder layout saved, then loaded with ``trust_remote_code`` where csekit cannot be imported (one
    interpreter for both)."""
    for layout in ("simclr", "literal"):
        model = tiny_clsr(tokenizer, encoder_layout=layout).eval()
        torch.nn.init.normal_(model.mlp.dense_out.bias)  # some outputs negative, so the two layouts differ
        model.tokenizer = tokenizer
        model.save_pretrained(tmp_path / layout)
        np.save(tmp_path / layout / "expected.npy", model.encode(SENTENCES[:3]))
    code = (
        "import numpy as np\n"
        "from transformers import AutoModel, AutoTokenizer\n"
        "for layout in ('simclr', 'literal'):\n"
        f"    path = {str(tmp_path)!r} + '/' + layout\n"
        "    model = AutoModel.from_pretrained(path, trust_remote_code=True).eval()\n"
        "    tok = AutoTokenizer.from_pretrained(path)\n"
        f"    batch = tok({SENTENCES[:3]!r}, padding=True, return_tensors='pt')\n"
        "    vectors = model(**batch).embeddings.detach().numpy()\n"
        "    np.testing.assert_allclose(vectors, np.load(path + '/expected.npy'), atol=1e-5)\n"
        "    print(type(model).__name__, model.config.encoder_layout, bool((vectors < 0).any()))\n"
    )
    result = run_isolated_python(code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    # rebuilt from config.json alone with the layout it was saved with: only the literal one is non-negative
    # (the lines follow transformers' remote-code question, printed without a newline)
    assert re.findall(r"CLSRModel \w+ \w+", result.stdout) == ["CLSRModel simclr True", "CLSRModel literal False"]


# ---------------------------------------------------------------------------------------------- embedding cache
def test_cache_hit_matches_fresh_pooling(tokenizer, tmp_path):
    model = tiny_clsr(tokenizer)
    cache = EmbeddingCache(tmp_path)
    first = cache.get(model, SENTENCES)
    tokenizer(SENTENCES[:2], truncation=True, max_length=5, padding="max_length")  # tokenizer state changes...
    second = cache.get(model, SENTENCES)  # ...but the model fingerprint does not
    assert (first.status, second.status) == ("built", "hit")
    assert torch.equal(first.vectors, second.vectors)
    torch.testing.assert_close(second.vectors, model.encode_pooled(SENTENCES))


def test_cache_invalidated_by_model_pooling_and_data_change(tokenizer, tmp_path):
    model = tiny_clsr(tokenizer)
    cache = EmbeddingCache(tmp_path)
    original = cache.get(model, SENTENCES)
    with torch.no_grad():
        model.encoder.embeddings.word_embeddings.weight[:] += 0.5  # a different model, same architecture
    changed_model = cache.get(model, SENTENCES)
    assert changed_model.status == "built" and changed_model.path != original.path
    assert not torch.allclose(changed_model.vectors, original.vectors)
    torch.testing.assert_close(changed_model.vectors, model.encode_pooled(SENTENCES))
    cls_model = tiny_clsr(tokenizer, pooler_type="cls_before_pooler")
    cls_model.load_state_dict(model.state_dict())
    assert cache.get(cls_model, SENTENCES).path != changed_model.path
    changed_data = cache.get(model, SENTENCES[:-1] + ["a different last sentence ."])
    assert changed_data.status == "built" and changed_data.path != changed_model.path


def test_cache_rebuilds_truncated_corrupt_and_foreign_files(tokenizer, tmp_path):
    model = tiny_clsr(tokenizer)
    cache = EmbeddingCache(tmp_path)
    entry = cache.get(model, SENTENCES)
    good = entry.path.read_bytes()

    entry.path.write_bytes(good[: len(good) // 2])  # truncated
    rebuilt = cache.get(model, SENTENCES)
    assert rebuilt.status.startswith("rebuilt (unreadable")
    torch.testing.assert_close(rebuilt.vectors, entry.vectors)
    assert cache.get(model, SENTENCES).status == "hit"  # the rebuilt file is valid again

    corrupt = bytearray(good)
    corrupt[-5] ^= 0xFF  # flip bits inside the tensor data
    entry.path.write_bytes(bytes(corrupt))
    assert cache.get(model, SENTENCES).status == "rebuilt (checksum mismatch)"

    other = cache.get(model, SENTENCES[:8])  # a valid entry for other data, copied over this one
    shutil.copy(other.path, entry.path)
    assert cache.get(model, SENTENCES).status == "rebuilt (data_fingerprint differs)"
    assert not list(tmp_path.glob("*.tmp"))  # nothing half-written left behind


# ------------------------------------------------------------------------------------------------------ LARS
def test_lars_step_uses_trust_ratio_and_skips_biases():
    weight = torch.nn.Parameter(torch.tensor([[3.0, 4.0]]))  # ||w|| = 5
    bias = torch.nn.Parameter(torch.tensor([1.0]))
    module = torch.nn.Module()
    module.weight, module.bias = weight, bias
    optimizer = LARS(lars_param_groups(module, weight_decay=0.1), lr=0.5, momentum=0.0, trust_coefficient=0.01)
    weight.grad = torch.tensor([[0.0, 1.0]])
    bias.grad = torch.tensor([2.0])
    optimizer.step()
    grad = torch.tensor([[0.3, 1.4]])  # grad + 0.1 * w
    ratio = 0.01 * 5.0 / grad.norm()
    torch.testing.assert_close(weight.data, torch.tensor([[3.0, 4.0]]) - 0.5 * ratio * grad)
    torch.testing.assert_close(bias.data, torch.tensor([0.0]))  # plain SGD: 1 - 0.5 * 2, no decay, no ratio


def test_lars_update_is_invariant_to_gradient_scale_and_handles_zero_norms():
    updates = []
    for scale in (1.0, 1000.0):
        weight = torch.nn.Parameter(torch.ones(3, 3))
        optimizer = LARS([weight], lr=1.0, momentum=0.0)
        weight.grad = torch.full((3, 3), scale)
        optimizer.step()
        updates.append(weight.data.clone())
    torch.testing.assert_close(updates[0], updates[1])
    zero = torch.nn.Parameter(torch.zeros(2, 2))
    optimizer = LARS([zero], lr=0.1, momentum=0.0)
    zero.grad = torch.ones(2, 2)
    optimizer.step()  # ||w|| = 0: ratio 1, no NaN
    torch.testing.assert_close(zero.data, torch.full((2, 2), -0.1))


def test_lars_momentum_accumulates():
    weight = torch.nn.Parameter(torch.tensor([[1.0]]))
    optimizer = LARS([{"params": [weight], "layer_adaptation": False}], lr=0.1, momentum=0.9)
    for _ in range(2):
        weight.grad = torch.tensor([[1.0]])
        optimizer.step()
    torch.testing.assert_close(weight.data, torch.tensor([[1.0 - 0.1 - (0.9 * 0.1 + 0.1)]]))


def test_lars_rejects_bad_hyperparameters():
    with pytest.raises(ValueError, match="momentum"):
        LARS([torch.nn.Parameter(torch.ones(1))], lr=0.1, momentum=1.5)


# ------------------------------------------------------------------------------------------------------ data
def test_bundled_positive_pairs(real_data_dir):
    first, second = load_positive_pairs("stsb", real_data_dir)
    assert len(first) == len(second) == 1406  # STS-B train pairs scored >= 4: the paper's "totally 1,406 pairs"
    first, second = load_positive_pairs("nli", real_data_dir)
    assert len(first) == 6697  # SNLI dev+test entailment pairs
    with pytest.raises(DataError, match="use one of"):
        load_positive_pairs("wiki", real_data_dir)


def test_positive_pair_sources_read_their_files(data_dir):
    stsb = load_sts_task(data_dir, "STSBenchmark", "train")
    first, second = load_positive_pairs("stsb", data_dir)
    kept = [(a, b) for a, b, score in zip(stsb.sentences1, stsb.sentences2, stsb.scores) if score >= 4.0]
    assert list(zip(first, second)) == kept and 0 < len(kept) < len(stsb.scores)
    rows = [line.split("\t") for line in (data_dir / "nli" / "snli_devtest_pairs.tsv").read_text().splitlines()[1:]]
    first, second = load_positive_pairs("nli", data_dir)
    assert list(zip(first, second)) == [(row[1], row[2]) for row in rows if row[3] == "entailment"]


def evaluation_sentences(data_dir) -> set:
    """Every sentence of the 7 STS test sets and of STS-B dev, as words: lower case, punctuation dropped."""
    words = lambda sentence: tuple(re.findall(r"[^\W_]+", sentence.lower()))  # noqa: E731
    sets = [STSEvaluator(data_dir, STS_TASKS, split="test"), STSEvaluator(data_dir, ("STSBenchmark",), split="dev")]
    return {words(s) for evaluator in sets for s in evaluator.sentences()}, words


def test_default_sources_share_no_sentence_with_evaluation_sets(real_data_dir, tmp_path):
    """No training sentence of stsb, nli or a user CSV is a test sentence of the 7 STS tasks or an STS-B dev sentence
    (model selection), up to case, spacing and punctuation."""
    data_dir = real_data_dir
    held, words = evaluation_sentences(data_dir)
    test = STSEvaluator(data_dir, STS_TASKS, split="test").pairs
    dev = STSEvaluator(data_dir, ("STSBenchmark",), split="dev").pairs["STSBenchmark"]
    path = tmp_path / "pairs.csv"
    path.write_text("sent0,sent1\n"
                    f"{test['STS12'].sentences1[0].upper()} !,A clean sentence .\n"  # a test sentence, re-cased
                    f"Another clean sentence .,{dev.sentences2[3]}\n"  # an STS-B dev sentence
                    f"{test['SICKRelatedness'].sentences1[0]} .,Yet another clean one .\n"  # SICK-R, with a period
                    "Two dogs play .,Two dogs are playing .\n")
    expected = {"stsb": (1406, 181), "nli": (6697, 6556), str(path): (4, 1)}
    held_out = held_out_sentences(data_dir)
    for source, (total, kept) in expected.items():
        first, second = load_positive_pairs(source, data_dir)
        corpus = build_pair_corpus(first, second, held_out)
        assert (len(first), len(corpus.pairs), corpus.dropped) == (total, kept, total - kept), source
        assert not {words(s) for s in corpus.sentences} & held, source
        assert corpus.contaminated == {}
    assert set(held_out.sets) == {*STS_TASKS, "STSBenchmark-dev"}


def test_paper_selection_keeps_every_pair_and_counts_the_overlap(real_data_dir):
    """--test_overlap keep: the paper's 1,406 pairs, and for each evaluation set the number of pairs touching it."""
    data_dir = real_data_dir
    held, words = evaluation_sentences(data_dir)
    first, second = load_positive_pairs("stsb", data_dir)
    corpus = build_pair_corpus(first, second, held_out_sentences(data_dir), drop=False)
    assert len(corpus.pairs) == 1406 and corpus.dropped == 0
    sets = {task: STSEvaluator(data_dir, (task,), split="test").sentences() for task in STS_TASKS}
    sets["STSBenchmark-dev"] = STSEvaluator(data_dir, ("STSBenchmark",), split="dev").sentences()
    expected = {}
    for name, sentences in sets.items():
        member = {words(s) for s in sentences}
        count = sum(words(a) in member or words(b) in member for a, b in zip(first, second))
        if count:
            expected[name] = count
    assert corpus.contaminated == corpus.overlap == expected
    assert set(expected) == {*STS_TASKS, "STSBenchmark-dev"}  # STS-B was built from STS12-16: every set overlaps


def test_held_out_check_allows_only_declared_contamination():
    held_out = HeldOutSentences({"STS12": {normalize_sentence("A cat sleeps.")}, "STS13": {"a dog runs"}})
    assert_disjoint_from_held_out(["A  CAT sleeps !"], held_out, declared=["STS12"])
    with pytest.raises(DataError, match=r"^1 training sentence\(s\) belong to held-out evaluation sets \(STS12\)"):
        assert_disjoint_from_held_out(["a cat sleeps", "A horse ."], held_out)
    with pytest.raises(DataError, match="STS13"):
        assert_disjoint_from_held_out(["A dog runs ."], held_out, declared=["STS12"])


class Killed(Exception):
    pass


def test_killed_run_resumed_from_its_last_checkpoint_equals_the_uninterrupted_run(tokenizer, tmp_path, data_dir,
                                                                                  monkeypatch):
    """8 epochs, dev every 2, a checkpoint every 3 (so one falls between dev records). A run killed in its epoch-6
    evaluation, started again with --resume_from_checkpoint last, trains epochs 4-8 only (10 steps, not 16) and ends
    with the uninterrupted run's head, history and best epoch."""
    import csekit.trainers.clsr as clsr

    corpus = build_pair_corpus(SENTENCES[0::2], SENTENCES[1::2], held_out=NO_HELD_OUT)
    dev = STSEvaluator(data_dir, ("STSBenchmark",), split="dev")
    torch.manual_seed(0)
    initial = tiny_clsr(tokenizer).state_dict()
    cache = EmbeddingCache(tmp_path / "cache")
    steps = []
    loss = clsr.nt_xent_loss
    monkeypatch.setattr(clsr, "nt_xent_loss", lambda *a, **k: steps.append(1) or loss(*a, **k))

    def run(output_dir, crash_at_evaluation=None, resume=None):
        model = tiny_clsr(tokenizer)
        model.load_state_dict(initial)
        evaluator = CachedSTSEvaluator(dev, cache.get(model, dev.sentences()).vectors)
        calls = []

        def dev_scores(transform=None):
            calls.append(1)
            if len(calls) == crash_at_evaluation:
                raise Killed
            return evaluator(transform)

        args = CLSRTrainingArguments(output_dir=str(output_dir), num_train_epochs=8, per_device_train_batch_size=4,
                                     warmup_epochs=1, eval_epochs=2, save_epochs=3, resume_from_checkpoint=resume)
        steps.clear()
        summary = CLSRTrainer(model, args, cache.get(model, corpus.sentences).vectors, corpus, NO_HELD_OUT,
                              dev_scores).train()
        return model.mlp.state_dict(), summary, len(steps)

    whole, whole_summary, whole_steps = run(tmp_path / "whole")
    with pytest.raises(Killed):
        run(tmp_path / "killed", crash_at_evaluation=3)
    assert sorted(p.name for p in (tmp_path / "killed").iterdir()) == ["checkpoint-3"]  # epoch 6 was never saved
    resumed, resumed_summary, resumed_steps = run(tmp_path / "killed", resume="last")
    assert (whole_steps, resumed_steps) == (16, 10)
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name], rtol=0, atol=0)
    def untimed(summary):
        history = [{k: v for k, v in record.items() if k != "seconds"} for record in summary["history"]]
        return {**summary, "history": history, "train_seconds": None}

    assert untimed(resumed_summary) == untimed(whole_summary)  # losses, lr, dev scores, best epoch, steps


def test_trainer_refuses_held_out_sentences(tokenizer):
    model = tiny_clsr(tokenizer)
    corpus = build_pair_corpus(SENTENCES[0::2], SENTENCES[1::2], held_out=NO_HELD_OUT)
    trainer = CLSRTrainer(model, CLSRTrainingArguments(per_device_train_batch_size=4), torch.zeros(16, 32), corpus,
                          held_out=HeldOutSentences({"STSBenchmark-dev": {normalize_sentence(SENTENCES[3])}}))
    with pytest.raises(DataError, match="STSBenchmark-dev"):
        trainer.train()


def test_recipe_help_lists_flags(capsys):
    """The recipe's parser (the script's door prints the same: test_package.py)."""
    from csekit.recipes.clsr import RECIPE

    with pytest.raises(SystemExit) as stop:
        RECIPE.parse(["--help"])
    assert stop.value.code == 0
    printed = capsys.readouterr().out
    for flag in ("--train_file", "--report_to", "--pooler_type", "--per_device_train_batch_size", "--num_train_epochs",
                 "--random_init", "--cache_dir", "--test_overlap", "--encoder_layout"):
        assert flag in printed


def test_recipe_seed_fixes_the_head_initialisation(tokenizer, tmp_path):
    from transformers import BertModel

    from csekit.recipes.clsr import RECIPE, BackboneArguments
    BertModel(tiny_bert_config()).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    args = RECIPE.argument_types()[0](model_name_or_path=str(tmp_path))
    first, again, other = (RECIPE.build_model(args, BackboneArguments(), seed).mlp.state_dict() for seed in (7, 7, 8))
    assert all(torch.equal(first[k], again[k]) for k in first)  # a seed reproduces the run
    assert not torch.equal(first["dense_in.weight"], other["dense_in.weight"])


def test_recipe_marks_contamination_in_results_table_and_card(tokenizer, tmp_path, data_dir, capsys):
    """--test_overlap keep: the overlapping sets are marked in eval_results.json, the printed table and the card
    (and left out of its model-index); the default drops those pairs and marks nothing."""
    from transformers import BertModel

    from csekit.publishing.model_card import render_model_card
    from csekit.recipes.clsr import main

    base = tmp_path / "base"
    BertModel(tiny_bert_config()).save_pretrained(base)
    tokenizer.save_pretrained(base)
    held_out = held_out_sentences(data_dir).sets

    def only_in(name, sentences):  # a sentence of this evaluation set and of no other
        return next(s for s in sentences if not any(normalize_sentence(s) in held for other, held in held_out.items()
                                                    if other != name))

    test = STSEvaluator(data_dir, ("STS12", "SICKRelatedness"), split="test").pairs
    lines = [f"{SENTENCES[i]},{SENTENCES[i + 1]}" for i in range(0, 12, 2)]
    lines += [f"{only_in('STS12', test['STS12'].sentences1)},{SENTENCES[12]}",
              f"{SENTENCES[13]},{only_in('SICKRelatedness', test['SICKRelatedness'].sentences2)}"]
    (tmp_path / "pairs.csv").write_text("sent0,sent1\n" + "\n".join(lines) + "\n")
    common = ["--model_name_or_path", str(base), "--train_file", str(tmp_path / "pairs.csv"), "--max_length", "64",
              "--per_device_train_batch_size", "4", "--num_train_epochs", "2", "--warmup_epochs", "0",
              "--cache_dir", str(tmp_path / "cache"), "--data_dir", str(data_dir)]

    main(common + ["--output_dir", str(tmp_path / "keep"), "--test_overlap", "keep"])
    record = json.loads((tmp_path / "keep" / "eval_results.json").read_text())
    assert record["pairs"] == 8 and record["dropped_pairs"] == 0
    assert record["contaminated"] == record["overlap_pairs"] == {"STS12": 1, "SICKRelatedness": 1}
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith("| + CLSR"))
    starred = [cell.endswith("*") for cell in row[2:-2].split(" | ")[1:]]
    assert starred == [True, False, False, False, False, False, True, True]  # STS12, SICK-R and the average
    assert "* contaminated (--test_overlap keep): training pairs sharing a sentence with the set: STS12 1, " \
           "SICKRelatedness 1" in printed
    card = str(render_model_card(tmp_path / "keep"))
    assert ("| ⚠ **contaminated**: training pairs sharing a sentence with the test set "
            "| 1 | 0 | 0 | 0 | 0 | 0 | 1 | yes |") in card
    assert "**Contaminated scores.**" in card and "STS12 1, SICKRelatedness 1" in card
    metadata = card.split("---")[1]
    assert "mteb/" not in metadata  # SentEval's scores never stand under an MTEB dataset id

    main(common + ["--output_dir", str(tmp_path / "drop")])
    record = json.loads((tmp_path / "drop" / "eval_results.json").read_text())
    assert (record["pairs"], record["dropped_pairs"], record["contaminated"]) == (6, 2, {})
    assert record["overlap_pairs"] == {"STS12": 1, "SICKRelatedness": 1}
    assert "*" not in capsys.readouterr().out.split("STS test")[1]
    card = str(render_model_card(tmp_path / "drop"))
    assert "contaminated" not in card and "SentEval \"mean\"" in card


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_recipe_takes_the_trainers_step_flags(method):
    """One vocabulary of flags: --max_steps, --eval_steps, --save_steps, --logging_steps parse in every recipe."""
    import importlib

    recipe = importlib.import_module(METHODS[method].recipe).RECIPE
    parsed = recipe.parse(["--max_steps", "4", "--eval_steps", "2", "--save_steps", "2", "--logging_steps", "1",
                           "--model_name_or_path", "unused"])
    values = {name: value for group in parsed if group is not None
              for name, value in vars(group).items() if name.endswith("_steps")}
    assert {key: values[key] for key in ("max_steps", "eval_steps", "save_steps", "logging_steps")} == {
        "max_steps": 4, "eval_steps": 2, "save_steps": 2, "logging_steps": 1}


def test_clsr_step_flags_are_whole_epochs_and_train_what_the_epoch_flags_train(tokenizer, tmp_path, data_dir,
                                                                               caplog, capsys):
    """8 pairs at batch 4 are 2 steps an epoch: --max_steps 4 --eval_steps 2 --save_steps 2 --logging_steps 2 is
    --num_train_epochs 2 --eval_epochs 1 --save_epochs 1 --logging_epochs 1 (the same head, bit for bit, said in one
    log line); --max_steps 3 is refused in one line naming 2 and 4."""
    import logging

    from transformers import BertModel

    from conftest import load_weights
    from csekit import cli

    base = tmp_path / "base"
    BertModel(tiny_bert_config()).save_pretrained(base)
    tokenizer.save_pretrained(base)
    lines = [f"{SENTENCES[i]},{SENTENCES[i + 1]}" for i in range(0, 16, 2)]
    (tmp_path / "pairs.csv").write_text("sent0,sent1\n" + "\n".join(lines) + "\n")
    common = ["train", "clsr", "--model_name_or_path", str(base), "--train_file", str(tmp_path / "pairs.csv"),
              "--per_device_train_batch_size", "4", "--warmup_epochs", "0", "--cache_dir", str(tmp_path / "cache"),
              "--do_test_eval", "false"]
    with caplog.at_level(logging.INFO):
        assert cli.main(common + ["--output_dir", str(tmp_path / "steps"), "--max_steps", "4", "--eval_steps", "2",
                                  "--save_steps", "2", "--logging_steps", "2"]) == 0
    assert ("CLSR counts epochs of 2 steps: --max_steps 4 = --num_train_epochs 2, --eval_steps 2 = --eval_epochs 1, "
            "--save_steps 2 = --save_epochs 1, --logging_steps 2 = --logging_epochs 1") in caplog.text
    assert cli.main(common + ["--output_dir", str(tmp_path / "epochs"), "--num_train_epochs", "2", "--eval_epochs",
                              "1", "--save_epochs", "1", "--logging_epochs", "1"]) == 0
    steps, epochs = (load_weights(tmp_path / name) for name in ("steps", "epochs"))
    assert all(torch.equal(steps[name], epochs[name]) for name in epochs)
    capsys.readouterr()
    assert cli.main(common + ["--output_dir", str(tmp_path / "odd"), "--max_steps", "3"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "csekit: error: --max_steps 3: CLSR trains whole epochs of 2 steps (pairs // --per_device_train_batch_size), "
        "so use a multiple of 2 (2 or 4) or --num_train_epochs")
