"""Collators that turn text examples into tokenized contrastive views."""

from dataclasses import dataclass
from typing import Callable, Optional

from .data import PAIR_COLUMNS


@dataclass
class ContrastiveCollator:
    """Tokenize each example into ``views`` sentences: ``(batch, views, seq_len)`` tensors.

    * unsupervised (only ``sent0``): the sentence twice; the two dropout masks of one encoder call make the pair.
    * supervised: ``sent0, sent1[, hard_neg]``.

    Args:
        tokenizer: a Hugging Face tokenizer.
        max_length: truncation length (SimCSE: 32).
        unsupervised_views: copies of ``sent0`` when there is no ``sent1`` (2 for SimCSE).
        augment: optional ``(sentences, view_index) -> sentences`` applied to the views after the first (for
            text-level augmentations such as word repetition).
    """

    tokenizer: object
    max_length: int = 32
    unsupervised_views: int = 2
    augment: Optional[Callable] = None

    def view_texts(self, features: list) -> list:
        columns = [name for name in PAIR_COLUMNS if name in features[0]]
        if columns == ["sent0"]:
            views = [[f["sent0"] for f in features]] * self.unsupervised_views
        else:
            views = [[f[name] for f in features] for name in columns]
        if self.augment is not None:
            views = [views[0]] + [self.augment(texts, index) for index, texts in enumerate(views[1:], start=1)]
        return views

    def __call__(self, features: list) -> dict:
        views = self.view_texts(features)
        batch_size, num_views = len(features), len(views)
        if all(texts is views[0] for texts in views):  # unsupervised, no augmentation: tokenize once, repeat
            tokens = self.tokenize(views[0])
            return {key: value.unsqueeze(1).repeat(1, num_views, 1) for key, value in tokens.items()}
        # view-major flattening then a transpose keeps one tokenizer call for the whole batch
        tokens = self.tokenize([text for texts in views for text in texts])
        return {
            key: value.reshape(num_views, batch_size, -1).transpose(0, 1).contiguous() for key, value in tokens.items()
        }

    def tokenize(self, texts: list) -> dict:
        return self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
