"""Exact gradient caching (``--mini_batch_size`` / ``--mini_batch_tokens``, ``trainers/gradient_cache.py``), for every
method whose registry entry has ``gradient_caching``.

Every comparison is against an uncached reference built here, never a second implementation of caching:

* dropout off: a cached step (batch 8 in chunks of 3, 3 and 2 examples, or of whole examples within a token budget
  that cuts the batch into 3 or more chunks) has the loss and every parameter gradient of the Trainer's own uncached
  step on the whole batch; padded and packed, float64 and float32;
* dropout on: a cached step equals the full-graph step with the same per-chunk random states: the chunks encoded one
  after the other from the step's random state *with* the graph kept, then one loss and one backward;
* ``--bf16``: the cached step runs the encoder in bfloat16 and keeps the losses float32.

2 processes with caching equal 1 without: ``test_conformance.py`` (its launch has a cached job per method).
"""

import copy

import pytest
import torch
from transformers import AutoTokenizer

from conftest import recipe_flags
from csekit.methods import METHODS

BATCH, CHUNK = 8, 3  # chunks of 3, 3 and 2 examples: a last chunk smaller than the others
TOKEN_TENSORS = ("input_ids", "mlm_input_ids")  # what an encoder reads, per example (CMLM-CSE: its masked view 0)


def tokens_per_example(batch: dict) -> list:
    """The token positions each example puts before an encoder, counted here from the collators' layouts: a packed
    row's real tokens (all views; CMLM-CSE's masked copy packs view 0), or a padded example's every position."""
    lengths = batch.get("sequence_lengths")
    if lengths is not None:
        counts = [int(row.sum()) for row in lengths]
        if "mlm_input_ids" in batch:
            counts = [count + int(row[0]) for count, row in zip(counts, lengths)]
        return counts
    return [sum(batch[name][row].numel() for name in TOKEN_TENSORS if name in batch) for row in range(BATCH)]


def chunking(kind: str, batch: dict) -> tuple:
    """``(flags, bounds)`` of a cached step: chunks of ``CHUNK`` examples, or a token budget of a third of the
    batch's tokens, whose chunks (consecutive whole examples while they fit) are worked out here."""
    if kind == "examples":
        return ("--mini_batch_size", str(CHUNK)), [(start, min(start + CHUNK, BATCH)) for start in range(0, BATCH,
                                                                                                          CHUNK)]
    counts = tokens_per_example(batch)
    budget = sum(counts) // 3
    bounds, start = [], 0
    while start < BATCH:
        end = start + 1
        while end < BATCH and sum(counts[start : end + 1]) <= budget:
            end += 1
        bounds.append((start, end))
        start = end
    assert len(bounds) >= 3
    return ("--mini_batch_tokens", str(budget)), bounds


def cases(every_draw: bool = False) -> list:
    """``(method, columns, flags)`` of every method with ``gradient_caching``; with ``every_draw`` also each of its
    random draws that flags turn on (``stochastic``: other views, augmented texts)."""
    found = []
    for method in METHODS.values():
        if not method.gradient_caching:
            continue
        found.append(pytest.param(method, (), (), id=method.name))
        if method.name == "simcse":  # supervised: pairs with hard negatives, whose views have their own lengths
            found.append(pytest.param(method, ("hard_neg",), (), id="simcse-triplets"))
        for label, flags in method.stochastic.items() if every_draw else ():
            if flags:
                found.append(pytest.param(method, (), flags, id=f"{method.name}-{label.replace(' ', '-')}"))
    return found


def chunkings(n_tuples: bool = False) -> list:
    """``(method, columns, flags, kind)``: chunks of ``CHUNK`` examples for every case and random draw, and a token
    budget for every case (the cut does not depend on the draws, which the count's cases cover); with ``n_tuples``
    also SimCSE's rows of 2 hard negatives (each a view of its example's chunk) both ways."""
    extra = [pytest.param(METHODS["simcse"], ("hard_neg_1", "hard_neg_2"), (), kind, id=f"simcse-n-tuples-{kind}")
             for kind in ("examples", "tokens")] if n_tuples else []
    return [pytest.param(*case.values, "examples", id=f"{case.id}-examples") for case in cases(every_draw=True)] + [
        pytest.param(*case.values, "tokens", id=f"{case.id}-tokens") for case in cases()] + extra


def examples(method, sentences: list, columns: tuple) -> list:
    """A batch of training rows: unsupervised sentences, or rows of ``sent1`` and the hard-negative ``columns``
    built from them (with a repeated text)."""
    rows = []
    for index in range(BATCH):
        row = {"sent0": sentences[index], "example_index": index}
        for number, name in enumerate(("sent1", *columns) if columns else (), start=1):
            row[name] = sentences[(index + number * BATCH) % len(sentences)]
        rows.append(row)
    return rows


def build(method, backbone, tmp_path, *flags, dtype=torch.float32):
    """The recipe's own model, collator and trainer for ``flags`` (``--mini_batch_size`` among them or not)."""
    recipe = method.recipe_module.RECIPE
    argv = ["--model_name_or_path", str(backbone), "--output_dir", str(tmp_path / "out"),
            "--per_device_train_batch_size", str(BATCH), "--max_seq_length", "16", "--report_to", "none",
            "--eval_strategy", "no", "--load_best_model_at_end", "false", "--disable_tqdm", "true",
            *recipe_flags(method, backbone), *flags]
    model_args, data_args, training_args, extra_args = recipe.parse(argv)
    torch.manual_seed(0)
    model = recipe.build_model(str(backbone), model_args).to(dtype)
    model.tokenizer = AutoTokenizer.from_pretrained(backbone)
    collator = recipe.collator(model.tokenizer, model, data_args, extra_args)
    trainer = recipe.trainer_class(model=model, args=training_args, data_collator=collator)
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def step(trainer, batch: dict, seed: int = 0, repeats: int = 1) -> tuple:
    """``repeats`` training steps on ``batch`` from the random state ``seed``, their gradients summed: the last loss
    and the gradient of every parameter. (A second step sees the random state the first one left.)"""
    model = trainer.model
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    for _ in range(repeats):
        loss = trainer.training_step(model, {name: value.clone() for name, value in batch.items()})
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_step(reference: tuple, other: tuple, rtol: float, atol: float) -> None:
    (loss, gradients), (other_loss, other_gradients) = reference, other
    torch.testing.assert_close(other_loss, loss, rtol=rtol, atol=atol)
    assert gradients.keys() == other_gradients.keys()
    # absolute tolerance relative to the largest gradient of the step: some gradients are zero in exact arithmetic
    # (a key bias under softmax) and hold only rounding, which no relative tolerance of their own bounds
    scale = max(float(gradient.abs().max()) for gradient in gradients.values())
    for name, gradient in gradients.items():
        torch.testing.assert_close(other_gradients[name], gradient, rtol=rtol, atol=atol * scale, msg=name)
    assert any(float(g.abs().max()) > 0 for name, g in gradients.items() if name.startswith("encoder."))


def in_model_dtype(trainer):
    """WhitenedCSE's whitening computes in float32 and returns float32: hand its output back in the model's dtype,
    so the float64 test model stays float64 after it (as ``dist_worker.py`` does)."""
    whitening = getattr(trainer.model, "whitening", None)
    if whitening is not None:
        forward = whitening.forward
        whitening.forward = lambda features, *args, **kwargs: forward(features, *args, **kwargs).to(features.dtype)
    return trainer


def largest_difference(gradients: dict, reference: dict) -> float:
    return max(float((gradients[name] - value).abs().max()) for name, value in reference.items())


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("method, columns, options, kind", chunkings(n_tuples=True))
def test_a_cached_step_has_the_uncached_steps_loss_and_gradients(method, columns, options, layout, kind, backbones,
                                                                 sentences, tmp_path):
    flags = ("--padding_free", str(layout == "packed").lower(), *options)
    steps = {}
    for dtype in (torch.float64, torch.float32):
        trainer = in_model_dtype(build(method, backbones[0.0], tmp_path / f"uncached{dtype}", *flags, dtype=dtype))
        assert trainer.gradient_cache is None
        batch = trainer.data_collator(examples(method, sentences, columns))
        assert ("sequence_lengths" in batch) == (layout == "packed")
        steps["uncached", dtype] = step(trainer, batch, repeats=2)
        extra, bounds = chunking(kind, batch)
        trainer = in_model_dtype(build(method, backbones[0.0], tmp_path / f"cached{dtype}", *flags, *extra,
                                       dtype=dtype))
        assert trainer.gradient_cache.bounds(trainer.model, batch) == bounds
        steps["cached", dtype] = step(trainer, trainer.data_collator(examples(method, sentences, columns)), repeats=2)
    # float64: exact to rounding (1e-10 of the step's largest gradient, ~1e-14 absolute: chunks of 2 padded triplets,
    # cut to their own longest views, sum in another order; CMLM-CSE's L_MLM in the model's dtype too).
    # WhitenedCSE's whitening computes in float32 whatever the model's dtype, so its steps round as float32 does.
    tolerance = 1e-5 if method.one_process.float32_inside else 1e-10
    assert_same_step(steps["uncached", torch.float64], steps["cached", torch.float64], rtol=tolerance, atol=tolerance)
    # float32: on a random tiny encoder every sentence is nearly the same vector and the gradients are differences of
    # near-equal terms, so float32 summation order alone moves some by ~1%; the cached step is held to float32's own
    # error on this step: no farther from the float64 step than the uncached float32 step is (x 4)
    exact = steps["uncached", torch.float64][1]
    gradients32 = {name: {key: value.double() for key, value in steps[name, torch.float32][1].items()}
                   for name in ("uncached", "cached")}
    rounding = largest_difference(gradients32["uncached"], exact)
    assert largest_difference(gradients32["cached"], exact) <= 4 * rounding + 1e-12
    torch.testing.assert_close(steps["cached", torch.float32][0], steps["uncached", torch.float32][0], rtol=1e-5,
                               atol=0)


@pytest.mark.parametrize("method", [case.values[0] for case in cases() if not case.values[1]],
                         ids=lambda method: method.name)
def test_a_cached_step_with_matryoshka_terms_has_the_uncached_steps_loss_and_gradients(method, backbones, sentences,
                                                                                       tmp_path):
    """The Matryoshka terms read the pooled vectors (``sentence_vectors``), a second output of each chunk: its
    cached gradient must reach the encoder too."""
    steps = {}
    for name, extra in (("uncached", ()), ("cached", ("--mini_batch_size", str(CHUNK)))):
        trainer = in_model_dtype(build(method, backbones[0.0], tmp_path / name, "--matryoshka_dims", "16", "8",
                                       *extra, dtype=torch.float64))
        batch = trainer.data_collator(examples(method, sentences, ()))
        steps[name] = step(trainer, batch)
    tolerance = 1e-5 if method.one_process.float32_inside else 1e-9
    assert_same_step(steps["uncached"], steps["cached"], rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("method, columns, options, kind", chunkings())
def test_with_dropout_a_cached_step_equals_the_full_graph_step_with_the_same_random_states(
        method, columns, options, layout, kind, backbones, sentences, tmp_path):
    flags = ("--padding_free", str(layout == "packed").lower(), *options)
    plain = build(method, backbones[0.1], tmp_path / "plain", *flags)
    extra, bounds = chunking(kind, plain.data_collator(examples(method, sentences, columns)))
    cached = in_model_dtype(build(method, backbones[0.1], tmp_path / "cached", *flags, *extra, dtype=torch.float64))
    batch = cached.data_collator(examples(method, sentences, columns))
    result = step(cached, batch, seed=11, repeats=2)

    # the reference: the same chunks encoded with the graph kept, one after the other from the same random state
    # (each chunk then starts from the state the previous one left), then one loss and one backward; twice, the
    # second step drawing on from where the first left the random state (new dropout masks every step)
    model = copy.deepcopy(cached.model)
    model.train()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(11)
    inputs = {name: value for name, value in batch.items() if name != "text_ids"}
    chunks = [inputs_of(inputs, start, end) for start, end in bounds]
    for _ in range(2):
        outputs = [model.chunk_forward(**chunk) for chunk in chunks]
        losses = cached.compute_losses(model, model.merge_chunks(outputs, chunks), batch)
        losses["loss"].backward()
    reference = (losses["loss"].detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None})
    tolerance = 1e-5 if method.one_process.float32_inside else 1e-9  # as above
    assert_same_step(reference, result, rtol=tolerance, atol=tolerance)

    # the dropout masks matter: another random state gives other gradients
    other = step(cached, batch, seed=12, repeats=2)
    assert not torch.allclose(other[1]["encoder.embeddings.word_embeddings.weight"],
                              result[1]["encoder.embeddings.word_embeddings.weight"])


def inputs_of(inputs: dict, start: int, end: int) -> dict:
    """Examples ``start .. end`` of a batch, written out here from the layouts the collators make (padded rows; a
    packed row is example-major; CMLM-CSE's masked copy of view 0 packs view 0's sentences)."""
    lengths = inputs.get("sequence_lengths")
    if lengths is None:
        return {name: value[start:end] for name, value in inputs.items()}
    offsets = torch.cat([lengths.new_zeros(1), lengths.sum(dim=1).cumsum(0)])
    chunk = {"input_ids": inputs["input_ids"][:, offsets[start] : offsets[end]],
             "sequence_lengths": lengths[start:end]}
    if inputs.get("attention_mask") is not None:  # the padded layout (one row per example): lays the row out on a GPU
        chunk["attention_mask"] = inputs["attention_mask"][start:end]
    if "mlm_input_ids" in inputs:
        first = torch.cat([lengths.new_zeros(1), lengths[:, 0].cumsum(0)])
        for name in ("mlm_input_ids", "mlm_labels"):
            chunk[name] = inputs[name][:, first[start] : first[end]]
    return chunk


@pytest.mark.parametrize("method, columns, options", cases())
def test_a_cached_bf16_step_encodes_in_bfloat16_and_keeps_the_losses_float32(method, columns, options, backbones,
                                                                            sentences, tmp_path):
    from conftest import record_output_dtypes

    seen = {}
    cached = build(method, backbones[0.0], tmp_path / "cached", "--bf16", "true", "--mini_batch_size", str(CHUNK))
    uncached = build(method, backbones[0.0], tmp_path / "plain", "--bf16", "true")
    uncached.accelerator.prepare_model(uncached.model)  # what Trainer.train does: its forward runs in autocast
    record_output_dtypes(cached.model, seen)
    compute_losses = cached.compute_losses

    def recording(model, outputs, inputs):
        losses = compute_losses(model, outputs, inputs)
        seen["embeddings"] = {outputs.embeddings.dtype}
        seen["losses"] = {value.dtype for value in losses.values()}
        return losses

    cached.compute_losses = recording
    batch = cached.data_collator(examples(method, sentences, columns))
    result = step(cached, batch)
    assert seen["encoder"] == {torch.bfloat16}
    assert seen["embeddings"] == seen["losses"] == {torch.float32}
    # the same step to bfloat16's precision: no farther from the float32 step than the uncached bfloat16 step is
    exact = step(build(method, backbones[0.0], tmp_path / "float32"), batch)[1]
    rounding = largest_difference(step(uncached, batch)[1], exact)
    assert largest_difference(result[1], exact) <= 4 * rounding


def test_the_global_batch_is_logged_recorded_and_on_the_card(backbones, corpus, tmp_path, caplog):
    """Per-device batch, processes, accumulation, mini-batch and negatives per anchor: at the start, in
    ``eval_results.json`` and in the card (a run whose batch was silently multiplied must show it)."""
    import json
    import logging

    from csekit import cli
    from csekit.methods import get_method

    output = tmp_path / "out"
    argv = ["--model_name_or_path", str(backbones[0.1]), "--train_file", str(corpus), "--output_dir", str(output),
            "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2", "--mini_batch_size", "3",
            "--duplicate_negatives", "mask", "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no",
            "--load_best_model_at_end", "false", "--logging_steps", "1", "--max_seq_length", "16",
            "--disable_tqdm", "true", *get_method("simcse").test_flags]
    with caplog.at_level(logging.INFO):
        get_method("simcse").recipe_module.RECIPE.main(argv)
    expected = {"per_device_train_batch_size": 8, "processes": 1, "gradient_accumulation_steps": 2,
                "mini_batch_size": 3, "mini_batch_tokens": None, "examples_per_update": 16, "negatives_per_anchor": 7,
                "duplicate_negatives": "mask"}
    assert json.loads((output / "eval_results.json").read_text())["batch"] == expected
    assert ("batch: 8 per device x 1 process(es) x 2 accumulation step(s) = 16 examples per update, encoded in "
            "chunks of 3 (gradient caching); each anchor sees 7 in-batch negatives per step") in caplog.text
    history = json.loads((output / "training_args.json").read_text())  # the flags are part of the run's record
    assert history["training_args"]["mini_batch_size"] == 3
    assert cli.main(["card", str(output), "--figure", "never"]) == 0
    card = (output / "README.md").read_text()
    assert "16 examples per update, encoded in chunks of 3 with exact gradient caching" in card
    assert "7 in-batch negatives per step, less the copies of its own texts" in card


def test_a_mini_batch_not_below_the_batch_trains_uncached_and_says_so(backbones, tmp_path, caplog):
    import logging

    from csekit.methods import get_method

    with caplog.at_level(logging.INFO):
        trainer = build(get_method("simcse"), backbones[0.0], tmp_path, "--mini_batch_size", str(BATCH))
    assert trainer.gradient_cache is None
    assert f"--mini_batch_size {BATCH} is not below the per-device batch {BATCH}" in caplog.text


def test_a_device_whose_random_state_is_not_restored_is_refused():
    from csekit.trainers.gradient_cache import unsupported_device

    assert unsupported_device(torch.device("cpu")) is None and unsupported_device(torch.device("cuda")) is None
    assert "not mps" in unsupported_device(torch.device("mps"))


@pytest.mark.parametrize("flags", [("--mini_batch_size", str(CHUNK)), ("--mini_batch_tokens", "40")],
                         ids=["examples", "tokens"])
@pytest.mark.parametrize("method, columns, options", [case for case in cases() if not case.values[1]])
def test_a_cached_run_resumed_after_a_crash_ends_like_the_uninterrupted_cached_run(method, columns, options, flags,
                                                                                  backbones, corpus, tmp_path):
    """The dropout masks of a cached step come from the step's random state, which a checkpoint saves."""
    from conftest import load_weights
    from test_conformance import Crash, assert_same_weights, crash_after_first_checkpoint, recipe_argv, train

    data = {"sentences": corpus}
    train(method, recipe_argv(method, backbones[0.1], data, tmp_path / "full", *flags))
    with crash_after_first_checkpoint(), pytest.raises(Crash):
        train(method, recipe_argv(method, backbones[0.1], data, tmp_path / "crashed", *flags))
    train(method, recipe_argv(method, backbones[0.1], data, tmp_path / "crashed", *flags, "--resume_from_checkpoint",
                              "last"))
    assert_same_weights(load_weights(tmp_path / "full"), load_weights(tmp_path / "crashed"))


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("method", [case.values[0] for case in cases() if not case.values[1]],
                         ids=lambda method: method.name)
def test_a_token_budget_cuts_whole_examples_whose_tokens_fit_it(method, layout, backbones, corpus, tmp_path):
    """``--mini_batch_tokens T``: every chunk the encoder sees holds at most T token positions (counted on the chunk
    itself: the numel of what it feeds an encoder), unless it is one example longer than T; no example is split or
    left out, and the order is the batch's. Sentences of very different lengths, so the chunks differ in size."""
    lines = sorted(corpus.read_text().splitlines(), key=len)
    texts = [lines[index * (len(lines) - 1) // (BATCH - 1)] for index in range(BATCH)]  # shortest .. longest
    texts = texts[::2] + texts[1::2]
    rows = [{"sent0": text, "example_index": index} for index, text in enumerate(texts)]
    flags = ("--padding_free", str(layout == "packed").lower(), "--max_seq_length", "32")
    batch = build(method, backbones[0.0], tmp_path / "plain", *flags).data_collator(rows)
    counts = tokens_per_example(batch)
    budget = max(counts) + min(counts)  # the longest example fits with the shortest only; one longer than that
    trainer = build(method, backbones[0.0], tmp_path / "cached", *flags, "--mini_batch_tokens", str(budget - 1))
    model = trainer.model
    chunks = model.split_chunks(batch, trainer.gradient_cache.bounds(model, batch))
    sizes = [int((chunk["input_ids"] if layout == "padded" else chunk["sequence_lengths"]).shape[0])
             for chunk in chunks]
    # packed, the examples' own lengths make chunks of several sizes; padded, every example costs the batch's width
    assert sum(sizes) == BATCH and (len(set(sizes)) > 1 if layout == "packed" else set(sizes) == {1})
    for chunk, size in zip(chunks, sizes):
        used = sum(chunk[name].numel() for name in TOKEN_TENSORS if chunk.get(name) is not None)
        assert used <= budget - 1 or size == 1, (used, size)
    packed = batch.get("sequence_lengths")
    if packed is not None:  # the examples in order: the chunks' rows joined are the batch's row
        assert torch.equal(torch.cat([chunk["input_ids"] for chunk in chunks], dim=1), batch["input_ids"])
    else:
        assert torch.equal(torch.cat([chunk["input_ids"] for chunk in chunks]), batch["input_ids"])


def test_chunk_bounds_keep_examples_whole_and_in_order():
    from csekit.trainers.gradient_cache import chunk_bounds

    assert chunk_bounds([5, 5, 5, 5, 5], mini_batch_size=2) == [(0, 2), (2, 4), (4, 5)]
    assert chunk_bounds([4, 3, 9, 2, 2, 2], mini_batch_tokens=7) == [(0, 2), (2, 3), (3, 6)]  # 9 > 7 alone
    assert chunk_bounds([8, 1], mini_batch_tokens=7) == [(0, 1), (1, 2)]
    assert chunk_bounds([3, 4], mini_batch_tokens=7) == [(0, 2)]


def test_a_count_and_a_token_budget_together_are_refused(backbones, tmp_path):
    from csekit.errors import DataError
    from csekit.methods import get_method

    with pytest.raises(DataError, match="--mini_batch_size 3 and --mini_batch_tokens 64: gradient caching cuts"):
        build(get_method("simcse"), backbones[0.0], tmp_path, "--mini_batch_size", "3", "--mini_batch_tokens", "64")


def test_a_token_budget_is_in_the_runs_batch_line(backbones, tmp_path):
    """The log line, ``eval_results.json``'s ``batch`` and the card say how the chunks were cut."""
    from csekit.methods import get_method
    from csekit.trainers.runner import batch_record, describe_batch

    trainer = build(get_method("simcse"), backbones[0.0], tmp_path, "--mini_batch_tokens", "512")
    record = batch_record(trainer, ("sent0",))
    assert (record["mini_batch_size"], record["mini_batch_tokens"]) == (None, 512)
    assert ", encoded in chunks of at most 512 tokens (gradient caching);" in describe_batch(record)
