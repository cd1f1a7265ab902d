"""Atomic writes: every file or folder csekit writes appears whole or not at all.

Content goes to a temporary sibling of its destination (same folder, so the same file system) and is renamed into
place with ``os.replace``, which is atomic on POSIX and Windows. A process killed mid-write leaves the old file (or
nothing) plus at most a hidden ``.<name>.*.tmp`` sibling, never a truncated destination.

    write_text(folder / "README.md", card)
    write_json(folder / "eval_results.json", record)
    # build a whole folder, then move it into place
    with staged_folder(out_dir) as staging:
        model.save_pretrained(staging)
    # replace the files of a folder that also holds other things
    commit_files(out_dir / ".staging", out_dir)
"""

import contextlib
import ctypes
import errno
import glob
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from .errors import DataError
from .modeling.folder_commit import (  # the commit every model save shares, stdlib only (it ships with models)
    LOCK,
    FolderLock,
    commit_files,
    current_umask,
    default_mode,
    private_folder,
    process_alive,
    remove_abandoned,
)

logger = logging.getLogger(__name__)


class RunLock(FolderLock):
    """[`FolderLock`][csekit.modeling.folder_commit.FolderLock] whose refusal is csekit's one-line
    [`DataError`][csekit.errors.DataError] (exit 2), and whose taking over of a dead process's lock is logged."""

    def refuse(self, message: str):
        raise DataError(message)

    def took_over(self, holder: dict) -> None:
        logger.warning("%s: taking over the lock of process %d, which is no longer running", self.target,
                       holder.get("pid"))


def apply_default_modes(folder) -> None:
    """Give every file under ``folder`` the mode ``open()`` gives under the umask (0644 under 022) and every folder
    (``folder`` included) the mode ``mkdir`` gives (0755): mkstemp, mkdtemp and safetensors' writer make them
    owner-only."""
    folder = Path(folder)
    file_mode, folder_mode = default_mode(), 0o777 & ~current_umask()
    os.chmod(folder, folder_mode)
    for path in folder.rglob("*"):
        if path.is_symlink():
            continue
        os.chmod(path, folder_mode if path.is_dir() else file_mode)


def write_bytes(path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(temporary, default_mode())  # what open() would give, not mkstemp's owner-only 0o600
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


def exchange(first, second) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); ``False`` where the system or the
    file system cannot, and nothing changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rename = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd, rename_exchange = -100, 2
    if rename(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), rename_exchange) == 0:
        return True
    if ctypes.get_errno() in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    code = ctypes.get_errno()
    raise OSError(code, os.strerror(code), str(second))


def move_into_place(source, destination) -> Path:
    """``os.replace(source, destination)``, also when ``destination`` is an existing folder: the two are swapped in
    one atomic step ([`exchange`][csekit.atomic.exchange]) and the old one, now at ``source``, is deleted; a process
    killed at any point
    leaves the old folder or the new one at ``destination``, never nothing or a mix. Where the system cannot swap,
    the old folder is first renamed to the hidden ``.<name>.<pid>.old`` (which
    [`recover_abandoned`][csekit.atomic.recover_abandoned] puts back
    if the process dies before the new one arrives)."""
    destination = Path(destination)
    if not (destination.is_dir() and not destination.is_symlink()):
        os.replace(source, destination)
        return destination
    if exchange(source, destination):
        shutil.rmtree(source)
        return destination
    aside = destination.with_name(f".{destination.name}.{os.getpid()}.old")
    os.replace(destination, aside)
    os.replace(source, destination)
    shutil.rmtree(aside)
    return destination


def recover_abandoned(destination) -> list:
    """Tidy what a process killed inside [`staged_folder`][csekit.atomic.staged_folder] or
    [`move_into_place`][csekit.atomic.move_into_place] left beside
    ``destination``: its staging folders are removed, and an old folder set aside is put back when ``destination``
    is missing (else removed). Those of running processes stay. Returns what was removed or restored."""
    destination = Path(destination)
    touched = []
    for path in sorted(destination.parent.glob(f".{glob.escape(destination.name)}.*")):
        match = re.fullmatch(rf"\.{re.escape(destination.name)}\.(\d+)(?:\.old|-.*\.tmp)", path.name)
        if not match or not path.is_dir() or process_alive(int(match.group(1))):
            continue
        if path.name.endswith(".old") and not destination.exists():
            os.replace(path, destination)
        else:
            shutil.rmtree(path, ignore_errors=True)
        touched.append(path)
    return touched


@contextlib.contextmanager
def staged_folder(destination, replace: bool = False, flag: Optional[str] = None) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``destination``; when the block ends without an error it becomes
    ``destination`` (an existing one is replaced only with ``replace``, see
    [`move_into_place`][csekit.atomic.move_into_place]). On an error
    nothing is left. ``flag`` (the command's option for ``destination``) locks it for the block: a second writer of
    the same folder is refused in one line naming the first ([`RunLock`][csekit.atomic.RunLock])."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    lock = RunLock(destination.parent / f".{destination.name}{LOCK}", flag, destination).acquire() if flag else None
    try:
        recover_abandoned(destination)
        staging = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.{os.getpid()}-",
                                        suffix=".tmp"))
        try:
            yield staging
            if destination.exists() and not replace:
                raise DataError(f"{flag or destination} {destination}: written by another process meanwhile; pass "
                                "--overwrite to replace it")
            apply_default_modes(staging)  # mkdtemp's folder is 0o700
            move_into_place(staging, destination)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if lock is not None:
            lock.release()


@contextlib.contextmanager
def work_folder(destination) -> Iterator[Path]:
    """A scratch folder beside ``destination`` (same file system, so a file built there is renamed into the
    staged folder atomically, never copied across disks), removed when the block ends; one a killed process left is
    removed by the next [`staged_folder`][csekit.atomic.staged_folder] of the same destination."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=destination.parent, prefix=f".{destination.name}.{os.getpid()}-work-",
                                 suffix=".tmp"))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


__all__ = [
    "LOCK", "RunLock", "apply_default_modes", "commit_files", "default_mode", "exchange", "move_into_place",
    "private_folder", "process_alive", "recover_abandoned", "remove_abandoned", "staged_folder", "work_folder",
    "write_bytes", "write_json", "write_text",
]
