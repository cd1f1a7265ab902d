"""Static (context-free) token-embedding models (Stankevičius & Lukoševičius 2024, Sections 3.2.3-3.2.5).

* ``RE``: random embeddings. Token id ``i`` maps to a fixed N(0, 0.1²) vector of size 768 (row ``i`` of a table drawn
  once from a seeded generator), with the bert-base-uncased tokenizer. No weights are needed.
* ``Avg``: every token's vector averaged over all its contexts in a corpus, for the chosen layers of a transformer
  (the paper used WikiText-103; here ``--avg-corpus``). Tokens never seen in the corpus get weight 0.
* ``BERT + Avg``: sentence embeddings mixed as ``(1 - w) * transformer + w * Avg`` (w = 0 is the transformer,
  w = 1 the Avg model; negative w is allowed), see `MixedSource`.

A source turns a tokenized batch into ``(batch, seq_len, hidden)`` token states; ``token_mask`` removes tokens the
model has no vector for; ``fingerprint`` names its content for the hidden-state cache. The same aggregation (over the
text's tokens, ``[CLS]``/``[SEP]`` excluded, see ``idf.py``) and post-processing then apply to every model.
"""

from functools import cached_property
from typing import Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..fingerprint import combine, data_fingerprint, tensor_digest, tokenizer_fingerprint

RANDOM_EMBEDDING_SIZE = 768
RANDOM_EMBEDDING_STD = 0.1


class RandomEmbeddingSource:
    """RE: ``(vocab_size, 768)`` table of seeded N(0, 0.1²) vectors; layers do not apply (``uses_layers=False``)."""

    uses_layers = False

    def __init__(self, tokenizer, seed: int = 42, size: int = RANDOM_EMBEDDING_SIZE, std: float = RANDOM_EMBEDDING_STD):
        self.name = f"re(seed={seed})"
        self.tokenizer = tokenizer
        generator = np.random.default_rng(seed)
        self.table = torch.from_numpy(generator.normal(0.0, std, (len(tokenizer), size)).astype(np.float32))

    def token_states(self, batch: dict, layers: Sequence[int]) -> torch.Tensor:
        return self.table[batch["input_ids"]]

    def token_mask(self, input_ids: torch.Tensor) -> Optional[torch.Tensor]:
        return None

    @cached_property
    def fingerprint(self) -> str:
        """The drawn table and the tokenizer (hidden-state cache key)."""
        return combine("re", tensor_digest(self.table), tokenizer_fingerprint(self.tokenizer))


class AveragedStaticSource:
    """Avg: per-token averages of a transformer source's states over a corpus, built lazily per layer list.

    Args:
        source: a transformer source (``token_states(batch, layers)``).
        corpus: the texts whose contexts are averaged.
        batch_size, max_length: for encoding the corpus.
    """

    uses_layers = True

    def __init__(self, source, corpus: Sequence[str], batch_size: int = 64, max_length: Optional[int] = 128):
        self.name = f"avg({source.name})"
        self.source = source
        self.tokenizer = source.tokenizer
        self.corpus = list(corpus)
        self.batch_size = batch_size
        self.max_length = max_length
        self.num_hidden_layers = source.num_hidden_layers
        self._tables = {}
        self._seen = None

    def table(self, layers: Sequence[int]) -> torch.Tensor:
        """``(vocab_size, hidden)`` average state of each token id over the corpus, for ``layers``."""
        key = tuple(layers)
        if key not in self._tables:
            sums, counts = None, torch.zeros(len(self.tokenizer), dtype=torch.float64)
            starts = range(0, len(self.corpus), self.batch_size)
            with torch.inference_mode():
                for start in tqdm(starts, desc=f"Averaging {self.source.name} layers {key}", disable=len(starts) < 10):
                    batch = dict(self.tokenizer(
                        self.corpus[start : start + self.batch_size], padding=True, truncation=True,
                        max_length=self.max_length, return_tensors="pt",
                    ))
                    states = self.source.token_states(batch, layers).double()
                    real = batch["attention_mask"].bool()
                    ids = batch["input_ids"][real]
                    if sums is None:
                        sums = torch.zeros(len(self.tokenizer), states.shape[-1], dtype=torch.float64)
                    sums.index_add_(0, ids, states[real])
                    counts.index_add_(0, ids, torch.ones(len(ids), dtype=torch.float64))
            self._seen = counts > 0
            self._tables[key] = (sums / counts.clamp(min=1).unsqueeze(1)).float()
        return self._tables[key]

    def token_states(self, batch: dict, layers: Sequence[int]) -> torch.Tensor:
        return self.table(layers)[batch["input_ids"]]

    @cached_property
    def fingerprint(self) -> str:
        """The base model's fingerprint, the averaging corpus and its truncation (hidden-state cache key)."""
        return combine("avg", self.source.fingerprint, data_fingerprint(self.corpus), self.max_length)

    def token_mask(self, input_ids: torch.Tensor) -> Optional[torch.Tensor]:
        if self._seen is None:
            raise RuntimeError("token_mask is only defined after token_states has built a table")
        return self._seen[input_ids].float()


class MixedSource:
    """BERT + Avg: sentence embedding ``(1 - w) * base + w * static``; each part is aggregated on its own first.

    Mixing pooled sentence vectors (not token states) follows the paper: "we averaged sentence embeddings from the
    two methods". Both parts share the base model's tokenizer.
    """

    def __init__(self, base, static: AveragedStaticSource, weight: float):
        self.name = f"{base.name}+avg(w={weight:g})"
        self.parts = ((base, 1.0 - weight), (static, weight))
        self.tokenizer = base.tokenizer
        self.uses_layers = True
        self.num_hidden_layers = base.num_hidden_layers


__all__ = ["AveragedStaticSource", "MixedSource", "RandomEmbeddingSource"]
