"""CLSR's training data (Qiu, Ding & Chen): positive pairs, and the sentences that must not enter training.

No evaluation sentence enters training by default. `held_out_sentences` collects, once, every sentence of the 7
STS test sets (STS12-16: scored pairs only) and of the STS-B dev split used for model selection;
`build_pair_corpus` drops every positive pair (STS-B, NLI or a user CSV) with a sentence among them and counts
the drops per set, and [`csekit.trainers.clsr.CLSRTrainer.train`][csekit.trainers.clsr.CLSRTrainer.train] re-checks the
final training sentences. This
matters most for STS-B: it was compiled from the STS 2012-2016 data, so 1,225 of the paper's 1,406 STS-B train pairs
share a sentence with a test set or STS-B dev. Keeping them (``drop=False``, the recipe's ``--test_overlap keep``)
reproduces the paper's selection, and the pairs that touch each set are then counted so that the scores on those sets
can be marked contaminated.
"""

import logging
import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from ..data import resolve_data_dir, resolve_data_file
from ..errors import DataError
from ..evaluation.sts import DEV_TASKS, STS_TASKS, load_sts_task
from .data import read_pairs

logger = logging.getLogger(__name__)

CLSR_DATA_SOURCES = ("nli", "stsb")
NLI_PAIRS_FILE = "nli/snli_devtest_pairs.tsv"
STSB_MIN_SCORE = 4.0  # kept: score >= 4 (the paper's "totally 1,406 pairs"; > 4 gives 1,052)


def normalize_sentence(sentence: str) -> str:
    """The form in which training and evaluation sentences are compared: lower case, words (letters and digits)
    separated by single spaces, punctuation dropped.

    Case and whitespace alone are not enough: the STS12 MSRvid test sentences have no final period, their STS-B
    and SNLI copies do ("a man is drawing" / "a man is drawing ."); comparing words finds 19 more STS-B >= 4 pairs
    and 34 more SNLI entailment pairs that share a sentence with an evaluation set.
    """
    return " ".join(re.sub(r"[\W_]+", " ", sentence.lower()).split())


def read_nli_entailment_pairs(path) -> tuple:
    """``(premises, hypotheses)`` of the entailment rows of a ``split<TAB>premise<TAB>hypothesis<TAB>label`` file."""
    first, second = [], []
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\r\n").split("\t")
        if header != ["split", "premise", "hypothesis", "label"]:
            raise DataError(f"{path}:1: header is {header!r}, expected split, premise, hypothesis, label")
        for number, line in enumerate(handle, start=2):
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) != 4:
                raise DataError(f"{path}:{number}: {len(fields)} tab-separated field(s), expected 4")
            if fields[3] == "entailment":
                first.append(fields[1].strip())
                second.append(fields[2].strip())
    return first, second


def load_positive_pairs(source: str, data_dir: Optional[str] = None) -> tuple:
    """``(sent0, sent1)`` lists of positive pairs, before any held-out filtering.

    Args:
        source: ``nli`` (SNLI dev+test entailment pairs in the data folder), ``stsb`` (STS-B *train* pairs scored
            >= 4), or a CSV file with header ``sent0,sent1`` (a ``hard_neg`` column is ignored).

    The paper (Sec. 4.1) keeps STS-B pairs "with scores higher than 4 ... This gives us totally 1,406 pairs". The
    count is reproduced only by the train split with score >= 4 (> 4 gives 1,052; all three splits give 2,008 with
    >= 4), so the count is followed, not the wording.
    """
    if source == "nli":
        return read_nli_entailment_pairs(resolve_data_file(NLI_PAIRS_FILE, data_dir))
    if source == "stsb":
        train = load_sts_task(resolve_data_dir(data_dir), "STSBenchmark", "train")
        keep = train.scores >= STSB_MIN_SCORE
        return ([s for s, k in zip(train.sentences1, keep) if k], [s for s, k in zip(train.sentences2, keep) if k])
    if not source.endswith(".csv"):
        raise DataError(f"train_data {source!r}: use one of {', '.join(CLSR_DATA_SOURCES)} or a .csv (sent0,sent1)")
    columns = read_pairs(resolve_data_file(source, data_dir))
    if "hard_neg" in columns:
        logger.info("%s: the hard_neg column is not used by CLSR (positives only)", source)
    return columns["sent0"], columns["sent1"]


@dataclass
class HeldOutSentences:
    """Normalized sentences that must not enter training, by evaluation set.

    Args:
        sets: ``{name: set of normalized sentences}``; names are the STS task names for the test splits and
            ``"<task>-dev"`` for the dev splits scored during training.
    """

    sets: dict

    def touched(self, *sentences: str) -> list:
        """Names of the sets that contain any of ``sentences`` (compared after `normalize_sentence`)."""
        normalized = [normalize_sentence(s) for s in sentences]
        return [name for name, held in self.sets.items() if any(s and s in held for s in normalized)]


def held_out_sentences(data_dir: Optional[str] = None, test_tasks: Sequence[str] = STS_TASKS,
                       dev_tasks: Sequence[str] = DEV_TASKS) -> HeldOutSentences:
    """Every sentence of the test split of ``test_tasks`` (STS12-16: the scored pairs only, as they are evaluated)
    and of the dev split of ``dev_tasks`` (model selection), normalized, by set."""
    folder = resolve_data_dir(data_dir)
    sets = {}
    for split, tasks in (("test", test_tasks), ("dev", dev_tasks)):
        for task in tasks:
            pairs = load_sts_task(folder, task, split)
            name = task if split == "test" else f"{task}-dev"
            sets[name] = {normalize_sentence(s) for s in pairs.sentences1 + pairs.sentences2}
    return HeldOutSentences(sets)


def assert_disjoint_from_held_out(sentences: Sequence[str], held_out: HeldOutSentences,
                                  declared: Sequence[str] = ()) -> None:
    """Raise [`DataError`][csekit.trainers.clsr_data.DataError] if any training sentence belongs to a held-out
    evaluation set, other than the sets
    in ``declared`` (those a corpus built with ``drop=False`` reports as contaminated)."""
    leaked = [s for s in sentences if any(name not in declared for name in held_out.touched(s))]
    if leaked:
        raise DataError(f"{len(leaked)} training sentence(s) belong to held-out evaluation sets "
                        f"({', '.join(held_out.touched(*leaked))}), e.g. {leaked[0]!r}")


@dataclass
class PairCorpus:
    """Positive pairs over a list of unique sentences (each sentence is pooled and cached once).

    Args:
        sentences: unique training sentences.
        pairs: ``(num_pairs, 2)`` int64 row indices into ``sentences``.
        dropped: pairs removed because a sentence belongs to a held-out set.
        overlap: ``{set name: pairs of the source with a sentence in that set}`` (sets with at least one).
        contaminated: the part of ``overlap`` that was kept for training (empty unless built with ``drop=False``):
            the scores on those sets are contaminated.
    """

    sentences: list
    pairs: torch.Tensor
    dropped: int = 0
    overlap: dict = field(default_factory=dict)
    contaminated: dict = field(default_factory=dict)


def build_pair_corpus(first: Sequence[str], second: Sequence[str], held_out: HeldOutSentences,
                      drop: bool = True) -> PairCorpus:
    """Count the pairs that touch each held-out set, drop them (``drop=True``) or keep them, and index the
    pairs trained on by unique sentence."""
    if len(first) != len(second):
        raise DataError(f"{len(first)} first sentences but {len(second)} second sentences")
    index, rows, overlap = {}, [], {}
    overlapping = 0
    for a, b in zip(first, second):
        touched = held_out.touched(a, b)
        for name in touched:
            overlap[name] = overlap.get(name, 0) + 1
        overlapping += bool(touched)
        if touched and drop:
            continue
        rows.append((index.setdefault(a, len(index)), index.setdefault(b, len(index))))
    overlap = {name: overlap[name] for name in held_out.sets if name in overlap}  # in held-out order
    counts = ", ".join(f"{name}: {count}" for name, count in overlap.items()) or "none"
    if drop:
        logger.info("dropped %d of %d pair(s) sharing a sentence with a held-out evaluation set (%s)", overlapping,
                    len(first), counts)
    elif overlapping:
        logger.warning("kept %d of %d pair(s) sharing a sentence with held-out evaluation sets: scores on those sets "
                       "are contaminated (%s)", overlapping, len(first), counts)
    if not rows:
        raise DataError(f"no positive pairs left: all {len(first)} share a sentence with a held-out evaluation set")
    return PairCorpus(list(index), torch.tensor(rows, dtype=torch.long), overlapping if drop else 0, overlap,
                      {} if drop else overlap)


def require_full_batch(corpus: PairCorpus, batch_size: int) -> None:
    """Raise [`DataError`][csekit.trainers.clsr_data.DataError] when the corpus has fewer pairs than one batch (every
    step uses a full batch).

    The batch is never shrunk to fit: it sets the number of negatives, which the paper's Table 2 shows matters
    (STS-B dev 64.93 at 64 pairs, 76.74 at 512), so the user picks it."""
    if len(corpus.pairs) < batch_size:
        dropped = f" ({corpus.dropped} dropped: they share a sentence with a held-out set)" * bool(corpus.dropped)
        raise DataError(f"{len(corpus.pairs)} positive pairs{dropped}, fewer than one batch of {batch_size}; lower "
                        "--per_device_train_batch_size")


__all__ = [
    "CLSR_DATA_SOURCES", "HeldOutSentences", "PairCorpus", "assert_disjoint_from_held_out", "build_pair_corpus",
    "held_out_sentences", "load_positive_pairs", "normalize_sentence", "read_nli_entailment_pairs",
    "require_full_batch",
]
