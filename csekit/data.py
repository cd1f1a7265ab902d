"""The data folder and the plain-text readers every part of csekit shares, with one-line ``file:line`` errors.

The data folder (SentEval's ``senteval/downstream/...`` layout plus ``wiki/``, ``nli/``, ``clustering/``) is
``--data-dir`` when given, else the first folder that exists of: ``$CSEKIT_DATA_DIR``, ``data/`` in the source
checkout csekit runs from, and the user data folder ``~/.cache/csekit/data`` (where ``csekit download`` puts the
published corpora outside a checkout).
"""

import logging
import os
import re
from pathlib import Path
from typing import Iterator, Optional

from .errors import DataError

logger = logging.getLogger(__name__)

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# a source checkout (editable install or PYTHONPATH) has the design card's setup.cfg at its root; a wheel does not
CHECKOUT_ROOT = PACKAGE_ROOT if (PACKAGE_ROOT / "setup.cfg").is_file() else None
USER_DATA_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "csekit" / "data"
DATA_DIR_HELP = "Data folder (default: $CSEKIT_DATA_DIR, else ./data in a checkout, else ~/.cache/csekit/data)."


def default_data_dir() -> Path:
    """Where ``csekit download`` writes when no ``--data-dir`` is given: ``$CSEKIT_DATA_DIR``, else the checkout's
    ``data/``, else the user data folder."""
    if os.environ.get("CSEKIT_DATA_DIR"):
        return Path(os.environ["CSEKIT_DATA_DIR"])
    return CHECKOUT_ROOT / "data" if CHECKOUT_ROOT else USER_DATA_DIR


def resolve_data_dir(data_dir: Optional[str] = None) -> Path:
    """The folder holding ``senteval/``, ``wiki/``, ``nli/``, ``clustering/`` (see the module docstring)."""
    if data_dir:  # an explicit choice must exist; no silent fallback
        candidates = [Path(data_dir)]
    else:
        candidates = [Path(os.environ["CSEKIT_DATA_DIR"])] if os.environ.get("CSEKIT_DATA_DIR") else []
        if CHECKOUT_ROOT:
            candidates.append(CHECKOUT_ROOT / "data")
        candidates.append(USER_DATA_DIR)
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise DataError(f"no data folder found (tried: {tried}); pass --data-dir, set CSEKIT_DATA_DIR, or run "
                    "`csekit download senteval`")


def resolve_data_file(path: str, data_dir: Optional[str] = None) -> Path:
    """``path`` as given if it exists, else relative to the data folder."""
    if Path(path).exists():
        return Path(path)
    try:
        resolved = resolve_data_dir(data_dir) / path
    except DataError:
        resolved = Path(path)
    if not resolved.exists():
        raise DataError(f"{path}: no such file (also looked for {resolved})")
    return resolved


def read_lines(path: Path) -> Iterator[tuple]:
    """Yield ``(line_number, text)`` of a UTF-8 file, failing on the first undecodable line."""
    if path.is_dir():
        raise DataError(f"{path}: is a folder; give a file (one sentence a line, or sent0,sent1 CSV rows)")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise DataError(f"{path}:{number}: not valid UTF-8 ({error.reason} at byte {error.start})") from None


def read_sentences(path, limit: Optional[int] = None) -> list:
    """One sentence per line (unsupervised SimCSE's ``.txt``). Blank lines are skipped and counted in the log.

    With ``limit``, the first ``limit`` sentences, and the file is read no further."""
    path = Path(path)
    sentences, blank = [], 0
    for _, line in read_lines(path):
        if limit is not None and len(sentences) == limit:
            break
        if line.strip():
            sentences.append(line.strip())
        else:
            blank += 1
    if blank:
        logger.warning("%s: skipped %d blank line(s)", path, blank)
    if not sentences:
        raise DataError(f"{path}: no sentences (the file is empty or blank)")
    return sentences


def read_reference_corpus(path, limit: Optional[int] = None) -> list:
    """Sentences of a reference corpus: WikiText ``*.raw`` files are split into sentences (headings dropped, texts
    shorter than 10 characters omitted, as the extraction paper does for IsoScore); other files are one sentence per
    line (the first ``limit`` with ``limit``)."""
    path = Path(path)
    if path.suffix != ".raw":
        return read_sentences(path, limit)
    sentences = []
    for _, line in read_lines(path):
        line = line.strip()
        if not line or line.startswith("="):
            continue
        sentences += [s.strip() for s in re.split(r"(?<= [.!?]) ", line) if len(s.strip()) >= 10]
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences


__all__ = [
    "DATA_DIR_HELP", "DataError", "default_data_dir", "read_lines", "read_reference_corpus", "read_sentences",
    "resolve_data_dir",
    "resolve_data_file",
]
