"""Training data: locating the data folder and reading corpora with one-line, file-and-line error messages.

Nothing here downloads: every path is local. The data folder is ``--data-dir``, else ``$CSEKIT_DATA_DIR``, else
``./data`` in the repository, else ``../shared/data`` next to it.
"""

import csv
import logging
import os
from pathlib import Path
from typing import Optional

from datasets import Dataset

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
PAIR_COLUMNS = ("sent0", "sent1", "hard_neg")


class DataError(ValueError):
    """Bad input data; the message names the file (and line) and is meant to be shown as is."""


def resolve_data_dir(data_dir: Optional[str] = None) -> Path:
    """The folder holding ``senteval/``, ``wiki/``, ``nli/``, ``clustering/`` (see module docstring)."""
    candidates = [data_dir, os.environ.get("CSEKIT_DATA_DIR"), REPO_ROOT / "data", REPO_ROOT.parent / "shared" / "data"]
    if data_dir:  # an explicit choice must exist; no silent fallback
        candidates = [data_dir]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    tried = ", ".join(str(c) for c in candidates if c)
    raise DataError(f"no data folder found (tried: {tried}); pass --data-dir or set CSEKIT_DATA_DIR")


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


def _read_lines(path: Path):
    """Yield ``(line_number, text)`` of a UTF-8 file, failing on the first undecodable line."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise DataError(f"{path}:{number}: not valid UTF-8 ({error.reason} at byte {error.start})") from None


def read_sentences(path) -> list:
    """One sentence per line (unsupervised SimCSE's ``.txt``). Blank lines are skipped and counted."""
    path = Path(path)
    sentences, blank = [], 0
    for _, line in _read_lines(path):
        if line.strip():
            sentences.append(line.strip())
        else:
            blank += 1
    if blank:
        logger.warning("%s: skipped %d blank line(s)", path, blank)
    if not sentences:
        raise DataError(f"{path}: no sentences (the file is empty or blank)")
    return sentences


def read_pairs(path) -> dict:
    """A CSV with header ``sent0,sent1[,hard_neg]`` (supervised SimCSE). Returns columns as lists."""
    path = Path(path)
    lines = (line for _, line in _read_lines(path))
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise DataError(f"{path}: empty file, expected a header 'sent0,sent1[,hard_neg]'")
    header = [name.strip() for name in header]
    if header[:2] != ["sent0", "sent1"] or len(header) > 3 or (len(header) == 3 and header[2] != "hard_neg"):
        raise DataError(f"{path}:1: header is {','.join(header)!r}, expected 'sent0,sent1' or 'sent0,sent1,hard_neg'")
    columns = {name: [] for name in header}
    for row in reader:
        number = reader.line_num
        if not any(field.strip() for field in row):
            continue
        if len(row) != len(header):
            raise DataError(f"{path}:{number}: {len(row)} field(s), expected {len(header)} ({','.join(header)})")
        for name, field in zip(header, row):
            if not field.strip():
                raise DataError(f"{path}:{number}: empty {name}")
            columns[name].append(field.strip())
    if not columns["sent0"]:
        raise DataError(f"{path}: header only, no pairs")
    return columns


def load_training_dataset(path, min_examples: int = 1) -> Dataset:
    """A ``datasets.Dataset`` with column ``sent0`` (and ``sent1``/``hard_neg`` for pairs).

    ``.txt`` is read as unsupervised sentences, ``.csv`` as supervised pairs/triplets. ``min_examples`` is the
    global batch size: a corpus smaller than one batch cannot form a single contrastive step.
    """
    path = Path(path)
    if path.suffix == ".csv":
        columns = read_pairs(path)
    elif path.suffix in (".txt", ""):
        columns = {"sent0": read_sentences(path)}
    else:
        raise DataError(f"{path}: unsupported training file type {path.suffix!r} (use .txt sentences or .csv pairs)")
    count = len(columns["sent0"])
    if count < min_examples:
        raise DataError(f"{path}: {count} example(s), fewer than one batch of {min_examples}")
    return Dataset.from_dict(columns)
