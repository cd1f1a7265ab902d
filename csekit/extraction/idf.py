"""Token weights for training-free aggregation (Stankevičius & Lukoševičius 2024, Sections 3.1 and 3.3).

Which tokens are averaged (paper eq. 1-3): the text ``s0`` is tokenized into ``t1 .. tN`` and the baseline is the mean
over those N tokens. The tokens a tokenizer adds around every text (``[CLS]``/``[SEP]`` for BERT, ``<s>``/``</s>``
for RoBERTa: `framing_token_ids`) and padding are not among them, so every aggregation gives them weight 0
(`text_token_mask`); ``csekit extract --average-special-tokens`` re-admits them for ``avg`` (SimCSE's ``avg``
pooler and sentence-transformers' mean pooling include them).

* idf: ``idf_t = log(N / df_t)`` over a corpus of ``N`` texts, counted on the token ids the model sees. ``idf^W``
  uses the reference corpus (WikiText-2 here), ``idf^T`` the target task's own texts. Per text the weights of its
  tokens are scaled to sum to 1, so the embedding is a weighted sum of token vectors.
* "-biases" (Jiang et al. 2022, PromptBERT; the paper's Section 3.3): drop the most frequent tokens, punctuation and
  subword-continuation tokens before averaging.

Prompt templates (one rule, csekit's reading; the paper states none): an idf table belongs to a corpus's own
sentences (idf^T: the target task's sentences, idf^W: the reference corpus; never templated), and every token of the
templated text, a template's words and its ``[MASK]`` slots included, takes its weight from that table exactly as a
sentence token does; a token the corpus never contains gets the unseen-token idf ``log N``, as any unseen token.
What the rule gives:

==============  ========================================================================================
``avg``         template words and ``[MASK]`` weigh 1, like the sentence's tokens
``idf-t``       template words get their idf in the task's sentences (``log N`` when no sentence has them),
                ``[MASK]`` ``log N``
``idf-w``       template words get their reference-corpus idf, ``[MASK]`` (absent from WikiText) ``log N``
``no-biases``   a template word is dropped when it is frequent, punctuation or a subword, like any token;
                ``[MASK]`` is none of these and is kept
``mask``        the one aggregation that reads only the ``[MASK]`` positions
==============  ========================================================================================

Why this reading. The paper averages "all tokens, including the ones from the prompt template, and also the [MASK]
token" and notes that averaging, unlike the [MASK] state alone, lets "token weighting ... be also applied" (Section
4.2): template tokens are weighted, not removed. Its Table 4 then shows T0/T4 classification collapsing under the row
printed idf^W (73.1/67.1 against 80.5/79.9 for plain averaging) but not under idf^T (80.1/79.7): the template
carried large weights there. Our RE reproduction (benchmarks/RESULTS.md) matches the row printed idf^W with the idf of
the *task's* sentences to the printed digit on six STS tasks, so that collapse happened under the task idf, which
can only give the template large weights if the idf was counted on the raw sentences (counted on templated texts,
every template token occurs in every text and weighs 0). Both tables are therefore counted on raw sentences.

All become ``(batch, seq_len)`` ``token_weights`` for
[`csekit.modeling.pooling.masked_mean`][csekit.modeling.pooling.masked_mean].
"""

import unicodedata
from collections import Counter
from typing import Sequence

import numpy as np
import torch

DEFAULT_TOP_FREQUENT = 33  # PromptBERT's appendix lists 33 most frequent tokens


def framing_token_ids(tokenizer) -> list:
    """Ids the tokenizer adds around every text (those of an empty text: ``[CLS] [SEP]``, ``<s> </s>``) and padding:
    the tokens that are not among the text's own ``t1 .. tN``."""
    ids = set(tokenizer("", add_special_tokens=True)["input_ids"])
    if tokenizer.pad_token_id is not None:
        ids.add(tokenizer.pad_token_id)
    return sorted(ids)


def text_token_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor, framing_ids: Sequence[int]) -> torch.Tensor:
    """``(batch, seq_len)`` float mask, 1 on the text's own tokens (real, not a framing token), 0 elsewhere."""
    framing = torch.isin(input_ids, torch.as_tensor(list(framing_ids), device=input_ids.device))
    return attention_mask.float() * (~framing).float()


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

    Biases: the ``top_frequent`` most frequent tokens of the reference corpus (special tokens not counted),
    punctuation-only tokens, and subword continuations (WordPiece ``##x``; byte-level BPE tokens without the ``Ġ``
    word-start mark); framing tokens and padding are never averaged. Other special tokens standing in the text
    (a template's ``[MASK]``, ``[UNK]``) are none of these and are kept, like any token (module docstring).
    """
    vocab_size = len(tokenizer)
    keep = np.ones(vocab_size, dtype=np.float32)
    keep[framing_token_ids(tokenizer)] = 0
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


__all__ = [
    "bias_token_table",
    "framing_token_ids",
    "inverse_document_frequency",
    "normalized_token_weights",
    "text_token_mask",
    "tokenize_ids",
]
