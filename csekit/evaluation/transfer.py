"""SentEval-style transfer (classification) tasks with scikit-learn logistic regression on frozen embeddings.

Tasks (``senteval/downstream``): MR, CR, SUBJ, MPQA (10-fold stratified cross-validation, no test split), SST-2,
SST-5, TREC (train -> test), MRPC and SICK-E (sentence pairs, features ``[|u - v|, u * v]`` as SentEval, train ->
test). SST-5 and SICK-E are scored when their files are present. Score: accuracy x100.

Deviation from SentEval, for CPU cost: no inner grid search of the L2 strength; every task uses
``StandardScaler + LogisticRegression(C=1)`` (scaling makes one C reasonable across models whose vector scales differ
by orders of magnitude, e.g. random embeddings). ``max_train`` caps the training examples per task (a seeded
stratified subsample; for cross-validation tasks the whole task), for quick runs.

    evaluator = TransferEvaluator(data_dir)
    results = evaluator(embed)        # {"MR": 77.1, ..., "avg": ...}
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from tqdm.auto import tqdm

from ..errors import DataError

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
OPTIONAL_TRANSFER_TASKS = ("SST5", "SICKEntailment")
CV_FOLDS = 10
BINARY_FILES = {
    "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "CR": ("CR/custrev.pos", "CR/custrev.neg"),
    "SUBJ": ("SUBJ/subj.objective", "SUBJ/subj.subjective"),
    "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
SICK_LABELS = {"NEUTRAL": 0, "ENTAILMENT": 1, "CONTRADICTION": 2}


@dataclass
class TransferTask:
    """Texts plus labels; ``pairs`` tasks index two texts per example. ``test`` is None for cross-validation."""

    name: str
    texts: list
    train: tuple  # (example_rows, labels): rows are text indices, (n,) or (n, 2) for pairs
    test: Optional[tuple] = None


def _lines(path: Path) -> list:
    if not path.is_file():
        raise DataError(f"{path}: no such file (is --data-dir pointing at a folder with senteval/downstream?)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:  # TREC (and SentEval's MR/CR copies) are latin-1, as SentEval reads them
        text = raw.decode("latin-1")
    return [line.rstrip("\r\n") for line in text.splitlines() if line.strip()]


class _Texts:
    """Deduplicating text table: every unique sentence is embedded once."""

    def __init__(self):
        self.index = {}

    def add(self, text: str) -> int:
        return self.index.setdefault(" ".join(text.split()), len(self.index))

    def texts(self) -> list:
        return list(self.index)


def load_transfer_task(downstream: Path, name: str) -> TransferTask:
    table = _Texts()
    if name in BINARY_FILES:
        rows, labels = [], []
        for label, file in zip((1, 0), BINARY_FILES[name]):
            for line in _lines(downstream / file):
                rows.append(table.add(line))
                labels.append(label)
        return TransferTask(name, table.texts(), (np.asarray(rows), np.asarray(labels)))

    def split(lines, parse):
        rows, labels = [], []
        for number, line in enumerate(lines, start=1):
            try:
                row, label = parse(line)
            except (ValueError, IndexError, KeyError):
                raise DataError(f"{name}: malformed line {number}: {line[:80]!r}") from None
            rows.append(row)
            labels.append(label)
        return np.asarray(rows), np.asarray(labels)

    if name == "SST2":
        def parse(line):
            text, label = line.rsplit("\t", 1)
            return table.add(text), int(label)
        folder = downstream / "SST" / "binary"
        train = split(_lines(folder / "sentiment-train"), parse)
        test = split(_lines(folder / "sentiment-test"), parse)
    elif name == "SST5":
        def parse(line):
            label, text = line.split(" ", 1)
            return table.add(text), int(label)
        folder = downstream / "SST" / "fine"
        train = split(_lines(folder / "sentiment-train"), parse)
        test = split(_lines(folder / "sentiment-test"), parse)
    elif name == "TREC":
        def parse(line):
            label, text = line.split(" ", 1)
            return table.add(text), label.split(":")[0]
        train = split(_lines(downstream / "TREC" / "train_5500.label"), parse)
        test = split(_lines(downstream / "TREC" / "TREC_10.label"), parse)
    elif name == "MRPC":
        def parse(line):
            fields = line.split("\t")
            return (table.add(fields[3]), table.add(fields[4])), int(fields[0])
        train = split(_lines(downstream / "MRPC" / "msr_paraphrase_train.txt")[1:], parse)
        test = split(_lines(downstream / "MRPC" / "msr_paraphrase_test.txt")[1:], parse)
    elif name == "SICKEntailment":
        def parse(line):
            fields = line.split("\t")
            return (table.add(fields[1]), table.add(fields[2])), SICK_LABELS[fields[4].strip()]
        train = split(_lines(downstream / "SICK" / "SICK_train.txt")[1:], parse)
        test = split(_lines(downstream / "SICK" / "SICK_test_annotated.txt")[1:], parse)
    else:
        choices = ", ".join(TRANSFER_TASKS + OPTIONAL_TRANSFER_TASKS)
        raise DataError(f"unknown transfer task {name!r}; choose from {choices}")
    return TransferTask(name, table.texts(), train, test)


def _features(vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
    if rows.ndim == 1:
        return vectors[rows]
    u, v = vectors[rows[:, 0]], vectors[rows[:, 1]]
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def _classifier(seed: int):
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=seed))


def _subsample(rows, labels, max_train: Optional[int], seed: int):
    if max_train is None or len(labels) <= max_train:
        return rows, labels
    rows, _, labels, _ = train_test_split(rows, labels, train_size=max_train, stratify=labels, random_state=seed)
    return rows, labels


def restrict_task(task: TransferTask, max_train: Optional[int], seed: int = 1111) -> TransferTask:
    """The task with at most ``max_train`` training examples and only the texts still used (fewer to embed)."""
    train_rows, train_labels = _subsample(*task.train, max_train, seed)
    test = task.test
    used = np.unique(np.concatenate([train_rows.ravel()] + ([] if test is None else [test[0].ravel()])))
    remap = np.full(len(task.texts), -1)
    remap[used] = np.arange(len(used))
    test = None if test is None else (remap[test[0]], test[1])
    return TransferTask(task.name, [task.texts[i] for i in used], (remap[train_rows], train_labels), test)


def score_task(task: TransferTask, vectors: np.ndarray, seed: int = 1111) -> float:
    """Accuracy x100 of logistic regression on ``vectors`` (rows aligned with ``task.texts``)."""
    rows, labels = task.train
    if task.test is not None:
        model = _classifier(seed).fit(_features(vectors, rows), labels)
        test_rows, test_labels = task.test
        return float(100 * model.score(_features(vectors, test_rows), test_labels))
    folds = StratifiedKFold(n_splits=CV_FOLDS, shuffle=True, random_state=seed)
    scores = []
    for train_index, test_index in folds.split(rows, labels):
        model = _classifier(seed).fit(_features(vectors, rows[train_index]), labels[train_index])
        scores.append(model.score(_features(vectors, rows[test_index]), labels[test_index]))
    return float(100 * np.mean(scores))


class TransferEvaluator:
    """Accuracy on transfer tasks. ``embed`` is called once per task with all its unique texts.

    Args:
        data_dir: folder containing ``senteval/downstream``.
        tasks: default: the 7 standard tasks plus SST-5 and SICK-E when their files exist.
        max_train: cap on training examples per task (see module docstring); None uses all.
    """

    def __init__(self, data_dir, tasks: Optional[Sequence[str]] = None, max_train: Optional[int] = None):
        downstream = Path(data_dir) / "senteval" / "downstream"
        if tasks is None:
            present = {"SST5": downstream / "SST" / "fine", "SICKEntailment": downstream / "SICK" / "SICK_train.txt"}
            tasks = TRANSFER_TASKS + tuple(name for name, path in present.items() if path.exists())
        if max_train is not None and max_train < CV_FOLDS * 2:
            raise DataError(f"max_train must be at least {CV_FOLDS * 2}, got {max_train}")
        self.tasks = {name: restrict_task(load_transfer_task(downstream, name), max_train) for name in tasks}

    def evaluate_task(self, name: str, embed: Callable[[list], np.ndarray]) -> float:
        task = self.tasks[name]
        return round(score_task(task, np.asarray(embed(task.texts), dtype=np.float64)), 2)

    def __call__(self, embed: Callable[[list], np.ndarray]) -> dict:
        results = {name: self.evaluate_task(name, embed) for name in tqdm(self.tasks, desc="Transfer", leave=False)}
        results["avg"] = round(float(np.mean(list(results.values()))), 2)
        return results


__all__ = [
    "OPTIONAL_TRANSFER_TASKS",
    "TRANSFER_TASKS",
    "TransferEvaluator",
    "load_transfer_task",
    "restrict_task",
    "score_task",
]
