"""Token weights for training-free aggregation (Stankevičius & Lukoševičius 2024, Section 3.3).

* idf: ``idf_t = log(N / df_t)`` over a corpus of ``N`` texts, counted on the exact token ids the model sees (special
  tokens and prompt-template tokens included, so tokens present in every text get weight 0). ``idf^W`` uses the
  reference corpus (WikiText-2 here), ``idf^T`` the target task's own texts. Per text the weights are scaled to sum
  to 1, so the embedding is a weighted sum of token vectors.
* "-biases" (Jiang et al. 2022, PromptBERT): drop the most frequent tokens, punctuation and subword-continuation
  tokens (and special tokens) before averaging.

Both become ``(batch, seq_len)`` ``token_weights`` for :func:`csekit.modeling.pooling.masked_mean`.
"""

import unicodedata
from collections import Counter
from typing import Sequence

import numpy as np
import torch

DEFAULT_TOP_FREQUENT = 33  # PromptBERT's appendix lists 33 most frequent tokens


def tokenize_ids(tokenizer, texts: Sequence[str], max_length=None) -> list:
    """Token id lists (with special tokens, truncated like the model input) for idf and frequency counts."""
    truncation = dict(truncation=True, max_length=max_length) if max_length else dict(truncation=True)
    return tokenizer(list(texts), add_special_tokens=True, **truncation)["input_ids"]


def inverse_document_frequency(token_ids: Sequence[Sequence[int]], vocab_size: int) -> np.ndarray:
    """``(vocab_size,)`` idf table ``log(N / df)`` over ``N`` tokenized texts.

    A token absent from the corpus gets the idf of a token seen once, ``log(N)``: it is at least as rare as the
    rarest observed token (only matters for idf^W, where target tokens may be missing from the reference corpus).
    """
    if not token_ids:
        raise ValueError("idf needs at least one text")
    document_frequency = np.zeros(vocab_size, dtype=np.int64)
    for ids in token_ids:
        document_frequency[np.unique(np.asarray(ids, dtype=np.int64))] += 1
    count = len(token_ids)
    return np.log(count / np.maximum(document_frequency, 1)).astype(np.float32)


def normalized_token_weights(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, table: torch.Tensor
) -> torch.Tensor:
    """Per-token weights ``table[input_ids]`` on real tokens, scaled to sum to 1 per text.

    Args:
        input_ids, attention_mask: ``(batch, seq_len)``.
        table: ``(vocab_size,)`` weight per token id (an idf table, or 0/1 keep flags).
    Returns:
        ``(batch, seq_len)`` float weights; a text whose tokens all weigh 0 keeps all-zero weights (zero vector).
    """
    weights = table.to(input_ids.device)[input_ids].float() * attention_mask.float()
    return weights / weights.sum(1, keepdim=True).clamp(min=torch.finfo(weights.dtype).tiny)


def _is_punctuation(text: str) -> bool:
    return bool(text) and all(unicodedata.category(char).startswith("P") for char in text)


def bias_token_table(
    tokenizer,
    reference_token_ids: Sequence[Sequence[int]],
    top_frequent: int = DEFAULT_TOP_FREQUENT,
    punctuation: bool = True,
    subwords: bool = True,
) -> np.ndarray:
    """``(vocab_size,)`` float table, 0 for "bias" tokens to drop and 1 for tokens to keep.

    Biases: special tokens, the ``top_frequent`` most frequent tokens of the reference corpus, punctuation-only
    tokens, and subword continuations (WordPiece ``##x``; byte-level BPE tokens without the ``Ġ`` word-start mark).
    """
    vocab_size = len(tokenizer)
    keep = np.ones(vocab_size, dtype=np.float32)
    keep[tokenizer.all_special_ids] = 0
    counts = Counter(token for ids in reference_token_ids for token in ids if token not in tokenizer.all_special_ids)
    for token, _ in counts.most_common(top_frequent):
        keep[token] = 0
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    wordpiece = any(token.startswith("##") for token in tokens)
    for token_id, token in enumerate(tokens):
        if token is None:
            continue
        bare = token[2:] if wordpiece and token.startswith("##") else token.lstrip("Ġ")
        if punctuation and _is_punctuation(bare):
            keep[token_id] = 0
        if subwords and token_id not in tokenizer.all_special_ids:
            continuation = token.startswith("##") if wordpiece else not token.startswith("Ġ")
            if continuation:
                keep[token_id] = 0
    return keep


__all__ = ["bias_token_table", "inverse_document_frequency", "normalized_token_weights", "tokenize_ids"]
