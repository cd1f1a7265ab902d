"""Collators that turn text examples into tokenized contrastive views, padded or packed."""

import hashlib
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from .data import DATASET_PROMPT, text_columns
from .randomness import ExampleDraws

logger = logging.getLogger(__name__)


TEXT_IDS = "text_ids"  # the batch key of the texts' identities (--duplicate_negatives mask)
PROBE_SENTENCES = ("A man is playing a guitar.", "Two dogs run through the snow in a park.")


def enable_padding_free(model, tokenizer, max_length: int) -> bool:
    """Switch ``model`` to packed batches when its backbone can run them (``modeling/packing.py``) and they are
    exact: before the first step, a probe compares packed and padded outputs of the actual backbone (in eval mode) on
    two short sentences and one of ``max_length`` tokens (which meets a local attention window when there is one).
    Otherwise one log line says why batches stay padded. Returns whether batches are packed."""
    reason = model.packing_unsupported()
    if reason is None:
        ids = tokenizer(list(PROBE_SENTENCES), truncation=True, max_length=max_length)["input_ids"]
        long = tokenizer(" ".join(PROBE_SENTENCES * max_length), truncation=True, max_length=max_length)["input_ids"]
        reason = model.use_packed_attention_if_exact([*ids, long])
    if reason is not None:
        logger.info("padding-free training is off, batches are padded: %s", reason)
        return False
    return True


def text_id(text: str) -> int:
    """A 63-bit identity of ``text`` (equal texts, equal ids; a collision between two texts is a 2^-63 event)."""
    return int.from_bytes(hashlib.blake2b(str(text).encode(), digest_size=8).digest(), "little") >> 1


def packed_batch(sequences: list, num_views: int, pad_to_multiple_of: Optional[int] = None) -> dict:
    """A packed batch (``modeling/packing.py``) of token-id lists stored example-major (each example's ``num_views``
    sequences back to back): ``input_ids (1, N)``, their real tokens in one row; ``sequence_lengths (batch, views)``;
    and ``attention_mask (batch, views, seq_len)``, the mask the padded batch would have (padded to a multiple of
    ``pad_to_multiple_of``), whose width lets a compiled step lay the row out with no host read."""
    lengths = torch.tensor([len(sequence) for sequence in sequences]).view(-1, num_views)
    width = int(lengths.max()) if lengths.numel() else 0
    if pad_to_multiple_of:
        width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
    return {"input_ids": torch.tensor([token for sequence in sequences for token in sequence]).unsqueeze(0),
            "sequence_lengths": lengths,
            "attention_mask": (torch.arange(width) < lengths[..., None]).long()}


@dataclass
class ContrastiveCollator:
    """Tokenize each example into ``views`` sentences: ``(batch, views, seq_len)`` tensors.

    * unsupervised (only ``sent0``): the sentence twice; the two dropout masks of one encoder call make the pair.
    * supervised: ``sent0, sent1[, hard_neg]`` or ``sent0, sent1, hard_neg_1, ..., hard_neg_k``.

    With ``padding_free`` the batch is packed instead (``modeling/packing.py``): ``input_ids (1, N)`` holds the
    real tokens of every view of every example back to back (example-major), and ``sequence_lengths (batch,
    views)`` their counts; the two dropout views of an unsupervised sentence are two sequences of the row.

    Args:
        tokenizer: a Hugging Face tokenizer.
        max_length: truncation length (SimCSE: 32).
        unsupervised_views: copies of ``sent0`` when there is no ``sent1`` (2 for SimCSE).
        augment: optional ``(sentences, view_index, randoms) -> sentences`` applied to the views after the first
            (text-level augmentations such as word repetition); ``randoms`` holds one ``random.Random`` per
            sentence, seeded by ``draws``.
        padding_free: emit packed batches (the model must run them:
            [`enable_padding_free`][csekit.trainers.collators.enable_padding_free]).
        draws: the seeds of every random draw the collator makes (``randomness.py``): per example and epoch, so a
            resumed run collates the uninterrupted run's batches.
        pad_to_multiple_of: padded batches are padded to a multiple of it (few shapes for a compiled step).
        text_ids: also return ``text_ids (batch, columns)``, a 63-bit hash of each example's texts (``sent0``,
            ``sent1``, ``hard_neg``) before any augmentation: equal texts, equal ids (``--duplicate_negatives``).
        prompt: the model's prompt (``config.default_prompt``), prepended to every text when it is tokenized (after
            any augmentation, which so never touches it), as ``encode`` and sentence-transformers prepend it; the
            trainer sets it from the model. A batch of a dataset given its own prompt (``--dataset_prompts``: its
            rows carry it) takes that one instead (``batch_prompt``).
    """

    tokenizer: object
    max_length: int = 32
    unsupervised_views: int = 2
    augment: Optional[Callable] = None
    padding_free: bool = False
    draws: ExampleDraws = field(default_factory=ExampleDraws)
    text_ids: bool = False
    pad_to_multiple_of: Optional[int] = None
    prompt: str = ""

    @property
    def draws_at_random(self) -> bool:
        """Whether collating makes random draws (an augmentation; CMLM-CSE's masks)."""
        return self.augment is not None

    def set_epoch(self, epoch: int) -> None:
        """Called by the trainer at every epoch start: the draws of the next batches are those of ``epoch``."""
        self.draws.set_epoch(epoch)

    def view_texts(self, features: list) -> list:
        columns = list(text_columns(features[0]))
        if columns == ["sent0"]:
            views = [[f["sent0"] for f in features]] * self.unsupervised_views
        else:
            views = [[f[name] for f in features] for name in columns]
        if self.augment is not None:
            views = [views[0]] + [self.augment(texts, index, self.draws.python_randoms(features, f"augment-{index}"))
                                  for index, texts in enumerate(views[1:], start=1)]
        return views

    @contextmanager
    def batch_prompt(self, features: list):
        """While a batch is collated: the prompt of its dataset, when its rows carry one (several datasets, each
        with its own: ``multi_dataset.py``), in place of ``prompt``; every text of a batch is of one dataset."""
        if DATASET_PROMPT not in features[0]:
            yield
            return
        default, self.prompt = self.prompt, features[0][DATASET_PROMPT]
        try:
            yield
        finally:
            self.prompt = default

    def __call__(self, features: list) -> dict:
        with self.batch_prompt(features):
            batch = self.collate_views(self.view_texts(features))
        if self.text_ids:
            columns = text_columns(features[0])
            batch[TEXT_IDS] = torch.tensor([[text_id(f[name]) for name in columns] for f in features])
        return batch

    def collate_views(self, views: list) -> dict:
        batch_size, num_views = len(views[0]), len(views)
        if self.padding_free:
            return self.pack(views)
        if all(texts is views[0] for texts in views):  # unsupervised, no augmentation: tokenize once, repeat
            tokens = self.tokenize(views[0])
            return {key: value.unsqueeze(1).repeat(1, num_views, 1) for key, value in tokens.items()}
        # view-major flattening then a transpose keeps one tokenizer call for the whole batch
        tokens = self.tokenize([text for texts in views for text in texts])
        return {
            key: value.reshape(num_views, batch_size, -1).transpose(0, 1).contiguous() for key, value in tokens.items()
        }

    def prompted(self, texts: list) -> list:
        return [self.prompt + text for text in texts] if self.prompt else texts

    def tokenize(self, texts: list) -> dict:
        return self.tokenizer(self.prompted(texts), padding=True, truncation=True, max_length=self.max_length,
                              return_tensors="pt", pad_to_multiple_of=self.pad_to_multiple_of)

    def pack(self, views: list) -> dict:
        """The views' tokens (truncated at ``max_length``) as one packed row
        ([`packed_batch`][csekit.trainers.collators.packed_batch])."""
        batch_size, num_views = len(views[0]), len(views)
        if all(texts is views[0] for texts in views):  # unsupervised, no augmentation: tokenize once
            tokens = [self.token_ids(views[0])] * num_views
        else:
            flat = self.token_ids([text for texts in views for text in texts])
            tokens = [flat[view * batch_size : (view + 1) * batch_size] for view in range(num_views)]
        sequences = [tokens[view][example] for example in range(batch_size) for view in range(num_views)]
        return packed_batch(sequences, num_views, self.pad_to_multiple_of)

    def token_ids(self, texts: list) -> list:
        return self.tokenizer(self.prompted(texts), truncation=True, max_length=self.max_length)["input_ids"]
