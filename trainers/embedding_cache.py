"""On-disk cache of pooled sentence vectors from a frozen encoder (CLSR trains only a head on top of them).

A cache entry is one safetensors file ``<cache_dir>/<key>.safetensors`` holding ``(n, hidden)`` float32 vectors.
``key`` hashes the *model fingerprint* (every backbone weight, the backbone config, the tokenizer, pooler, pooling
layers and max length) and the *data fingerprint* (the exact sentence list, in order). The file's metadata repeats
both fingerprints, the shape and a sha256 of the tensor bytes, and every load re-checks all of them: an unreadable
(e.g. truncated) file, a file whose fingerprints do not match (copied, renamed, format change) or whose bytes do
not match the checksum is rebuilt, never used (`csekit.tensor_cache`, the file format shared with the
extraction's cache; writes are atomic).

Example::

    cache = EmbeddingCache("~/.cache/csekit/embeddings")
    entry = cache.get(model, sentences, batch_size=128)   # CLSRModel (or any model with encode_pooled)
    entry.vectors.shape, entry.status                      # (n, hidden), "hit" | "built" | "rebuilt (...)"
"""

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..fingerprint import data_fingerprint, module_fingerprint, tokenizer_fingerprint
from ..tensor_cache import entry_path, load_entry, save_entry

logger = logging.getLogger(__name__)

CACHE_FORMAT = "csekit-embedding-cache-v2"
DEFAULT_CACHE_DIR = Path(os.environ.get("CSEKIT_CACHE_DIR", Path.home() / ".cache" / "csekit" / "embeddings"))


def model_fingerprint(model, max_length: Optional[int] = None) -> str:
    """sha256 over everything that changes a pooled vector: backbone weights + config, tokenizer, pooling."""
    digest = hashlib.sha256(module_fingerprint(model.encoder).encode())
    digest.update(model.config.encoder_config.to_json_string(use_diff=False).encode())
    digest.update(tokenizer_fingerprint(model.tokenizer).encode())
    pooling = {
        "pooler_type": model.config.pooler_type,
        "layers": model.config.resolved_pooling_layers,
        "max_length": max_length or model.config.max_length,
    }
    digest.update(json.dumps(pooling, sort_keys=True).encode())
    return digest.hexdigest()


@dataclass
class CachedEmbeddings:
    """``vectors``: ``(n, hidden)`` float32; ``status``: ``hit``, ``built`` or ``rebuilt (<reason>)``."""

    vectors: torch.Tensor
    path: Path
    status: str


class EmbeddingCache:
    """Pooled-vector cache keyed by (model, pooling, data); see the module docstring for the checks."""

    def __init__(self, cache_dir=None):
        self.cache_dir = Path(cache_dir or DEFAULT_CACHE_DIR).expanduser()

    def path_for(self, model_key: str, data_key: str) -> Path:
        return entry_path(self.cache_dir, f"{CACHE_FORMAT}|{model_key}|{data_key}")

    def get(
        self,
        model,
        sentences: Sequence[str],
        batch_size: int = 128,
        max_length: Optional[int] = None,
        show_progress_bar: Optional[bool] = None,
        across_processes: bool = False,
    ) -> CachedEmbeddings:
        """Vectors of ``sentences`` under ``model``'s frozen encoder: from the cache if valid, else computed+stored.

        ``model`` needs ``encoder``, ``config``, ``tokenizer`` and ``encode_pooled``
        ([`CLSRModel`][csekit.modeling.modeling_clsr.CLSRModel]). ``across_processes``: under several processes (one
        ``accelerate
        launch``, sharing the cache folder), a missing entry is pooled by all of them, each a contiguous share, and
        stored once by the main process; every process must make the call.
        """
        sentences = list(sentences)
        expected = self._fingerprints(model, sentences, max_length)
        path = self.path_for(expected["model_fingerprint"], expected["data_fingerprint"])
        if across_processes:
            shared = self._pool_across_processes(model, sentences, batch_size, path)
            if shared is not None:
                return shared
        reason = None
        if path.exists():
            vectors, reason = self._load(path, expected)
            if reason is None:
                return CachedEmbeddings(vectors, path, "hit")
            logger.warning("embedding cache %s is invalid (%s); rebuilding it", path, reason)
        vectors = model.encode_pooled(
            sentences, batch_size=batch_size, max_length=max_length, show_progress_bar=show_progress_bar
        ).float().clone()  # clone: a normal tensor, not an inference-mode one (those cannot enter autograd graphs)
        self._store(path, vectors, expected)
        return CachedEmbeddings(vectors, path, "built" if reason is None else f"rebuilt ({reason})")

    def _pool_across_processes(self, model, sentences: list, batch_size: int, path: Path):
        """The entry pooled by every process of the launch, or ``None`` when one process alone will do (a single
        process, fewer sentences than processes, or the entry is already there)."""
        from accelerate import PartialState
        from accelerate.utils import gather, pad_across_processes

        state = PartialState()
        world = state.num_processes
        if world == 1 or len(sentences) < world or path.exists():
            return None
        bounds = [len(sentences) * rank // world for rank in range(world + 1)]
        rank = state.process_index
        share = model.encode_pooled(sentences[bounds[rank] : bounds[rank + 1]], batch_size=batch_size)
        padded = gather(pad_across_processes(share.to(state.device), dim=0)).cpu()
        rows = padded.reshape(world, -1, share.shape[1])
        vectors = torch.cat([part[: end - start] for part, start, end in zip(rows, bounds, bounds[1:])])
        if state.is_main_process:
            self.put(model, sentences, vectors)
        state.wait_for_everyone()
        entry = self.get(model, sentences)
        return CachedEmbeddings(entry.vectors, entry.path, f"built by {world} processes")

    def put(self, model, sentences: Sequence[str], vectors: torch.Tensor, max_length: Optional[int] = None) -> Path:
        """Store ``vectors`` pooled elsewhere (e.g. a share by each of several processes) as the entry of
        ``(model, sentences)``; returns its path."""
        sentences = list(sentences)
        if vectors.dim() != 2 or vectors.shape[0] != len(sentences):
            raise ValueError(f"vectors of shape {tuple(vectors.shape)} for {len(sentences)} sentences")
        expected = self._fingerprints(model, sentences, max_length)
        path = self.path_for(expected["model_fingerprint"], expected["data_fingerprint"])
        self._store(path, vectors.float(), expected)
        return path

    @staticmethod
    def _fingerprints(model, sentences: list, max_length: Optional[int]) -> dict:
        return {
            "format": CACHE_FORMAT,
            "model_fingerprint": model_fingerprint(model, max_length),
            "data_fingerprint": data_fingerprint(sentences),
            "rows": str(len(sentences)),
        }

    @staticmethod
    def _load(path: Path, expected: dict):
        """``(vectors, None)`` for a valid entry, else ``(None, reason)``."""
        tensors, metadata, reason = load_entry(path, expected)
        if reason is not None:
            return None, reason
        vectors, rows = tensors.get("vectors"), int(expected["rows"])
        if (vectors is None or len(tensors) != 1 or vectors.dim() != 2 or vectors.shape[0] != rows
                or str(vectors.shape[1]) != metadata.get("dim")):
            return None, "tensors do not match the metadata"
        return vectors, None

    def _store(self, path: Path, vectors: torch.Tensor, expected: dict) -> None:
        save_entry(path, {"vectors": vectors}, {**expected, "dim": str(vectors.shape[1])})


__all__ = ["CachedEmbeddings", "EmbeddingCache", "data_fingerprint", "model_fingerprint"]
