"""Training data for the contrastive recipes, with one-line ``file:line`` (or ``dataset row``) errors.

``--train_file`` is one of:

* a ``.txt`` file: one sentence a line (unsupervised SimCSE); blank lines are skipped and counted;
* a ``.csv`` file with header ``sent0,sent1[,hard_neg]`` (supervised SimCSE), or ``sent0,sent1,hard_neg_1,...,
  hard_neg_k``: k hard negatives a row (sentence-transformers' n-tuples; ``csekit mine --output_format n-tuple``);
* a Hub dataset id (``org/name``, optionally ``org/name:config``), read with ``datasets.load_dataset`` through the
  Hugging Face cache (``HF_HUB_OFFLINE`` honoured). Its ``train`` split needs the columns of a file's header
  (``sent0[,sent1[,hard_neg]]``, or the n-tuple's) or a single ``text`` column (unsupervised).

Relative file paths are also looked up in the data folder.
"""

import csv
import hashlib
import json
import re
from pathlib import Path
from typing import Optional

from datasets import Dataset

from ..data import read_lines, read_sentences, resolve_data_dir
from ..errors import DataError
from .randomness import EXAMPLE_INDEX

PAIR_COLUMNS = ("sent0", "sent1", "hard_neg")
# a row's k hard negatives, hard_neg_1 .. hard_neg_k: the shape a trainer's data_columns names to take any k >= 1
NEGATIVES = "hard_neg_1..k"
NUMBERED_NEGATIVE = re.compile(r"hard_neg_([1-9][0-9]*)")
SHAPES = (("sent0",), ("sent0", "sent1"), ("sent0", "sent1", "hard_neg"), ("sent0", "sent1", NEGATIVES))
HUB_DATASET = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(:[\w.-]+)?")


def n_tuple_columns(k: int) -> tuple:
    """The columns of rows of ``k`` hard negatives: ``sent0, sent1, hard_neg_1, ..., hard_neg_k``."""
    return ("sent0", "sent1") + tuple(f"hard_neg_{i}" for i in range(1, k + 1))


# the key of a row's dataset prompt, set by several datasets' mix (multi_dataset.py) and read by the collators
DATASET_PROMPT = "dataset_prompt"


def text_columns(column_names) -> tuple:
    """The text columns among ``column_names``, in the order a trainer's views take them: ``sent0``, ``sent1``, then
    the hard negatives (``hard_neg``, or ``hard_neg_1``, ``hard_neg_2``... by number). Other columns are not texts."""
    names = set(column_names)
    numbered = sorted(int(match.group(1)) for match in map(NUMBERED_NEGATIVE.fullmatch, names) if match)
    return tuple(name for name in PAIR_COLUMNS if name in names) + tuple(f"hard_neg_{i}" for i in numbered)


def column_shape(columns: tuple) -> tuple:
    """The shape of text ``columns`` as a trainer's ``data_columns`` names it: ``sent0,sent1,hard_neg_1..hard_neg_k``
    (numbered from 1, none missing, no ``hard_neg`` beside them) is ``("sent0", "sent1", NEGATIVES)``; any other
    columns are their own shape."""
    numbered = tuple(name for name in columns if NUMBERED_NEGATIVE.fullmatch(name))
    if numbered and columns == n_tuple_columns(len(numbered)):
        return ("sent0", "sent1", NEGATIVES)
    return tuple(columns)


def read_pairs(path, limit: Optional[int] = None) -> dict:
    """A CSV with header ``sent0,sent1[,hard_neg]`` or ``sent0,sent1,hard_neg_1,...,hard_neg_k`` (supervised SimCSE).
    Returns columns as lists; with ``limit``, the first ``limit`` rows, and the file is read no further."""
    path = Path(path)
    lines = (line for _, line in read_lines(path))
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise DataError(f"{path}: empty file, expected a header 'sent0,sent1[,hard_neg]'")
    header = [name.strip() for name in header]
    if tuple(header) != text_columns(header) or column_shape(tuple(header)) not in SHAPES[1:]:
        raise DataError(f"{path}:1: header is {','.join(header)!r}, expected 'sent0,sent1', 'sent0,sent1,hard_neg' or "
                        "'sent0,sent1,hard_neg_1,...,hard_neg_k'")
    columns = {name: [] for name in header}
    for row in reader:
        if limit is not None and len(columns["sent0"]) == limit:
            break
        number = reader.line_num
        if not any(value.strip() for value in row):
            continue
        if len(row) != len(header):
            raise DataError(f"{path}:{number}: {len(row)} field(s), expected {len(header)} ({','.join(header)})")
        for name, value in zip(header, row):
            if not value.strip():
                raise DataError(f"{path}:{number}: empty {name}")
            columns[name].append(value.strip())
    if not columns["sent0"]:
        raise DataError(f"{path}: header only, no pairs")
    return columns


def read_hub_dataset(name: str) -> dict:
    """The ``train`` split of a Hub dataset as csekit columns (see the module docstring)."""
    import datasets
    from huggingface_hub import constants

    repo, _, config = name.partition(":")
    try:
        dataset = datasets.load_dataset(repo, config or None, split="train")
    except (FileNotFoundError, ConnectionError) as error:  # not on the Hub / not reachable and not cached
        offline = (" (HF_HUB_OFFLINE=1 is set and it is not in the datasets cache)" if constants.is_offline_mode()
                   else "")
        raise DataError(f"{name}: no such local file or Hub dataset{offline}: {str(error).splitlines()[0]}") from None
    except ValueError as error:  # e.g. an unknown config name
        raise DataError(f"{name}: {str(error).splitlines()[0]}") from None
    names = list(dataset.column_names)
    if names == ["text"] or ("text" in names and "sent0" not in names):
        header, source = ["sent0"], ["text"]
    else:
        header = list(text_columns(names))
        if column_shape(tuple(header)) not in SHAPES:
            raise DataError(f"{name} (train split): columns are {', '.join(names)}; expected sent0[,sent1[,hard_neg]], "
                            "sent0,sent1,hard_neg_1,...,hard_neg_k or text")
        source = header
    columns = {column: [] for column in header}
    for row_number, row in enumerate(dataset.select_columns(source), start=1):
        for column, key in zip(header, source):
            value = row[key]
            if not isinstance(value, str) or not value.strip():
                if header == ["sent0"]:  # unsupervised: an empty line is skipped, as in a .txt
                    break
                raise DataError(f"{name} (train split) row {row_number}: empty {key}")
            columns[column].append(value.strip())
    if not columns["sent0"]:
        raise DataError(f"{name} (train split): no examples")
    return columns


def load_training_dataset(train_file: str, data_dir: Optional[str] = None, min_examples: int = 1,
                          max_examples: Optional[int] = None) -> Dataset:
    """A ``datasets.Dataset`` with column ``sent0`` (and ``sent1``, hard negatives for pairs) from ``--train_file``, and
    ``example_index``, the row number.

    ``min_examples`` is the global batch size: a corpus smaller than one batch cannot form a single contrastive step.
    ``max_examples`` (``--max_train_samples``) keeps the first examples in file order, before any shuffling, so the
    first N sentences of the full wiki1m file and a file holding only those N are the same training data.
    """
    path = Path(train_file)
    if not path.exists():
        try:
            candidate = resolve_data_dir(data_dir) / train_file
        except DataError:
            candidate = path
        if candidate.exists():
            path = candidate
        elif HUB_DATASET.fullmatch(train_file) and path.suffix not in (".txt", ".csv"):
            columns = {name: values[:max_examples] for name, values in read_hub_dataset(train_file).items()}
            path = None
        else:
            raise DataError(f"{train_file}: no such file (also looked for {candidate})")
    if path is not None:
        if path.suffix == ".csv":
            columns = read_pairs(path, max_examples)
        elif path.suffix in (".txt", ""):
            columns = {"sent0": read_sentences(path, max_examples)}
        else:
            raise DataError(f"{path}: unsupported training file type {path.suffix!r} (use .txt sentences, .csv pairs "
                            "or a Hub dataset id)")
    count = len(columns["sent0"])
    if count < min_examples:
        raise DataError(f"{train_file}: {count} example(s), fewer than one batch of {min_examples}")
    # each row's number, from which its collator draws derive (randomness.py): a resumed run redraws them exactly
    return Dataset.from_dict({**columns, EXAMPLE_INDEX: list(range(count))})


def method_columns(column_names, data_columns: tuple, source: str, method: str) -> tuple:
    """The columns of ``column_names`` that ``method`` trains on (one of its trainer's ``data_columns``:
    ``("sent0",)``, ...), or a one-line [`DataError`][csekit.errors.DataError] naming ``source`` and what the method
    takes."""
    columns = text_columns(column_names)
    if column_shape(columns) not in data_columns:
        shapes = " or ".join(",".join(shape) for shape in data_columns)
        raise DataError(f"{source}: columns {','.join(columns) or 'none of ' + ','.join(PAIR_COLUMNS)}, but {method} "
                        f"trains on {shapes} (a .txt is one sentence a line)")
    return columns


def bad_text(value) -> Optional[str]:
    """Why ``value`` cannot be a training text (``None`` when it can): every text is a string with a word in it, as
    the file readers keep them (they skip or refuse blank lines)."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}, not a string"
    return None if value.strip() else "blank"


def check_rows(rows, columns: tuple, source: str, first: int = 1) -> None:
    """Every text of ``rows`` (examples as dicts) in ``columns`` is a non-empty string, or a one-line
    [`DataError`][csekit.errors.DataError] naming the row (counted from ``first``), the column and the value."""
    for number, row in enumerate(rows, start=first):
        for name in columns:
            problem = bad_text(row.get(name))
            if problem:
                raise DataError(f"{source} row {number}: {name} is {problem} ({row.get(name)!r}); every text must be "
                                "a non-empty string: drop or fill such rows (Dataset.filter) before training")


def dataset_column_names(dataset, source: str) -> list:
    """The column names of a training dataset (a ``datasets.Dataset``, a streaming ``IterableDataset`` whose names
    are read from its first example, or a dict of columns), or a one-line [`DataError`][csekit.errors.DataError] for
    what csekit cannot train on: nothing, a dict of datasets, a dataset with no example."""
    if dataset is None:
        raise DataError(f"{source}: none given; pass a datasets.Dataset with the method's columns")
    if isinstance(dataset, dict) and dataset and all(hasattr(value, "column_names") for value in dataset.values()):
        raise DataError(f"{source}: a dict of {len(dataset)} datasets ({', '.join(map(str, dataset))}); this "
                        "trainer trains on one dataset: pass one of them, or datasets.concatenate_datasets(...) of "
                        "those with the same columns")
    names = getattr(dataset, "column_names", None)
    if names is None and isinstance(dataset, dict):
        names = list(dataset)
    if names is None and hasattr(dataset, "__iter__"):  # a streaming dataset: its first example's keys
        first = next(iter(dataset), None)
        if first is None:
            raise DataError(f"{source}: no examples")
        names = list(first)
    if names is None:
        raise DataError(f"{source}: a {type(dataset).__name__}; pass a datasets.Dataset with the method's columns")
    return list(names)


def check_train_dataset(dataset, data_columns: tuple, examples_per_step: int, source: str = "train_dataset",
                        method: str = "this method") -> tuple:
    """The one check of a training dataset, which both doors run (``csekit train``'s
    [`check_run`][csekit.trainers.runner.check_run] and a trainer's ``train()``): its columns are one of the method's
    ``data_columns`` shapes, and, for a dataset of known size, it holds at least one step's ``examples_per_step``
    examples and each of their texts is a non-empty string ([`check_rows`][csekit.trainers.data.check_rows]; a
    streaming dataset's rows are checked as they are read). Returns the columns trained on."""
    columns = method_columns(dataset_column_names(dataset, source), data_columns, source, method)
    if not hasattr(dataset, "__len__"):
        return columns
    count = len(dataset[columns[0]]) if isinstance(dataset, dict) else len(dataset)
    if count < examples_per_step:
        raise DataError(f"{source}: {count} example(s), fewer than one step's batch of {examples_per_step}")
    table = {name: list(dataset[name]) for name in columns}
    check_rows(({name: table[name][i] for name in columns} for i in range(count)), columns, source)
    return columns


def data_fingerprint(columns) -> str:
    """``"sha256:<hex>, N examples"`` of the training examples as read (every text column of ``columns``, a
    ``Dataset`` or a dict of lists, in order, after ``--max_train_samples``): the run record holds it, so a resume on
    other data under the same ``--train_file`` is refused (the first N lines of a file and a file of those N lines
    are the same data, and the same hash)."""
    names = text_columns(getattr(columns, "column_names", None) or columns)
    digest = hashlib.sha256()
    for name in names:
        digest.update(json.dumps([name, list(columns[name])], ensure_ascii=False).encode("utf-8"))
    return f"sha256:{digest.hexdigest()}, {len(columns[names[0]])} examples"


__all__ = ["NEGATIVES", "PAIR_COLUMNS", "SHAPES", "bad_text", "check_rows", "check_train_dataset", "column_shape",
           "data_fingerprint", "dataset_column_names", "load_training_dataset", "method_columns", "n_tuple_columns",
           "read_hub_dataset", "read_pairs", "text_columns"]
