"""Length-sorted batched encoding shared by every csekit model and the evaluators."""

from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import torch
from tqdm.auto import tqdm


def deduplicate(texts: Sequence[str]) -> Tuple[list, list]:
    """``(distinct, positions)``: the distinct texts in first-seen order, and for each input text its row in
    ``distinct`` (so ``vectors_of(distinct)[positions]`` gives one row per input)."""
    rows = {}
    positions = [rows.setdefault(text, len(rows)) for text in texts]
    return list(rows), positions


def encode_sentences(
    embed_batch: Callable[[dict], torch.Tensor],
    tokenizer,
    sentences: Sequence[str],
    batch_size: int = 64,
    max_length: Optional[int] = None,
    device: Optional[torch.device] = None,
    show_progress_bar: Optional[bool] = None,
    desc: str = "Encoding",
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
        show_progress_bar: ``None`` shows a bar only for more than 10 batches.
    Returns:
        ``(len(sentences), hidden)`` float32 tensor on CPU.
    """
    if isinstance(sentences, str):
        raise TypeError("encode expects a list of sentences, not a single string")
    sentences = list(sentences)
    if not sentences:
        raise ValueError("encode got an empty list of sentences")
    sentences, positions = deduplicate(sentences)
    truncation = dict(truncation=True, max_length=max_length) if max_length else dict(truncation=True)
    lengths = np.asarray(tokenizer(sentences, add_special_tokens=True, return_length=True, **truncation)["length"])
    order = np.argsort(-lengths, kind="stable")
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if show_progress_bar is None:
        show_progress_bar = len(batches) > 10
    output = None
    with torch.inference_mode():
        for index in tqdm(batches, desc=desc, disable=not show_progress_bar):
            batch = tokenizer([sentences[i] for i in index], padding=True, return_tensors="pt", **truncation)
            if device is not None:
                batch = batch.to(device)
            vectors = embed_batch(dict(batch)).float().cpu()
            if output is None:
                output = torch.empty(len(sentences), vectors.shape[-1])
            output[torch.as_tensor(index)] = vectors
    return output if len(positions) == len(sentences) else output[torch.as_tensor(positions)]
