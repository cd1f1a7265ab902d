"""SentEval transfer (classification) tasks: a classifier trained on frozen embeddings, accuracy x100.

Tasks (``senteval/downstream``), as in the extraction paper (Stankevičius & Lukoševičius 2024, Section 3.5.3):

* MR, CR, SUBJ, MPQA: one pool, no split;
* SST-2, SST-5, SICK-E: train / dev / test;  TREC, MRPC: train / test;
* SICK-R, STS-B "with classification" (scores split into 5 soft classes): train / dev / test, scored by the test
  Pearson x100 of the expected score, as SentEval reports them.

Pair tasks use SentEval's features ``[|u - v|, u * v]`` (``mrpc.py`` L83, ``sick.py`` L87/L190).

``protocol="senteval"`` (default) is SentEval's scikit-learn path (``usepytorch=False``; facebookresearch/SentEval
@5d6dc11 ``senteval/tools/validation.py``) with the paper's 10 folds, on the raw, unscaled features:

* no split (``InnerKFoldClassifier``, L57-107): 10 outer stratified folds; on each outer-train, C is the argmax of the
  mean accuracy of 10 inner folds over C in 2^-2..2^3; refit there, score the outer fold. Reported: the mean of
  the 10 outer-fold accuracies, each rounded to 2 decimals (L103-106).
* train / test (``KFoldClassifier``, L126-181): C in 2^-1..2^5 by 10-fold CV on train, refit on all of train, score
  test.
* train / dev / test (``SplitClassifier``, L202-246): C in 2^-2..2^3 by dev accuracy, score test at that C.

Folds are ``StratifiedKFold(10, shuffle=True, random_state=1111)`` (L63-65, L132), and mean CV accuracies are
rounded to 2 decimals before the argmax (first best, smallest C, on ties: L87-88, L157-162, L222-226). One grid
C = 2^-2..2^3 for every task would not be SentEval's: TREC and MRPC use 2^-1..2^5.

* samples are in SentEval's order, which fixes the fold assignment: each split sorted (stable) by (number of
  whitespace tokens, label), pairs by (tokens of A, tokens of B, label) (``binary.py`` L40-41, ``trec.py`` L50-56,
  ``mrpc.py`` L61-64, ``sst.py`` L64-66, ``sick.py`` L65-68), with SentEval's label ids, and blank lines kept as empty
  sentences (``binary.py`` L35: CR has 3,775 texts and MPQA 10,606, as the paper's Table 3).
* the classifier is ``LogisticRegression(C, random_state=1111)`` (L84), whose default solver was liblinear (OvR)
  in SentEval's day and is lbfgs (multinomial) since scikit-learn 0.22 and in the paper's 2023 runs. We use lbfgs,
  solved to convergence (``max_iter`` 10,000 rather than the default 100, which stops short on unscaled features),
  so the fit is the unique optimum of the L2-regularised loss. Features are float64. The C grid is walked upwards
  with warm starts (the same optima, reached in fewer iterations); the model at the chosen C is then refitted from
  scratch, as SentEval does, so the last digits of the solver match too.
* SICK-R / STS-B (``tools/relatedness.py``, always pytorch in SentEval): ``Linear(2d, 5) + Softmax`` trained with
  Adam (lr 1e-3, no weight decay) on the MSE to SentEval's soft labels (``sick.py`` L123-134, a score 3.6 is 0.4 of
  class 3 and 0.6 of class 4), batches of 64, rounds of 50 epochs, keeping the round with the best dev Pearson of the
  expected score ``p . [1..5]`` and stopping at the fourth round without a new best (L84-97); seed 1111 (numpy
  permutations, torch init), float32 on the CPU. Under torch >= 1.0 SentEval's ``size_average = False`` set after
  construction has no effect, so the loss is the batch mean (Adam makes the two almost identical).

Texts are embedded once per distinct sentence (whitespace-normalised), the paper's per-occurrence order only
decides the folds. MRPC's F1 is not reported. Cost for all-MiniLM-L6-v2 on every task: see benchmarks/RESULTS.md.

``protocol="simcse"`` is SentEval's PyTorch path as SimCSE's ``evaluation.py --mode test`` runs it (``usepytorch``,
``kfold`` 10, Adam, batch 64, tenacity 5, epoch_size 4; L2 weight in 10^-5..10^-2), the classifier of the SimCSE and
WhitenedCSE transfer tables: `csekit.evaluation.pytorch_logreg`. Its default tasks are SimCSE's 7.

``protocol="fast"`` is csekit's earlier shortcut, kept for quick runs: ``StandardScaler + LogisticRegression(C=1)``,
no search, train -> test (dev ignored), file order with blank lines dropped, and by default the 9 tasks it used
(no SICK-R / STS-B), so its numbers are those recorded before the SentEval protocol existed. Scaling makes z-score
post-processing a no-op there.

``max_train`` caps the training examples per task (a seeded stratified subsample; for no-split tasks the whole task;
dev and test are kept whole), for quick runs.

    evaluator = TransferEvaluator(data_dir)
    results = evaluator(embed)        # {"MR": 77.1, ..., "avg": ...}
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
from joblib import Parallel, delayed
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from tqdm.auto import tqdm

from ..errors import DataError
from .protocol import TRANSFER_PROTOCOLS
from .sts import load_sts_split

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
OPTIONAL_TRANSFER_TASKS = ("SST5", "SICKEntailment")
RELATEDNESS_TASKS = ("SICKRelatedness", "STSBenchmark")
PROTOCOLS = TRANSFER_PROTOCOLS
CV_FOLDS = 10
SEED = 1111
SPLIT_GRID = tuple(2.0**t for t in range(-2, 4))  # InnerKFoldClassifier and SplitClassifier: validation.py L61, L205
KFOLD_GRID = tuple(2.0**t for t in range(-1, 6))  # KFoldClassifier (TREC, MRPC): validation.py L130-131
MAX_ITER = 10_000
BINARY_FILES = {
    "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
    "CR": ("CR/custrev.pos", "CR/custrev.neg"),
    "SUBJ": ("SUBJ/subj.objective", "SUBJ/subj.subjective"),
    "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
}
TREC_LABELS = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}  # trec.py L35-36
SICK_LABELS = {"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2}  # sick.py L147


@dataclass
class TransferTask:
    """Texts plus labelled splits ``(example_rows, labels)``: rows index ``texts``, shape (n,) or (n, 2) for pairs.

    ``test`` is None for no-split tasks (cross-validation); ``dev`` selects C where the task has one."""

    name: str
    texts: list
    train: tuple
    test: Optional[tuple] = None
    dev: Optional[tuple] = None


def _lines(path: Path, keep_blank: bool = False) -> list:
    if not path.is_file():
        raise DataError(f"{path}: no such file (is --data-dir pointing at a folder with senteval/downstream?)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:  # TREC (and SentEval's MR/CR copies) are latin-1, as SentEval reads them
        text = raw.decode("latin-1")
    return [line.rstrip("\r\n") for line in text.splitlines() if keep_blank or line.strip()]


class _Texts:
    """Deduplicating text table: every unique sentence is embedded once."""

    def __init__(self):
        self.index = {}

    def add(self, text: str) -> int:
        return self.index.setdefault(" ".join(text.split()), len(self.index))

    def texts(self) -> list:
        return list(self.index)


def _senteval_order(split: tuple, texts: list) -> tuple:
    """SentEval's stable sort by (tokens, label), pairs by (tokens of A, tokens of B, label)."""
    rows, labels = split
    lengths = np.asarray([len(text.split()) for text in texts])[rows]
    keys = [(*np.atleast_1d(length).tolist(), label) for length, label in zip(lengths, labels.tolist())]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    return rows[order], labels[order]


def load_transfer_task(downstream: Path, name: str, protocol: str = "senteval") -> TransferTask:
    """A task as ``protocol`` sees it: SentEval's (blank lines, dev split, sorted) or the fast one's (see module)."""
    senteval = protocol == "senteval"
    table = _Texts()
    if name in BINARY_FILES:
        rows, labels = [], []
        for label, file in zip((1, 0), BINARY_FILES[name]):
            for line in _lines(downstream / file, keep_blank=senteval):
                rows.append(table.add(line))
                labels.append(label)
        train = (np.asarray(rows), np.asarray(labels))
        return TransferTask(name, table.texts(), _senteval_order(train, table.texts()) if senteval else train)

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

    dev = None
    if name in ("SST2", "SST5"):
        def parse(line):
            if name == "SST2":
                text, label = line.rsplit("\t", 1)
            else:
                label, text = line.split(" ", 1)
            return table.add(text), int(label)
        folder = downstream / "SST" / ("binary" if name == "SST2" else "fine")
        train = split(_lines(folder / "sentiment-train"), parse)
        dev = split(_lines(folder / "sentiment-dev"), parse) if senteval else None
        test = split(_lines(folder / "sentiment-test"), parse)
    elif name == "TREC":
        def parse(line):
            label, text = line.split(" ", 1)
            return table.add(text), TREC_LABELS[label.split(":")[0]]
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
        folder = downstream / "SICK"
        train = split(_lines(folder / "SICK_train.txt")[1:], parse)
        dev = split(_lines(folder / "SICK_trial.txt")[1:], parse) if senteval else None
        test = split(_lines(folder / "SICK_test_annotated.txt")[1:], parse)
    elif name in RELATEDNESS_TASKS:
        def pairs(part):
            data = load_sts_split(downstream, name, part)
            rows = [(table.add(a), table.add(b)) for a, b in zip(data.sentences1, data.sentences2)]
            return np.asarray(rows), data.scores
        train, dev, test = pairs("train"), pairs("dev"), pairs("test")
    else:
        choices = ", ".join(TRANSFER_TASKS + OPTIONAL_TRANSFER_TASKS + RELATEDNESS_TASKS)
        raise DataError(f"unknown transfer task {name!r}; choose from {choices}")
    texts = table.texts()
    if senteval:
        train, test = _senteval_order(train, texts), _senteval_order(test, texts)
        dev = None if dev is None else _senteval_order(dev, texts)
    return TransferTask(name, texts, train, test, dev)


def _features(vectors: np.ndarray, rows: np.ndarray) -> np.ndarray:
    if rows.ndim == 1:
        return vectors[rows]
    u, v = vectors[rows[:, 0]], vectors[rows[:, 1]]
    return np.concatenate([np.abs(u - v), u * v], axis=1)


def _subsample(rows, labels, max_train: Optional[int], seed: int):
    if max_train is None or len(labels) <= max_train:
        return rows, labels
    rows, _, labels, _ = train_test_split(rows, labels, train_size=max_train, stratify=labels, random_state=seed)
    return rows, labels


def restrict_task(task: TransferTask, max_train: Optional[int], seed: int = SEED) -> TransferTask:
    """The task with at most ``max_train`` training examples and only the texts still used (fewer to embed)."""
    if task.name in RELATEDNESS_TASKS and max_train is not None and len(task.train[1]) > max_train:
        keep = np.sort(np.random.default_rng(seed).choice(len(task.train[1]), max_train, replace=False))
        train_rows, train_labels = task.train[0][keep], task.train[1][keep]  # real-valued scores: not stratified
    else:
        train_rows, train_labels = _subsample(*task.train, max_train, seed)
    splits = [split for split in (task.test, task.dev) if split is not None]
    used = np.unique(np.concatenate([train_rows.ravel()] + [rows.ravel() for rows, _ in splits]))
    remap = np.full(len(task.texts), -1)
    remap[used] = np.arange(len(used))
    test, dev = ((None if s is None else (remap[s[0]], s[1])) for s in (task.test, task.dev))
    return TransferTask(task.name, [task.texts[i] for i in used], (remap[train_rows], train_labels), test, dev)


# ----------------------------------------------------------------------------------------------- SentEval protocol

def _fit_path(x, y, grid, seed, evaluate):
    """``[evaluate(model) for C in grid]`` with one warm-started lbfgs model walked up the (ascending) grid."""
    model = LogisticRegression(random_state=seed, max_iter=MAX_ITER, warm_start=True)
    return [evaluate(model.set_params(C=c).fit(x, y)) for c in grid]


class SklearnClassifier:
    """The ``senteval`` protocol's classifier (``usepytorch=False``): ``LogisticRegression(C, random_state=seed)``
    on the float64 features. The C searches walk one warm-started fit up the grid (the same optima, fewer
    iterations); the final model is refitted from scratch at the chosen C, as SentEval does (L97-101, L175-178,
    L238-243)."""

    grids = {"inner_kfold": SPLIT_GRID, "kfold": KFOLD_GRID, "split": SPLIT_GRID}

    def __init__(self, seed: int = SEED):
        self.seed = seed

    def grid_accuracies(self, x, y, x_eval, y_eval, grid) -> list:
        return _fit_path(x, y, grid, self.seed, lambda model: model.score(x_eval, y_eval))

    def final(self, x, y, c, dev=None) -> LogisticRegression:
        return LogisticRegression(C=c, random_state=self.seed, max_iter=MAX_ITER).fit(x, y)


def _fold_accuracies(classifier, x, y, train, test, grid) -> list:
    return classifier.grid_accuracies(x[train], y[train], x[test], y[test], grid)


def _cv_choose(classifier, x, y, folds, grid, n_jobs) -> float:
    """SentEval's C / L2 weight: the argmax of the fold-mean accuracy x100 rounded to 2 decimals (first best)."""
    accuracies = Parallel(n_jobs=n_jobs)(delayed(_fold_accuracies)(classifier, x, y, *fold, grid) for fold in folds)
    return grid[int(np.argmax(np.round(100 * np.mean(accuracies, axis=0), 2)))]


def _stratified_folds(x, y, seed):
    return list(StratifiedKFold(n_splits=CV_FOLDS, shuffle=True, random_state=seed).split(x, y))


def _inner_kfold_accuracy(classifier, x, y, n_jobs) -> float:
    """``InnerKFoldClassifier`` (validation.py L57-107); both fold generators are seeded 1111 there (L63-65)."""
    scores, grid = [], classifier.grids["inner_kfold"]
    for train, test in _stratified_folds(x, y, SEED):
        choice = _cv_choose(classifier, x[train], y[train], _stratified_folds(x[train], y[train], SEED), grid, n_jobs)
        scores.append(round(100 * classifier.final(x[train], y[train], choice).score(x[test], y[test]), 2))
    return round(float(np.mean(scores)), 2)


def _kfold_accuracy(classifier, x, y, x_test, y_test, seed, n_jobs) -> float:
    """``KFoldClassifier`` (validation.py L126-181): C by 10-fold CV on train, refit on train, score test."""
    choice = _cv_choose(classifier, x, y, _stratified_folds(x, y, seed), classifier.grids["kfold"], n_jobs)
    return round(100 * classifier.final(x, y, choice).score(x_test, y_test), 2)


def _split_accuracy(classifier, x, y, x_dev, y_dev, x_test, y_test) -> float:
    """``SplitClassifier`` (validation.py L202-246): C by dev accuracy, refit at that C, test accuracy."""
    grid = classifier.grids["split"]
    dev = [round(100 * accuracy, 2) for accuracy in classifier.grid_accuracies(x, y, x_dev, y_dev, grid)]
    choice = grid[int(np.argmax(dev))]
    return round(100 * classifier.final(x, y, choice, dev=(x_dev, y_dev)).score(x_test, y_test), 2)


def encode_relatedness(scores: np.ndarray, classes: int = 5) -> np.ndarray:
    """SentEval's soft labels (``sick.py`` L123-134, from Tai et al.): class ``floor(y)`` (1-based) gets ``floor(y)
    - y + 1``, class ``floor(y) + 1`` gets ``y - floor(y)``; classes outside 1..5 are dropped, as there."""
    floor = np.floor(scores)
    labels = np.zeros((len(scores), classes), dtype=np.float32)
    for i in range(classes):
        labels[:, i] = np.where(i + 1 == floor + 1, scores - floor, 0) + np.where(i + 1 == floor, floor - scores + 1, 0)
    return labels


def relatedness_pearson(x, y, x_dev, y_dev, x_test, y_test, seed: int = SEED, round_epochs: int = 50,
                        max_epochs: int = 1000, patience: int = 3) -> float:
    """Test Pearson x100 of SentEval's ``RelatednessPytorch`` (tools/relatedness.py L23-134), see module docstring."""
    import torch
    from scipy.stats import pearsonr

    rng = np.random.RandomState(seed)  # SentEval seeds the global numpy RNG and draws permutations from it
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 5), torch.nn.Softmax(dim=-1))
    optimizer = torch.optim.Adam(model.parameters(), weight_decay=0.0)
    inputs, targets = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(encode_relatedness(y))
    classes = np.arange(1, 6)

    def expected(features):
        with torch.no_grad():
            return model(torch.as_tensor(features, dtype=torch.float32)).numpy() @ classes

    best, best_state, misses, epoch = -1.0, None, 0, 0
    while epoch <= max_epochs:
        for _ in range(round_epochs):
            permutation = torch.as_tensor(rng.permutation(len(inputs)))
            for start in range(0, len(inputs), 64):
                batch = permutation[start:start + 64]
                loss = torch.nn.functional.mse_loss(model(inputs[batch]), targets[batch])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        epoch += round_epochs
        pearson = np.nan_to_num(pearsonr(expected(x_dev), y_dev)[0])
        if pearson > best:
            best, best_state = pearson, {k: v.clone() for k, v in model.state_dict().items()}
        else:  # SentEval never resets this count: the 4th round without a new best stops
            if misses >= patience:
                break
            misses += 1
    model.load_state_dict(best_state)
    return round(100 * float(np.nan_to_num(pearsonr(expected(x_test), y_test)[0])), 2)


# ------------------------------------------------------------------------------------------------------ scoring

def _fast_accuracy(task: TransferTask, vectors: np.ndarray, seed: int) -> float:
    """The ``fast`` protocol: StandardScaler + C=1, train -> test or 10-fold CV (fold accuracies unrounded)."""
    def classifier():
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=seed))

    rows, labels = task.train
    if task.test is not None:
        model = classifier().fit(_features(vectors, rows), labels)
        test_rows, test_labels = task.test
        return float(100 * model.score(_features(vectors, test_rows), test_labels))
    scores = []
    for train_index, test_index in _stratified_folds(rows, labels, seed):
        model = classifier().fit(_features(vectors, rows[train_index]), labels[train_index])
        scores.append(model.score(_features(vectors, rows[test_index]), labels[test_index]))
    return float(100 * np.mean(scores))


def score_task(task: TransferTask, vectors: np.ndarray, protocol: str = "senteval", seed: int = SEED,
               n_jobs: int = 1, device=None) -> float:
    """Accuracy x100 (Pearson x100 for SICK-R / STS-B) of ``vectors`` (rows aligned with ``task.texts``).

    ``n_jobs`` runs the cross-validation folds of a C search in parallel (joblib); ``device`` is where the
    ``simcse`` protocol's classifier trains (default: the CPU)."""
    if protocol not in PROTOCOLS:
        raise DataError(f"unknown transfer protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    if protocol == "fast" and task.name not in RELATEDNESS_TASKS:
        return _fast_accuracy(task, vectors, seed)
    train, dev, test = (None if split is None else (_features(vectors, split[0]), split[1])
                        for split in (task.train, task.dev, task.test))
    if task.name in RELATEDNESS_TASKS:
        return relatedness_pearson(*train, *dev, *test, seed=seed)
    if protocol == "simcse":
        from .pytorch_logreg import PyTorchClassifier

        labels = np.concatenate([split[1] for split in (task.train, task.dev, task.test) if split is not None])
        classifier = PyTorchClassifier(int(labels.max()) + 1, seed, device)
    else:
        classifier = SklearnClassifier(seed)
    if test is None:
        return _inner_kfold_accuracy(classifier, *train, n_jobs)
    if dev is None:
        return _kfold_accuracy(classifier, *train, *test, seed, n_jobs)
    return _split_accuracy(classifier, *train, *dev, *test)


def _check_folds(task: TransferTask) -> None:
    """SentEval's 10-fold searches need every class in every (inner) training set 10 times: fail early, not mid-run."""
    if task.name in RELATEDNESS_TASKS or task.dev is not None:
        return
    counts = np.unique(task.train[1], return_counts=True)[1]
    if task.test is None:  # inner folds split an outer-train, which lacks about a tenth of each class
        counts = counts - np.ceil(counts / CV_FOLDS)
    if counts.min() < CV_FOLDS:
        raise DataError(f"{task.name}: a class has too few training examples for SentEval's {CV_FOLDS}-fold search "
                        "(raise --transfer-max-train or use --transfer-protocol fast)")


class TransferEvaluator:
    """Accuracy on transfer tasks. ``embed`` is called once per task with all its unique texts.

    Args:
        data_dir: folder containing ``senteval/downstream``.
        tasks: default: the 7 standard tasks plus SST-5, SICK-E, SICK-R and STS-B when their files exist (``fast``:
            without SICK-R and STS-B, as before; ``simcse``: the 7).
        max_train: cap on training examples per task (see module docstring); None uses all.
        protocol: ``senteval`` (SentEval's scikit-learn protocol), ``simcse`` (SentEval's PyTorch classifier as
            SimCSE's evaluation.py runs it) or ``fast`` (see module docstring).
        n_jobs: parallel folds in the C search (joblib; 1 = none).
        device: where the ``simcse`` classifier trains (default: the CPU).
    """

    def __init__(self, data_dir, tasks: Optional[Sequence[str]] = None, max_train: Optional[int] = None,
                 protocol: str = "senteval", n_jobs: int = 1, device=None):
        if protocol not in PROTOCOLS:
            raise DataError(f"unknown transfer protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
        downstream = Path(data_dir) / "senteval" / "downstream"
        if tasks is None and protocol == "simcse":
            tasks = TRANSFER_TASKS  # evaluation.py's transfer tasks
        if tasks is None:
            present = {"SST5": downstream / "SST" / "fine", "SICKEntailment": downstream / "SICK" / "SICK_train.txt"}
            if protocol == "senteval":
                present.update({"SICKRelatedness": present["SICKEntailment"],
                                "STSBenchmark": downstream / "STS" / "STSBenchmark" / "sts-train.csv"})
            tasks = TRANSFER_TASKS + tuple(name for name, path in present.items() if path.exists())
        if max_train is not None and max_train < CV_FOLDS * 2:
            raise DataError(f"max_train must be at least {CV_FOLDS * 2}, got {max_train}")
        self.protocol, self.n_jobs, self.device, self.max_train = protocol, n_jobs, device, max_train
        self.tasks = {name: restrict_task(load_transfer_task(downstream, name, protocol), max_train) for name in tasks}
        if protocol != "fast":
            for task in self.tasks.values():
                _check_folds(task)

    def fingerprint(self) -> dict:
        """The protocol of these scores: classifier protocol, cap, and per task its split sizes and content hash."""
        from .protocol import content_hash

        tasks = {}
        for name, task in self.tasks.items():
            splits = {"train": task.train, "dev": task.dev, "test": task.test}
            tasks[name] = {split: len(value[1]) for split, value in splits.items() if value is not None}
            examples = [[task.texts[i] for i in np.ravel(value[0])] + np.asarray(value[1]).tolist()
                        for value in splits.values() if value is not None]
            tasks[name]["sha256"] = content_hash(*examples)
        return {"protocol": self.protocol, "max_train": self.max_train, "tasks": tasks}

    def evaluate_task(self, name: str, embed: Callable[[list], np.ndarray]) -> float:
        task = self.tasks[name]
        vectors = np.asarray(embed(task.texts), dtype=np.float64)
        return round(score_task(task, vectors, self.protocol, n_jobs=self.n_jobs, device=self.device), 2)

    def __call__(self, embed: Callable[[list], np.ndarray]) -> dict:
        """``{task: score}``, plus ``avg``: the mean of SimCSE's 7 tasks when all of them were scored (the papers'
        "Avg."); SST-5, SICK-E and the relatedness tasks get their own columns and enter no average."""
        results = {name: self.evaluate_task(name, embed) for name in tqdm(self.tasks, desc="Transfer", leave=False)}
        if all(name in results for name in TRANSFER_TASKS):
            results["avg"] = round(float(np.mean([results[name] for name in TRANSFER_TASKS])), 2)
        return results


__all__ = [
    "OPTIONAL_TRANSFER_TASKS",
    "PROTOCOLS",
    "RELATEDNESS_TASKS",
    "TRANSFER_TASKS",
    "TransferEvaluator",
    "encode_relatedness",
    "load_transfer_task",
    "relatedness_pearson",
    "restrict_task",
    "score_task",
]
