"""Content fingerprints for on-disk caches: an entry is valid for the exact weights, tokenizer and texts it was
computed from, never for a name (a model folder can be overwritten in place, a corpus edited).

Shared by the CLSR pooled-vector cache (`csekit.trainers.embedding_cache`) and the extraction hidden-state
cache ([`csekit.extraction.extractor`][csekit.extraction.extractor]).

    module_fingerprint(model)          # sha256 over every parameter and buffer (names, dtypes, shapes, bytes)
    tokenizer_fingerprint(tokenizer)   # the tokenizer's vocabulary and pipeline, as canonical JSON
    data_fingerprint(sentences)        # sha256 of a sentence list, order included
"""

import hashlib
import json
from typing import Sequence

import torch


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (any dtype, any device)."""
    return hashlib.sha256(tensor.detach().cpu().contiguous().view(torch.uint8).numpy()).hexdigest()


def module_fingerprint(module: torch.nn.Module) -> str:
    """sha256 over every entry of ``module.state_dict()``: name, dtype, shape and the bytes of the values."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor_digest(tensor).encode())
    return digest.hexdigest()


def tokenizer_fingerprint(tokenizer) -> str:
    """The tokenizer's vocabulary and pipeline, without its truncation/padding state (which each call resets)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return json.dumps(tokenizer.get_vocab(), sort_keys=True)
    pipeline = json.loads(backend.to_str())
    pipeline.pop("truncation", None)
    pipeline.pop("padding", None)
    return json.dumps(pipeline, sort_keys=True)


def data_fingerprint(sentences: Sequence[str]) -> str:
    """sha256 of the sentence list (order matters: row i of a cache entry is sentence i)."""
    digest = hashlib.sha256(str(len(sentences)).encode())
    for sentence in sentences:
        encoded = sentence.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()


def combine(*parts: str) -> str:
    """sha256 of several fingerprints / settings, each length-prefixed so the split points are part of the hash."""
    digest = hashlib.sha256()
    for part in parts:
        encoded = str(part).encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    return digest.hexdigest()


__all__ = ["combine", "data_fingerprint", "module_fingerprint", "tensor_digest", "tokenizer_fingerprint"]
