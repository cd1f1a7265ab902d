"""Atomic writes: every file or folder csekit writes appears whole or not at all.

Content goes to a temporary sibling of its destination (same folder, so the same file system) and is renamed into
place with ``os.replace``, which is atomic on POSIX and Windows. A process killed mid-write leaves the old file (or
nothing) plus at most a hidden ``.<name>.*.tmp`` sibling, never a truncated destination.

    write_text(folder / "README.md", card)
    write_json(folder / "eval_results.json", record)
    with staged_folder(out_dir) as staging:       # build a whole folder, then move it into place
        model.save_pretrained(staging)
"""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


def write_bytes(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return path


def write_text(path, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path, value) -> Path:
    return write_text(path, json.dumps(value, indent=2) + "\n")


@contextlib.contextmanager
def staged_folder(destination, replace: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``destination``; when the block ends without an error it becomes
    ``destination`` (an existing one is removed first only with ``replace``). On an error nothing is left."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".tmp"))
    try:
        yield staging
        if destination.exists():
            if not replace:
                raise FileExistsError(f"{destination} already exists")
            shutil.rmtree(destination) if destination.is_dir() else destination.unlink()
        os.replace(staging, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


__all__ = ["staged_folder", "write_bytes", "write_json", "write_text"]
