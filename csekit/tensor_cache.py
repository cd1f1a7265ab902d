"""One checked safetensors file per cache entry: the file format of both of csekit's on-disk caches (CLSR's pooled
vectors in `csekit.trainers.embedding_cache`, the extraction's token states in
[`csekit.extraction.extractor`][csekit.extraction.extractor]).

An entry is ``<directory>/<sha256 of its key>.safetensors``. Its metadata holds what the cache asks for (format,
fingerprints, counts) and a sha256 over every tensor. `load_entry` checks all of it again, so a file that is
unreadable, truncated, not safetensors, copied from another entry or garbled is reported with the reason (the cache
rebuilds it), never used. Only safetensors is read, never a pickle. `save_entry` writes through
[`csekit.atomic`][csekit.atomic], so a crash never leaves a half-written entry.
"""

import hashlib
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes

from .atomic import write_bytes
from .fingerprint import combine, tensor_digest


def entry_path(directory, key: str) -> Path:
    return Path(directory) / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.safetensors"


def checksum(tensors: dict) -> str:
    """sha256 over every tensor's name and bytes."""
    return combine(*(f"{name}:{tensor_digest(tensor)}" for name, tensor in sorted(tensors.items())))


def save_entry(path, tensors: dict, metadata: dict) -> None:
    """Write ``tensors`` with ``metadata`` (string values) and their checksum, atomically."""
    tensors = {name: tensor.contiguous() for name, tensor in tensors.items()}
    write_bytes(path, safetensors_bytes(tensors, metadata={**metadata, "sha256": checksum(tensors)}))


def load_entry(path, expected: dict) -> tuple:
    """``(tensors, metadata, None)`` for a readable entry whose metadata has every ``expected`` value and whose
    tensors match their checksum, else ``(None, None, reason)``."""
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as error:  # truncated, garbled or non-safetensors files raise various errors
        return None, None, f"unreadable ({type(error).__name__})"
    differing = [field for field, value in expected.items() if metadata.get(field) != value]
    if differing:
        return None, None, f"{differing[0]} differs"
    if checksum(tensors) != metadata.get("sha256"):
        return None, None, "checksum mismatch"
    return tensors, metadata, None


__all__ = ["checksum", "entry_path", "load_entry", "save_entry"]
