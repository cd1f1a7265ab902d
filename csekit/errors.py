"""How csekit reports bad input: one line on stderr, exit status 2.

Input the user chose that cannot work (a data file, a model folder, a flag value, a full disk) is raised as
[`DataError`][csekit.errors.DataError] at the call site that knows why: the library errors of that site (transformers,
torch, PyYAML,
tarfile, the OS) are translated there, never by catching ``Exception``. [`report_errors`][csekit.errors.report_errors]
is the one boundary
every command and recipe runs in; any other exception is a bug and keeps its traceback. ``CSEKIT_DEBUG=1`` shows the
full traceback of every error, bad input included.
"""

import errno
import os
import re
import sys
from typing import Callable, Optional

# the OS errors of a disk that takes no more: full, over quota, read-only, failing
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


class DataError(ValueError):
    """Bad input: a data file, a model, a flag value. The message names the file (and line) or the flag and is meant
    to be shown as is, without a traceback."""


class OneLineUsageErrors:
    """Mix into an ``argparse.ArgumentParser`` class: a bad flag (unknown flag, bad choice or value) ends with one line
    ``PROG: error: MESSAGE (see PROG --help)`` and exit status 2, not the usage text first."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def storage_error(error: BaseException) -> Optional[str]:
    """What ``error`` says when the disk refused a write (full, over quota, read-only, an I/O error), else ``None``.
    Covers the OS's own errors and safetensors' (which reports the OS error inside its own exception type)."""
    if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS:
        return os.strerror(error.errno).lower()
    if type(error).__name__ == "SafetensorError":
        match = re.search(r"os error (\d+)", str(error))
        if match and int(match.group(1)) in STORAGE_ERRNOS:
            return os.strerror(int(match.group(1))).lower()
    return None


def report_errors(call: Callable[[], int]) -> int:
    """``call()``'s exit status; bad input (a [`DataError`][csekit.errors.DataError], a model folder's own refusal:
    [`csekit.modeling.errors`][csekit.modeling.errors], or a model config's validator refusing a value)
    becomes ``csekit: error: MESSAGE`` on stderr and status 2. With ``CSEKIT_DEBUG=1`` every error propagates."""
    from huggingface_hub.errors import StrictDataclassError

    from .modeling.errors import FolderInUse, LayoutDisagreement, TokenizerUnfit

    if os.environ.get("CSEKIT_DEBUG", "") not in ("", "0"):
        return call()
    try:
        return call()
    # (FolderInUse, LayoutDisagreement, TokenizerUnfit: a model folder's, csekit.modeling.errors)
    except (DataError, FolderInUse, LayoutDisagreement, TokenizerUnfit) as error:
        message = str(error)
    except StrictDataclassError as error:  # a @strict config's validator, e.g. an unknown pooler_type
        message = f"invalid model configuration: {error.__cause__ or error}"
    except Exception as error:  # a full disk where no call site said more (those that write models do)
        reason = storage_error(error)
        if reason is None:
            raise
        message = f"{reason} ({getattr(error, 'filename', None) or error}); free some space and run again"
    print(f"csekit: error: {' '.join(message.split())}", file=sys.stderr)
    return 2


__all__ = ["DataError", "OneLineUsageErrors", "STORAGE_ERRNOS", "report_errors", "storage_error"]
