"""STS evaluation with the SentEval / SimCSE "all" protocol (and SentEval's "mean" / "wmean" beside it).

* STS12-STS16: Spearman correlation (x100) of cosine similarity over the concatenation of all sub-datasets of the
  year; pairs without a gold score are skipped (SimCSE's modified SentEval, ``results[task]['all']['spearman']
  ['all']``). SentEval's other two aggregations, ``mean`` and ``wmean`` (the plain and the size-weighted mean of the
  per-sub-dataset correlations, reported by some papers), are computed beside it; they can differ by several
  points. Sentences are whitespace-tokenized and re-joined, as SentEval's ``s.split()`` + SimCSE's batcher do.
* STSBenchmark and SICKRelatedness: Spearman of cosine on the test split (dev split for model selection), no
  regressor. SICK-R test is the 4,927-pair ``SICK_test_annotated.txt``.

Each unique sentence is encoded once across all tasks.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..data import resolve_data_dir
from ..errors import DataError

STS_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")
DEV_TASKS = ("STSBenchmark",)  # the dev split scored for model selection (recipes may add SICK-R trial)
# how tables and cards name the columns; SentEval's task names stay the keys everywhere else
STS_SHORT_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R", "avg": "Avg."}
STS_COLUMNS = tuple((task, STS_SHORT_NAMES.get(task, task)) for task in (*STS_TASKS, "avg"))

STS_YEAR_DATASETS = {
    "STS12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "STS13": ("FNWN", "headlines", "OnWN"),
    "STS14": ("deft-forum", "deft-news", "headlines", "images", "OnWN", "tweet-news"),
    "STS15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "STS16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}
SPLIT_FILES = {
    "STSBenchmark": {"train": "sts-train.csv", "dev": "sts-dev.csv", "test": "sts-test.csv"},
    "SICKRelatedness": {"train": "SICK_train.txt", "dev": "SICK_trial.txt", "test": "SICK_test_annotated.txt"},
}


AGGREGATIONS = ("all", "mean", "wmean")
# SentEval's STS test sets as SimCSE's senteval.tar holds them (`csekit download senteval`): per task, the pairs and
# the content hash STSEvaluator.fingerprint records (csekit.evaluation.protocol.content_hash). Scores get SentEval's
# names in a card's metadata only when the data they were measured on has these hashes (`senteval_tasks`).
SENTEVAL_TEST_SETS = {
    "STS12": (3108, "3271ea4010d1ecca"), "STS13": (1500, "68daf713cbe51c78"), "STS14": (3750, "56b39392de08489f"),
    "STS15": (3000, "740cbf357c88f7fc"), "STS16": (1186, "9d8e4a48b7105be4"),
    "STSBenchmark": (1379, "b7d804dc4ab1a943"), "SICKRelatedness": (4927, "3d3c945f99913f09"),
}


AVERAGE_TOLERANCE = 0.006  # an average of scores rounded to 2 decimals, itself rounded to 2


def is_score(value) -> bool:
    """A Spearman x 100 as csekit records it: a finite number in [-100, 100] (not a bool, not a string)."""
    return type(value) in (int, float) and math.isfinite(value) and -100 <= value <= 100


def sts_row_problem(row, tasks: Sequence[str] = STS_TASKS) -> Optional[str]:
    """Why ``row`` is not a row of STS scores as [`STSEvaluator.evaluate`][csekit.evaluation.sts.STSEvaluator.evaluate]
    returns one (``{task: score, ..., "avg": their mean}`` over ``tasks``), or ``None``: what a record or a cache
    entry read back must be before it is shown as scores."""
    if not isinstance(row, dict):
        return "is not a mapping of task names to scores"
    keys = (*tasks, "avg")
    missing, unknown = [t for t in keys if t not in row], [t for t in row if t not in keys]
    if missing or unknown:
        return f"lacks {', '.join(missing)}" if missing else f"holds tasks csekit does not score: {', '.join(unknown)}"
    bad = next((task for task in keys if not is_score(row[task])), None)
    if bad is not None:
        return f"{bad}: {row[bad]!r} is not a score (a finite number in [-100, 100])"
    mean = sum(row[task] for task in tasks) / len(tasks)
    if abs(row["avg"] - mean) > AVERAGE_TOLERANCE:
        return f"avg {row['avg']} is not the mean of its tasks ({mean:.2f})"
    return None


def senteval_tasks(protocol: Optional[dict]) -> set:
    """The tasks of an STS protocol record (``STSEvaluator.fingerprint()``, kept in ``eval_results.json``
    ``protocol.sts``) that were scored on SentEval's own test files: the test split, and the pairs and content hash
    of [`SENTEVAL_TEST_SETS`][csekit.evaluation.sts.SENTEVAL_TEST_SETS]. A record without a protocol names none."""
    if not isinstance(protocol, dict) or protocol.get("split") != "test" or not isinstance(protocol.get("tasks"), dict):
        return set()
    return {task for task, entry in protocol["tasks"].items() if isinstance(entry, dict)
            and (entry.get("pairs"), entry.get("sha256")) == SENTEVAL_TEST_SETS.get(task)}


@dataclass
class STSPairs:
    """Sentence pairs with gold similarity scores; ``subsets`` gives the sizes of a year's sub-datasets, in order."""

    sentences1: list
    sentences2: list
    scores: np.ndarray
    subsets: tuple = ()


def _normalize(sentence: str) -> str:
    return " ".join(sentence.split())


def _read_text(path: Path) -> list:
    if not path.is_file():
        raise DataError(f"{path}: no such file (an incomplete SentEval folder: run `csekit download senteval` again)")
    return path.read_text(encoding="utf-8").splitlines()


def load_sts_year(sts_dir: Path, task: str) -> STSPairs:
    """All scored pairs of one STS year (STS12-16), sub-datasets concatenated."""
    folder = sts_dir / f"{task}-en-test"
    s1, s2, scores, subsets = [], [], [], []
    for name in STS_YEAR_DATASETS[task]:
        inputs = _read_text(folder / f"STS.input.{name}.txt")
        gold = _read_text(folder / f"STS.gs.{name}.txt")
        if len(inputs) != len(gold):
            raise DataError(f"{folder}/STS.input.{name}.txt: {len(inputs)} lines but gold file has {len(gold)}")
        for number, (line, score) in enumerate(zip(inputs, gold), start=1):
            if score.strip() == "":
                continue
            fields = line.split("\t")
            if len(fields) < 2:
                raise DataError(f"{folder}/STS.input.{name}.txt:{number}: expected two tab-separated sentences")
            s1.append(_normalize(fields[0]))
            s2.append(_normalize(fields[1]))
            scores.append(float(score))
        subsets.append(len(scores) - sum(subsets))
    return STSPairs(s1, s2, np.asarray(scores), tuple(subsets))


def load_sts_split(downstream_dir: Path, task: str, split: str) -> STSPairs:
    """STS Benchmark (``sts-*.csv``, columns score/s1/s2 at 5/6/7) or SICK-R (header, columns 2/3/4)."""
    if task == "STSBenchmark":
        path, skip_header, columns = downstream_dir / "STS" / "STSBenchmark" / SPLIT_FILES[task][split], 0, (5, 6, 4)
    else:
        path, skip_header, columns = downstream_dir / "SICK" / SPLIT_FILES[task][split], 1, (1, 2, 3)
    s1, s2, scores = [], [], []
    for number, line in enumerate(_read_text(path)[skip_header:], start=1 + skip_header):
        fields = line.strip().split("\t")
        if len(fields) <= max(columns):
            raise DataError(f"{path}:{number}: expected at least {max(columns) + 1} tab-separated fields")
        s1.append(_normalize(fields[columns[0]]))
        s2.append(_normalize(fields[columns[1]]))
        scores.append(float(fields[columns[2]]))
    return STSPairs(s1, s2, np.asarray(scores))


def load_sts_task(data_dir, task: str, split: str = "test") -> STSPairs:
    downstream = Path(data_dir) / "senteval" / "downstream"
    if not downstream.is_dir():
        raise DataError(f"{data_dir}: no SentEval data (senteval/downstream); run `csekit download senteval "
                        f"--data-dir {data_dir}`, or pass --data_dir with the folder that holds it")
    if task in STS_YEAR_DATASETS:
        if split != "test":
            raise ValueError(f"{task} has only a test split")
        return load_sts_year(downstream / "STS", task)
    if task in SPLIT_FILES:
        return load_sts_split(downstream, task, split)
    raise ValueError(f"unknown STS task {task!r}; choose from {', '.join(STS_TASKS)}")


def cosine(embeddings1: np.ndarray, embeddings2: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(embeddings1, axis=1) * np.linalg.norm(embeddings2, axis=1)
    return (embeddings1 * embeddings2).sum(1) / np.maximum(norms, 1e-12)


def cosine_spearman(embeddings1: np.ndarray, embeddings2: np.ndarray, scores: np.ndarray) -> float:
    """Spearman (x100) between gold scores and row-wise cosine similarities."""
    from scipy.stats import spearmanr  # here: the command line's parsers read this module's task names

    return float(spearmanr(cosine(embeddings1, embeddings2), scores).statistic * 100)


def aggregated_spearman(embeddings1: np.ndarray, embeddings2: np.ndarray, pairs: STSPairs) -> dict:
    """``{"all", "mean", "wmean"}`` Spearman x100 of one task, as SentEval's ``STSEval.run`` reports a year:
    ``all`` over the concatenated sub-datasets (SimCSE's modified SentEval, the headline), ``mean`` the plain and
    ``wmean`` the size-weighted mean of the per-sub-dataset correlations. A single-set task has one value."""
    from scipy.stats import spearmanr

    similarities = cosine(embeddings1, embeddings2)
    result = {"all": float(spearmanr(similarities, pairs.scores).statistic * 100)}
    if not pairs.subsets:
        return dict.fromkeys(AGGREGATIONS, result["all"])
    bounds = np.cumsum((0, *pairs.subsets))
    per_subset = [spearmanr(similarities[a:b], pairs.scores[a:b]).statistic * 100 for a, b in zip(bounds, bounds[1:])]
    result["mean"] = float(np.average(per_subset))
    result["wmean"] = float(np.average(per_subset, weights=pairs.subsets))
    return result


class STSEvaluator:
    """Spearman x100 of cosine similarity on STS tasks; the same code scores test sets and selects checkpoints.

    Args:
        data_dir: folder containing ``senteval/downstream``; ``None``: the data folder the commands use
            ([`resolve_data_dir`][csekit.data.resolve_data_dir]).
        tasks: subset of [`STS_TASKS`][csekit.evaluation.sts.STS_TASKS].
        split: ``"test"`` (reporting) or ``"dev"`` (STS-B dev / SICK-R trial, for model selection).

    Call it with ``embed(sentences) -> (n, d) array``; it returns ``{task: score, ..., "avg": mean}`` under
    ``aggregation`` (``all``, the default, as SimCSE; ``mean`` or ``wmean``);
    [`evaluate`][csekit.evaluation.sts.STSEvaluator.evaluate] returns all three,
    ``{aggregation: {task: score, ..., "avg"}}`` (they differ for STS12-16 only). ``embed`` gets
    both sentences of every scored pair, duplicates kept, as SentEval's ``prepare`` sees a task: a post-processing or
    idf^T fitted inside ``embed`` then weights a sentence by how often the task uses it, which is what reproduces the
    published whitening numbers (benchmarks/RESULTS.md). The shared encoders encode each distinct sentence once.
    """

    def __init__(self, data_dir, tasks: Sequence[str] = STS_TASKS, split: str = "test", aggregation: str = "all"):
        unknown = [task for task in tasks if task not in STS_TASKS]
        if unknown:
            raise ValueError(f"unknown STS task(s) {', '.join(unknown)}; choose from {', '.join(STS_TASKS)}")
        if aggregation not in AGGREGATIONS:
            raise DataError(f"unknown STS aggregation {aggregation!r}; choose from {', '.join(AGGREGATIONS)}")
        self.tasks = tuple(tasks)
        self.split = split
        self.aggregation = aggregation
        if data_dir is None:  # CSEKIT_DATA_DIR or the folder `csekit download` fills, as the commands find it
            data_dir = resolve_data_dir()
        self.pairs = {task: load_sts_task(data_dir, task, split) for task in self.tasks}

    def as_dataset(self):
        """The evaluation pairs as a ``datasets.Dataset`` (columns task, sent0, sent1, score)."""
        from datasets import Dataset

        rows = {"task": [], "sent0": [], "sent1": [], "score": []}
        for task, pairs in self.pairs.items():
            rows["task"] += [task] * len(pairs.scores)
            rows["sent0"] += pairs.sentences1
            rows["sent1"] += pairs.sentences2
            rows["score"] += pairs.scores.tolist()
        return Dataset.from_dict(rows)

    def fingerprint(self) -> dict:
        """The protocol of these scores: aggregation, split, and per task its pair count and content hash."""
        from .protocol import content_hash

        return {"aggregation": self.aggregation, "split": self.split, "tasks": {
            task: {"pairs": len(pairs.scores),
                   "sha256": content_hash(pairs.sentences1, pairs.sentences2, pairs.scores.tolist())}
            for task, pairs in self.pairs.items()}}

    def sentences(self) -> list:
        unique = dict.fromkeys(s for pairs in self.pairs.values() for s in pairs.sentences1 + pairs.sentences2)
        return list(unique)

    def evaluate(self, embed: Callable[[list], np.ndarray]) -> dict:
        sentences = [s for pairs in self.pairs.values() for s in pairs.sentences1 + pairs.sentences2]
        vectors = np.asarray(embed(sentences), dtype=np.float64)
        results, start = {aggregation: {} for aggregation in AGGREGATIONS}, 0
        for task, pairs in self.pairs.items():
            count = len(pairs.scores)
            first, second = vectors[start : start + count], vectors[start + count : start + 2 * count]
            for aggregation, score in aggregated_spearman(first, second, pairs).items():
                results[aggregation][task] = round(score, 2)
            start += 2 * count
        undefined = sorted({task for row in results.values() for task, score in row.items() if not np.isfinite(score)})
        if undefined:  # every pair got the same cosine (a collapsed model), or non-finite vectors
            raise DataError(f"STS {', '.join(undefined)}: Spearman is undefined (the embeddings give every pair the "
                            "same similarity, or hold NaN); no score is reported")
        for row in results.values():
            row["avg"] = round(float(np.mean([row[task] for task in self.tasks])), 2)
        return results

    def __call__(self, embed: Callable[[list], np.ndarray]) -> dict:
        return self.evaluate(embed)[self.aggregation]


class CachedSTSEvaluator:
    """An [`STSEvaluator`][csekit.evaluation.sts.STSEvaluator] over pooled vectors computed once (e.g. by the embedding
    cache).

    Call with ``transform`` (``(n, hidden) -> (n, d)``, e.g. the model's MLP ``e``) to score ``transform(pooled)``,
    or with ``None`` to score the frozen encoder alone.
    """

    def __init__(self, evaluator: STSEvaluator, pooled):  # pooled: a (n, hidden) torch tensor
        sentences = evaluator.sentences()
        if pooled.shape[0] != len(sentences):
            raise ValueError(f"{pooled.shape[0]} vectors for {len(sentences)} evaluation sentences")
        self.evaluator = evaluator
        self.pooled = pooled
        self.rows = {sentence: row for row, sentence in enumerate(sentences)}

    def _embed(self, transform: Optional[Callable]) -> Callable:
        import torch  # here, not at the top: `csekit --help` imports this module and needs no torch

        def embed(sentences):
            vectors = self.pooled[torch.as_tensor([self.rows[s] for s in sentences])]
            if transform is not None:
                with torch.no_grad():
                    vectors = transform(vectors.to(next(transform.parameters()).device)).float().cpu()
            return vectors.numpy()

        return embed

    def __call__(self, transform: Optional[Callable] = None) -> dict:
        return self.evaluator(self._embed(transform))

    def evaluate(self, transform: Optional[Callable] = None) -> dict:
        """Every aggregation ([`STSEvaluator.evaluate`][csekit.evaluation.sts.STSEvaluator.evaluate])."""
        return self.evaluator.evaluate(self._embed(transform))


def format_sts_table(results: dict, title: Optional[str] = None, contaminated: Optional[dict] = None) -> str:
    """A markdown table of one or more result rows: ``{row_name: {task: score}}``.

    ``contaminated``: ``{row_name: {set: count}}`` for rows trained on pairs that share sentences with those sets;
    their cells of the test sets named (and the row's average) get a star, and a footnote gives the counts.
    """
    contaminated = contaminated or {}
    columns = [key for key in list(STS_TASKS) + ["avg"] if any(key in row for row in results.values())]
    lines = [] if title is None else [title, ""]
    lines.append("| model | " + " | ".join(STS_SHORT_NAMES.get(c, c) for c in columns) + " |")
    lines.append("|---|" + "---:|" * len(columns))
    for name, row in results.items():
        marked = {task for task in contaminated.get(name, {}) if task in STS_TASKS}
        star = {c: "*" if c in marked or (c == "avg" and marked) else "" for c in columns}
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.2f}{star[c]}" if c in row else "" for c in columns) + " |")
    for counts in contaminated.values():
        if any(task in STS_TASKS for task in counts):
            listed = ", ".join(f"{name} {count}" for name, count in counts.items())
            lines.append(f"\n* contaminated (--test_overlap keep): training pairs sharing a sentence with the set: "
                         f"{listed}")
    return "\n".join(lines)
