"""Length-sorted batched encoding shared by every csekit model and the evaluators, and its progress display."""

import contextlib
import contextvars
import math
import re
import sys
from typing import Callable, Iterator, Optional, Sequence, Tuple

import numpy as np
import torch
from tqdm.auto import tqdm

# what the encoding bars say they encode, set by the caller that knows it (a run scoring its base model, a suite)
_LABEL = contextvars.ContextVar("csekit_encoding_label", default=None)
LINE_STEPS = 20  # away from a terminal, a progress line every 1/20 of the work (5%)


@contextlib.contextmanager
def encoding_label(label: str) -> Iterator[None]:
    """Within the block, every encoding progress bar is titled ``label`` (``"Encoding all-MiniLM-L6-v2 (base model)
    for the STS test sets"``) instead of ``"Encoding"``."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


class _LineStream:
    """A stream for tqdm away from a terminal: each redraw becomes a line of its own (a log file gets lines, not
    carriage returns)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).replace("\r", "").strip()  # cursor moves of nested bars
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress(iterable=None, desc: Optional[str] = None, total: Optional[int] = None, disable: bool = False,
             stream=None, **kwargs):
    """A tqdm bar over ``iterable``: on a terminal the usual bar; elsewhere (a log file, a pipe, a notebook's
    captured output) one line every 5% of ``total`` (default ``len(iterable)``) and one at the end, so a log holds
    about 20 lines per bar. ``desc`` defaults to the [`encoding_label`][csekit.modeling.encoding.encoding_label] in
    force."""
    stream = stream if stream is not None else sys.stderr
    desc = desc or _LABEL.get() or "Encoding"
    if disable or getattr(stream, "isatty", lambda: False)():
        return tqdm(iterable, desc=desc, total=total, disable=disable, file=stream, **kwargs)
    total = total if total is not None else len(iterable)
    return tqdm(iterable, desc=desc, total=total, file=_LineStream(stream), mininterval=0, maxinterval=math.inf,
                miniters=max(1, math.ceil(total / LINE_STEPS)), **kwargs)


def deduplicate(texts: Sequence[str]) -> Tuple[list, list]:
    """``(distinct, positions)``: the distinct texts in first-seen order, and for each input text its row in
    ``distinct`` (so ``vectors_of(distinct)[positions]`` gives one row per input)."""
    rows = {}
    positions = [rows.setdefault(text, len(rows)) for text in texts]
    return list(rows), positions


class BatchCache:
    """The tokenized batches (on their device) of the last sentence list that
    [`encode_sentences`][csekit.modeling.encoding.encode_sentences] encoded with this cache, for the next call with
    the same sentences, tokenizer, batch size and length: an evaluation repeated every few training steps tokenizes
    its sentences once. One list is kept; another replaces it."""

    def __init__(self):
        self.key, self.batches = None, None


def length_sorted_batches(tokenizer, sentences: list, batch_size: int, max_length: Optional[int],
                          device: Optional[torch.device]) -> Iterator[tuple]:
    """``(rows, tokenized batch)`` of ``sentences``, longest first (``rows``: their indices in ``sentences``), each
    batch tokenized when it is reached and moved to ``device``."""
    truncation = dict(truncation=True, max_length=max_length) if max_length else dict(truncation=True)
    lengths = np.asarray(tokenizer(sentences, add_special_tokens=True, return_length=True, **truncation)["length"])
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        batch = tokenizer([sentences[i] for i in index], padding=True, return_tensors="pt", **truncation)
        yield index, batch if device is None else batch.to(device)


def encode_sentences(
    embed_batch: Callable[[dict], torch.Tensor],
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
    max_length: Optional[int] = None,
    device: Optional[torch.device] = None,
    show_progress_bar: Optional[bool] = None,
    desc: Optional[str] = None,
    cache: Optional[BatchCache] = None,
) -> torch.Tensor:
    """Encode sentences in batches sorted by token length, returning vectors in the input order.

    Sorting by length keeps padding (and so wasted compute) small; the attention mask makes each vector independent
    of its batch-mates, so the order does not change the result beyond float rounding. A sentence given several times
    is encoded once and its vector repeated.

    Args:
        embed_batch: maps a tokenized batch (dict of ``(batch, seq_len)`` tensors) to ``(batch, hidden)`` vectors.
        tokenizer: a Hugging Face tokenizer (fast tokenizers make the length pass cheap).
        sentences: the texts.
        max_length: truncation length; ``None`` uses the tokenizer's model maximum.
        device: where batches go; ``None`` leaves them on CPU.
        show_progress_bar: ``None`` shows a bar ([`progress`][csekit.modeling.encoding.progress]) only for more than 10
            batches.
        desc: the bar's title; default the [`encoding_label`][csekit.modeling.encoding.encoding_label] in force, else
            ``"Encoding"``.
        cache: a [`BatchCache`][csekit.modeling.encoding.BatchCache] holding, or to hold, these sentences' batches.
    Returns:
        ``(len(sentences), hidden)`` float32 tensor on CPU.
    """
    if isinstance(sentences, str):
        raise TypeError("encode expects a list of sentences, not a single string")
    sentences = list(sentences)
    if not sentences:
        raise ValueError("encode got an empty list of sentences")
    key = (tokenizer, tuple(sentences), batch_size, max_length, device)
    cached = cache is not None and cache.key == key
    sentences, positions = deduplicate(sentences)
    batches = cache.batches if cached else length_sorted_batches(tokenizer, sentences, batch_size, max_length, device)
    if cache is not None and not cached:
        batches = list(batches)
        cache.key, cache.batches = key, batches
    count = math.ceil(len(sentences) / batch_size)
    if show_progress_bar is None:
        show_progress_bar = count > 10
    output = None
    with torch.inference_mode():
        for index, batch in progress(batches, desc=desc, disable=not show_progress_bar, total=count):
            vectors = embed_batch(dict(batch)).float().cpu()
            if output is None:
                output = torch.empty(len(sentences), vectors.shape[-1])
            output[torch.as_tensor(index)] = vectors
    return output if len(positions) == len(sentences) else output[torch.as_tensor(positions)]
