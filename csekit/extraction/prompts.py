"""Prompt templates for training-free extraction (Stankevičius & Lukoševičius 2024, Table 1; PromptBERT's T0).

The target sentence replaces ``[X]``; each ``[MASK]`` becomes the tokenizer's own mask token (``[MASK]`` for BERT,
``<mask>`` for RoBERTa). The sentence representation is either the mean of the last-layer states at the mask
positions (``mask``) or the mean over all tokens of the filled template (``avg``, which also admits idf weighting).

Template tokens and ``[MASK]`` under the weighted aggregations follow one rule: they are tokens of the templated text,
weighed like any sentence token by tables counted on raw (untemplated) sentences (``avg`` 1; ``idf-t`` / ``idf-w``
their idf in the task's sentences / the reference corpus, ``log N`` when absent, as ``[MASK]`` always is;
``no-biases`` keeps ``[MASK]``). The table, and the paper's evidence for this reading, are in
`csekit.extraction.idf`.

    template = resolve_template("T0")
    texts = template.fill(["a man plays a guitar ."], tokenizer.mask_token)
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    weights = mask_token_weights(batch["input_ids"], tokenizer, template.mask_count)   # (batch, seq_len)
"""

from dataclasses import dataclass
from typing import Sequence

import torch

from ..errors import DataError
from .settings import TEMPLATES

SENTENCE_SLOT = "[X]"
MASK_SLOT = "[MASK]"
NO_TEMPLATE = "none"
REPRESENTATIONS = ("avg", "mask")


@dataclass(frozen=True)
class PromptTemplate:
    """A template with one ``[X]`` slot for the sentence and zero or more ``[MASK]`` slots."""

    name: str
    text: str

    @property
    def mask_count(self) -> int:
        return self.text.count(MASK_SLOT)

    def fill(self, sentences: Sequence[str], mask_token: str) -> list:
        """The templated texts, sentence in the ``[X]`` slot and the tokenizer's mask token in every ``[MASK]``."""
        prefix, suffix = self.text.replace(MASK_SLOT, mask_token).split(SENTENCE_SLOT)
        return [prefix + sentence + suffix for sentence in sentences]


def resolve_template(name_or_text: str):
    """``"none"`` -> ``None``; ``"T0"``..``"T4"`` -> the paper's template; any text with one ``[X]`` -> itself."""
    if name_or_text == NO_TEMPLATE:
        return None
    if name_or_text in TEMPLATES:
        return PromptTemplate(name_or_text, TEMPLATES[name_or_text])
    if name_or_text.count(SENTENCE_SLOT) != 1:
        raise DataError(
            f"unknown template {name_or_text!r}: use {NO_TEMPLATE}, {', '.join(TEMPLATES)}, or a text with exactly "
            f"one {SENTENCE_SLOT} (sentence) and any number of {MASK_SLOT} slots"
        )
    return PromptTemplate(name_or_text, name_or_text)


def mask_token_weights(input_ids: torch.Tensor, tokenizer, expected_masks: int) -> torch.Tensor:
    """``(batch, seq_len)`` weights, 1 on the mask-token positions, for the ``mask`` representation.

    Raises ``DataError`` when a text does not hold all ``expected_masks`` masks (the template was truncated away,
    or the tokenizer has no mask token), instead of silently averaging nothing.
    """
    if tokenizer.mask_token_id is None:
        raise DataError(f"{type(tokenizer).__name__} has no mask token; use --representation avg")
    weights = (input_ids == tokenizer.mask_token_id).float()
    found = weights.sum(1)
    if expected_masks == 0 or bool((found != expected_masks).any()):
        row = int((found != expected_masks).nonzero()[0, 0]) if expected_masks else 0
        raise DataError(
            f"text {row} of a batch has {int(found[row])} mask token(s), the template has {expected_masks}; "
            "the text was truncated (raise --max-length) or the template has no [MASK]"
        )
    return weights


__all__ = ["REPRESENTATIONS", "PromptTemplate", "mask_token_weights", "resolve_template"]
