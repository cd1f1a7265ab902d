"""A model folder written whole or not at all, for every save: ``save_pretrained``, a trainer's ``save_model``, a
recipe's commit.

[`staged_save`][csekit.modeling.folder_commit.staged_save] gives the writer a fresh hidden folder beside the
destination; once the writer is done, [`commit_files`][csekit.modeling.folder_commit.commit_files] moves its files
in under the destination's lock ([`FolderLock`][csekit.modeling.folder_commit.FolderLock], the file a training run
holds on its output folder), ``config.json`` leaving first and arriving last. Only the standard library: this file
travels with the model code (``trust_remote_code``), and ``csekit.atomic`` builds csekit's other writes on it.
"""

import contextlib
import fnmatch
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional

from .errors import FolderInUse

LOCK = ".csekit-lock"
# the top-level files a saved model folder is made of (weights and shards, config and code files, tokenizer files,
# arguments, scores, card and figure): a commit removes old ones the new set lacks, and nothing else (a log, a
# user's notes or another process's file in the same folder stay)
MODEL_FOLDER_FILES = (
    "*.safetensors", "*.safetensors.index.json", "*.py", "tokenizer*", "special_tokens_map.json", "added_tokens.json",
    "vocab.*", "merges.txt", "*.model", "chat_template*", "generation_config.json", "training_args.*",
    "eval_results.json", "README.md", "comparison.md", "*.png", "modules.json", "config_sentence_transformers.json",
)
# the sub-folders a saved model folder is made of besides its sentence-transformers modules: save_adapter's
# adapter/ (modeling/adapters.py), removed by a commit whose new set lacks it, as a stale file is
MODEL_FOLDER_DIRS = ("adapter",)
ARGUMENTS_FILE = "training_args.json"  # the arguments of the run that trained the model, as JSON
SAVE_WAIT = 60.0  # seconds a save waits for another save into the same folder before refusing
SAVE_PREFIX = ".csekit-save-"  # a staged save's folder beside its destination: .csekit-save-<pid>-<random>


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def default_mode() -> int:
    """The mode ``open()`` gives a new file under this process's umask (mkstemp and some writers give 0o600)."""
    return 0o666 & ~current_umask()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """The lock file ``path`` (a training run's ``--output_dir/.csekit-lock``, a save's destination's, an export's
    ``.OUT.csekit-lock`` beside its folder): its holder's pid and host, created whole (written to a temporary file,
    then hard-linked: the link fails when a lock exists) and removed by
    [`release`][csekit.modeling.folder_commit.FolderLock.release]. ``flag`` names the option in the refusal; a lock
    held by a live process is waited for up to ``wait`` seconds, then refused."""

    def __init__(self, path, flag: str, target=None, wait: float = 0.0):
        self.path, self.flag, self.wait = Path(path), flag, wait
        self.target = Path(target) if target is not None else self.path.parent  # the folder the lock is for
        self.record = {"pid": os.getpid(), "host": socket.gethostname()}

    def refuse(self, message: str):
        raise FolderInUse(message)

    def took_over(self, holder: dict) -> None:
        """Called when the lock of a process no longer running is taken over."""

    def holder(self) -> Optional[dict]:
        try:
            record = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}  # being written, or damaged: treated as held
        return record if isinstance(record, dict) else {}

    def stale(self, holder: dict) -> bool:
        """A lock of a process on this host that is no longer running (one on another host cannot be checked)."""
        pid = holder.get("pid")
        return holder.get("host") == self.record["host"] and isinstance(pid, int) and not process_alive(pid)

    def busy(self) -> bool:
        holder = self.holder()
        return holder is not None and not self.stale(holder)

    def acquire(self) -> "FolderLock":
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f"{self.path.name}.", suffix=".tmp")
        deadline = time.monotonic() + self.wait
        try:
            with os.fdopen(handle, "w") as stream:
                json.dump(self.record, stream)
            retries = 2  # a lock gone or taken over from a dead process: tried again twice, then refused
            while True:
                try:
                    os.link(temporary, self.path)
                    return self
                except FileExistsError:
                    holder = self.holder()
                    if holder is not None and not self.stale(holder) and time.monotonic() < deadline:
                        time.sleep(0.05)  # a live holder, waited for
                        continue
                    if holder is not None and not self.stale(holder):
                        pid, host = holder.get("pid"), holder.get("host")
                        who = f"process {pid} on {host}" if pid else "another run"
                        self.refuse(f"{self.flag} {self.target}: in use by {who} ({self.path}); wait for it to end "
                                    f"or choose another {self.flag} (delete the lock file only if that run is gone)")
                    if not retries:
                        self.refuse(f"{self.flag} {self.target}: could not take {self.path}; try again")
                    retries -= 1
                    if holder is not None:  # a dead process's lock on this host
                        self.took_over(holder)
                        self.path.unlink(missing_ok=True)
        finally:
            os.remove(temporary)

    def release(self) -> None:
        if self.holder() == self.record:
            self.path.unlink(missing_ok=True)


def settle_files(paths) -> None:
    """Give each file of ``paths`` the default mode (a writer's temporary file may have been 0o600) and fsync it."""
    mode = default_mode()
    for path in paths:
        if path.is_file():
            os.chmod(path, mode)
            with open(path, "rb") as stream:
                os.fsync(stream.fileno())


def remove_stale(destination: Path, kept: set, owned) -> None:
    """Remove ``destination``'s top-level files not in ``kept`` that match ``owned``'s patterns (hidden ones stay),
    and for a model folder its stale `MODEL_FOLDER_DIRS`."""
    for path in sorted(destination.iterdir()):
        stale = path.name not in kept and not path.name.startswith(".")
        if path.is_file() and stale and any(fnmatch.fnmatch(path.name, pattern) for pattern in owned):
            os.remove(path)
        elif path.is_dir() and stale and owned is MODEL_FOLDER_FILES and path.name in MODEL_FOLDER_DIRS:
            shutil.rmtree(path)


def commit_files(staging, destination, marker: str = "config.json", owned=MODEL_FOLDER_FILES) -> Path:
    """Make the entries of ``staging`` the top-level files of ``destination``, with ``marker`` as the commit record.

    A folder that also holds other things (a training output folder keeps its ``checkpoint-*`` sub-folders) cannot
    be swapped with one rename, so its file set changes one ``os.replace`` at a time, ordered so that the folder is
    a model exactly when ``marker`` (``config.json``, which every loader opens first) is there:

    1. the old ``marker`` goes: from here on the folder is not a model (every csekit command and ``from_pretrained``
       refuse a folder without ``config.json``);
    2. each new entry but ``marker`` replaces its old namesake; old top-level files that the new set lacks and that
       match ``owned`` (a stale card, figure or weight shard) are removed; other files and the sub-folders that
       ``staging`` lacks stay;
    3. the new ``marker`` arrives last: the folder is the new model, whole.

    A process killed at any point leaves the old model (before 1), no model (between 1 and 3) or the new one, and
    never a truncated file (each file was complete and fsynced in ``staging`` before it moved). Hidden entries
    (``.name``, ``staging`` itself when it lies inside ``destination``) are not part of the set.
    """
    staging, destination = Path(staging), Path(destination)
    entries = sorted(path for path in staging.iterdir() if path.name != marker)
    if not (staging / marker).is_file():
        raise FileNotFoundError(f"{staging / marker}: the staged folder lacks its commit record")
    settle_files([*entries, staging / marker, *(inner for entry in entries if entry.is_dir()
                                                for inner in entry.rglob("*"))])
    destination.mkdir(parents=True, exist_ok=True)
    if (destination / marker).exists():
        os.remove(destination / marker)
    for path in entries:
        target = destination / path.name
        if path.is_dir() and target.is_dir():
            shutil.rmtree(target)
        os.replace(path, target)
    remove_stale(destination, {path.name for path in entries} | {marker}, owned)
    os.replace(staging / marker, destination / marker)
    shutil.rmtree(staging, ignore_errors=True)
    return destination


def private_folder(parent, prefix: str) -> Path:
    """A new hidden work folder ``parent/<prefix><pid>-<random>``;
    [`remove_abandoned`][csekit.modeling.folder_commit.remove_abandoned] recognises it as this process's."""
    return Path(tempfile.mkdtemp(dir=parent, prefix=f"{prefix}{os.getpid()}-"))


def remove_abandoned(parent, prefix: str) -> list:
    """Remove the [`private_folder`][csekit.modeling.folder_commit.private_folder] s of ``prefix`` in ``parent``
    whose process is no longer running (a SIGKILL leaves them behind); those of running processes stay. Returns what
    was removed."""
    removed = []
    for path in sorted(Path(parent).glob(f"{prefix}*")):
        pid = path.name[len(prefix):].split("-")[0]
        if path.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def staged_save(destination, flag: str = "save_pretrained", wait: Optional[float] = None) -> Iterator[Path]:
    """Yield a fresh hidden folder beside ``destination`` to write a whole model folder into; on leaving the block,
    commit it into ``destination`` ([`commit_files`][csekit.modeling.folder_commit.commit_files]: ``config.json``
    last; the old model's weights, records, card and figures that the new set lacks are removed, so no score or card
    of another model stays beside the new weights) under ``destination``'s lock, waiting up to ``wait`` seconds
    (default [`SAVE_WAIT`][csekit.modeling.folder_commit.SAVE_WAIT]) for another save into it. An error inside the
    block, or a kill anywhere, leaves ``destination`` the old model, no model (inside the commit) or the new one,
    never a mix."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(destination.parent, SAVE_PREFIX)
    staging = private_folder(destination.parent, SAVE_PREFIX)
    try:
        yield staging
        destination.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(destination / LOCK, flag, destination, SAVE_WAIT if wait is None else wait).acquire()
        try:
            commit_files(staging, destination)
        finally:
            lock.release()
    finally:
        shutil.rmtree(staging, ignore_errors=True)
