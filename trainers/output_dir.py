"""One run per output folder, and nothing trained thrown away.

A training run holds ``--output_dir/.csekit-lock`` (its pid and host) from its start to its end; a second run into the
same folder stops at once, naming the holder. A lock left by a process that died (SIGKILL, power loss) on this host
is taken over, with a log line. The run builds its final model in a staging folder of its own,
``.csekit-staging-<pid>-<random>``, which [`csekit.atomic.commit_files`][csekit.atomic.commit_files] moves into the
folder; when the final save
or the test evaluation fails, that folder stays where the error message says, and later runs leave it alone (they log
that it is there).
"""

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Callable

from ..atomic import LOCK, RunLock, private_folder
from ..errors import DataError, storage_error
from ..loading import ARGUMENTS_FILE
from ..preflight import check_output_dir, checkpoint_problem, find_checkpoint

logger = logging.getLogger(__name__)

STAGING_PREFIX = ".csekit-staging"
PARTIAL_CHECKPOINT_PREFIX = ".partial-checkpoint-"  # a checkpoint being written (see ContrastiveTrainer)


def is_csekit_output(folder: Path) -> bool:
    """Whether ``folder`` is (the start of) a csekit run's output: ``training_args.json``, ``checkpoint-*`` folders,
    a run's lock or staging folder, or the ``config.json`` of a csekit model."""
    if (folder / ARGUMENTS_FILE).is_file() or (folder / LOCK).exists() or any(folder.glob("checkpoint-*/")):
        return True
    if any(folder.glob(f"{STAGING_PREFIX}*/")):
        return True
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type", "").startswith("csekit-")
    except (OSError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def partial_checkpoint(partial: Path, checkpoint: Path, kept: Callable[[], str]):
    """The writing of ``checkpoint`` in its hidden ``partial`` folder (Trainer and CLSR alike): when the disk refuses
    a write ([`storage_error`][csekit.errors.storage_error]), ``partial`` is removed and the error becomes one line
    saying so
    and what ``kept()`` says is unchanged; any other error propagates."""
    try:
        yield
    except Exception as error:
        reason = storage_error(error)
        if reason is None:
            raise
        shutil.rmtree(partial, ignore_errors=True)
        raise DataError(f"{reason} while writing {checkpoint}; the partial checkpoint was removed and {kept()}") \
            from error


class RunFolder:
    """The output folder of one run: checked when made, then locked (`acquire`,
    [`RunLock`][csekit.trainers.output_dir.RunLock]) with a
    staging folder of its own (``staging``).

    Raises [`DataError`][csekit.trainers.output_dir.DataError] for a path that is a file, lies under one or cannot be
    written, for an existing
    non-empty folder that is not a csekit output (`is_csekit_output`) unless ``overwrite``, and for a folder
    another live run holds (checked by the ``main`` process of a multi-process run). Nothing is written before
    `acquire`.
    """

    def __init__(self, output_dir, overwrite: bool = False, main: bool = True):
        folder = check_output_dir(output_dir, "--output_dir")
        if folder.is_dir() and any(folder.iterdir()) and not overwrite and not is_csekit_output(folder):
            raise DataError(f"--output_dir {folder}: exists and is not a csekit output folder (no training_args.json, "
                            "checkpoint-* or csekit config.json); choose another folder or pass "
                            "--overwrite_output_dir true")
        self.folder = folder
        self.staging = None  # made by acquire()
        self.lock = RunLock(folder / LOCK, "--output_dir")
        # say so now (the main process: the others would see its lock); acquire() settles races at the start
        if main and folder.is_dir() and self.lock.busy():
            self.lock.acquire()  # raises, naming the holder (unless it has just ended)
            self.lock.release()
        self.locked = False

    def acquire(self, lock: bool = True) -> None:
        """Take the folder (``lock=False``: the other processes of a multi-process run, which only follow)."""
        if lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
            self.locked = True
            self._tidy()
            self.staging = private_folder(self.folder, f"{STAGING_PREFIX}-")
        else:  # the main process writes the final model; the others pass a path they never write to
            self.staging = self.folder / f"{STAGING_PREFIX}-of-the-main-process"

    def _tidy(self) -> None:
        """Under the lock: remove what killed checkpoint saves left, and say where earlier runs' models wait."""
        for partial in sorted(self.folder.glob(f"{PARTIAL_CHECKPOINT_PREFIX}*")):
            logger.warning("removing %s: a checkpoint whose save was interrupted", partial)
            shutil.rmtree(partial, ignore_errors=True)
        for staging in sorted(self.folder.glob(f"{STAGING_PREFIX}*")):
            if checkpoint_problem(staging, record="config.json") is None:
                logger.warning("%s holds the model of an earlier run whose end failed; it is kept (move it or delete "
                               "it)", staging)
            else:  # a run killed before its final save was whole, or inside the commit: nothing left to keep
                shutil.rmtree(staging, ignore_errors=True)

    def release(self) -> None:
        """Give the folder back; the staging folder goes too unless it holds something (a kept model)."""
        if self.locked:
            with contextlib.suppress(OSError):
                self.staging.rmdir()  # only when empty
            self.lock.release()
            self.locked = False

    def remove_checkpoints(self) -> list:
        """Once the final model is in place: remove the run's ``checkpoint-*`` folders (optimizer state, for resuming
        only), so the folder is the publishable model. Each is renamed to a hidden partial name first, so a kill
        mid-removal leaves only what the next run's `_tidy` removes. Returns the removed names."""
        removed = []
        for checkpoint in sorted(self.folder.glob("checkpoint-*/")):
            hidden = self.folder / f"{PARTIAL_CHECKPOINT_PREFIX}{checkpoint.name}"
            shutil.rmtree(hidden, ignore_errors=True)
            os.replace(checkpoint, hidden)
            shutil.rmtree(hidden, ignore_errors=True)
            removed.append(checkpoint.name)
        return removed

    def trained_weights(self) -> str:
        """Where this run's trained weights are after a failed final save: its staging folder when the model there
        is whole (else that folder is removed), otherwise the newest complete checkpoint."""
        if checkpoint_problem(self.staging, record="config.json") is None:
            return f"in {self.staging}"
        shutil.rmtree(self.staging, ignore_errors=True)
        try:
            return f"in its checkpoint {find_checkpoint(self.folder, 'last')}"
        except DataError:
            return "lost (no complete checkpoint was saved)"

    @contextlib.contextmanager
    def keeping_trained_model(self, main: bool = True):
        """The end of a run (final save, test evaluation, commit): an OS error (a full disk, a folder that became
        unwritable) is one line saying what was kept and where the trained weights are; any other error keeps the
        staging folder and logs where it is before it propagates."""
        had_model = (self.folder / "config.json").is_file()
        try:
            yield
        except Exception as error:
            reason = storage_error(error) or (error.strerror if isinstance(error, OSError) else None)
            if not main:
                raise
            if reason is None:  # a bug, not the disk: its traceback follows; say where a whole model waits
                if checkpoint_problem(self.staging, record="config.json") is None:
                    logger.error("the run failed after its final save: the trained model is kept in %s", self.staging)
                raise
            previous = (f"the previous model in {self.folder} is unchanged; " if had_model
                        and (self.folder / "config.json").is_file() else "")
            raise DataError(f"{reason} while writing the final model to {self.folder}; {previous}this run's "
                            f"trained weights are {self.trained_weights()}") from error


__all__ = ["LOCK", "PARTIAL_CHECKPOINT_PREFIX", "RunFolder", "RunLock", "STAGING_PREFIX", "is_csekit_output"]
