"""CLSR training (Qiu, Ding & Chen): positive pairs, cached frozen-encoder vectors, and the head trainer.

The backbone is frozen, so its pooled vectors are computed once (:mod:`csekit.trainers.embedding_cache`) and every epoch
trains only the MLP encoder ``e`` and the projection head ``h`` on those vectors with NT-Xent (eq. 1), 10 warm-up
epochs and cosine decay. STS-B dev is scored on cached vectors as well, so model selection costs milliseconds.

The optimizer is an inferred reading: the paper names none. It says CLSR "adopts contrastive learning framework
SimCLR" and gives "Learning rate is 0.5 with the decay rate of 0.0001", so csekit uses SimCLR's optimizer, LARS
(momentum 0.9, trust coefficient 1e-3, biases excluded), with 0.0001 read as weight decay.

Why not ``transformers.Trainer``: a step here is a few small matrix products on an in-memory tensor; batches are
index slices of that tensor, not collated examples. Trainer's per-step machinery (DataLoader sampling and
collation of 512 items, callbacks, accelerate wrappers, checkpoint-based best-model selection) would cost more
than the step itself, and its checkpoints would hold the training module instead of the model that is saved.

No evaluation sentence enters training by default. :func:`held_out_sentences` collects, once, every sentence of
the 7 STS test sets (STS12-16: scored pairs only) and of the STS-B dev split used for model selection;
:func:`build_pair_corpus` drops every positive pair (STS-B, NLI or a user CSV) with a sentence among them and
counts the drops per set, and :meth:`CLSRTrainer.train` re-checks the final training sentences. This matters most
for STS-B: it was compiled from the STS 2012-2016 data, so 1,225 of the paper's 1,406 STS-B train pairs share a
sentence with a test set or STS-B dev. Keeping them (``drop=False``, the recipe's ``--test_overlap keep``)
reproduces the paper's selection, and the pairs that touch each set are then counted so that the scores on those
sets can be marked contaminated.
"""

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import nn
from tqdm.auto import trange
from transformers import get_cosine_schedule_with_warmup

from ..data import resolve_data_dir, resolve_data_file
from ..errors import DataError
from ..evaluation.sts import DEV_TASKS, STS_TASKS, STSEvaluator, load_sts_task
from ..modeling.losses import nt_xent_loss
from .data import read_pairs
from .lars import LARS, lars_param_groups

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
        """Names of the sets that contain any of ``sentences`` (compared after :func:`normalize_sentence`)."""
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
    """Raise :class:`DataError` if any training sentence belongs to a held-out evaluation set, other than the sets
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
    """Raise :class:`DataError` when the corpus has fewer pairs than one batch (every step uses a full batch).

    The batch is never shrunk to fit: it sets the number of negatives, which the paper's Table 2 shows matters
    (STS-B dev 64.93 at 64 pairs, 76.74 at 512), so the user picks it."""
    if len(corpus.pairs) < batch_size:
        dropped = f" ({corpus.dropped} dropped: they share a sentence with a held-out set)" * bool(corpus.dropped)
        raise DataError(f"{len(corpus.pairs)} positive pairs{dropped}, fewer than one batch of {batch_size}; lower "
                        "--per_device_train_batch_size")


class CachedSTSEvaluator:
    """An :class:`~csekit.evaluation.sts.STSEvaluator` over pooled vectors computed once (e.g. by the embedding cache).

    Call with ``transform`` (``(n, hidden) -> (n, d)``, e.g. the model's MLP ``e``) to score ``transform(pooled)``,
    or with ``None`` to score the frozen encoder alone.
    """

    def __init__(self, evaluator: STSEvaluator, pooled: torch.Tensor):
        sentences = evaluator.sentences()
        if pooled.shape[0] != len(sentences):
            raise ValueError(f"{pooled.shape[0]} vectors for {len(sentences)} evaluation sentences")
        self.evaluator = evaluator
        self.pooled = pooled
        self.rows = {sentence: row for row, sentence in enumerate(sentences)}

    def __call__(self, transform: Optional[Callable] = None) -> dict:
        def embed(sentences):
            vectors = self.pooled[torch.as_tensor([self.rows[s] for s in sentences])]
            if transform is not None:
                with torch.no_grad():
                    vectors = transform(vectors.to(next(transform.parameters()).device)).float().cpu()
            return vectors.numpy()

        return self.evaluator(embed)


@dataclass
class CLSRTrainingArguments:
    """Head-training hyper-parameters; defaults are the paper's (Sec. 4.1: batch 512 pairs, 2000 epochs, lr 0.5,
    decay 0.0001, 10 warm-up epochs + cosine). The optimizer, LARS with SimCLR's momentum and trust coefficient, is
    an inferred reading (the paper names none; see the module docstring)."""

    output_dir: str = field(default="outputs/clsr", metadata={"help": "Where the model and results go."})
    num_train_epochs: int = field(default=2000, metadata={"help": "Epochs over the positive pairs."})
    per_device_train_batch_size: int = field(
        default=512, metadata={"help": "Positive pairs per batch (2x sentences), the batch of the whole run: with "
                               "several processes each pools a share of the caches, then every one trains the same "
                               "head on the same full batch (not a share per process). A partial last batch is "
                               "dropped."}
    )
    learning_rate: float = field(default=0.5, metadata={"help": "Peak learning rate (the paper's 0.5)."})
    weight_decay: float = field(default=1e-4, metadata={"help": "LARS weight decay, not on biases (the paper's "
                                                        "'decay rate of 0.0001', read as weight decay)."})
    warmup_epochs: int = field(default=10, metadata={"help": "Linear warm-up epochs before the cosine decay."})
    lars_momentum: float = field(default=0.9, metadata={"help": "LARS momentum (SimCLR's; the paper names no "
                                                         "optimizer, LARS is inferred from 'adopts SimCLR')."})
    lars_trust_coefficient: float = field(default=0.001, metadata={"help": "LARS trust coefficient eta (SimCLR's)."})
    eval_epochs: int = field(
        default=100, metadata={"help": "Score STS-B dev every N epochs (and after the last); the best e is kept."}
    )
    seed: int = field(default=42, metadata={"help": "Seed for the head initialisation and the pair shuffling."})
    report_to: str = field(default="none", metadata={"help": "'tensorboard' to log loss, lr and STS-B dev there."})
    logging_dir: Optional[str] = field(default=None, metadata={"help": "TensorBoard folder (default OUTPUT_DIR/runs)."})


class CLSRTrainer:
    """Trains ``model.mlp`` (``e``) and a fresh linear projection ``h`` on cached pooled vectors.

    Args:
        model: a :class:`~csekit.modeling.CLSRModel`; only ``model.mlp`` is updated (in place).
        args: :class:`CLSRTrainingArguments`.
        train_vectors: ``(num_sentences, hidden)`` pooled vectors of ``corpus.sentences``.
        corpus: the positive pairs.
        held_out: :func:`held_out_sentences`; no corpus sentence may belong to them, except to the sets listed in
            ``corpus.contaminated`` (overlap kept on purpose, and reported).
        dev_evaluator: optional :class:`CachedSTSEvaluator` on STS-B dev for model selection.
    """

    def __init__(self, model, args: CLSRTrainingArguments, train_vectors: torch.Tensor, corpus: PairCorpus,
                 held_out: HeldOutSentences, dev_evaluator: Optional[CachedSTSEvaluator] = None):
        if train_vectors.shape[0] != len(corpus.sentences):
            raise ValueError(f"{train_vectors.shape[0]} vectors for {len(corpus.sentences)} sentences")
        require_full_batch(corpus, args.per_device_train_batch_size)
        if args.num_train_epochs < 1 or args.eval_epochs < 1 or args.warmup_epochs < 0:
            raise DataError("num_train_epochs and eval_epochs must be >= 1, warmup_epochs >= 0")
        self.model = model
        self.args = args
        self.corpus = corpus
        self.held_out = held_out
        self.dev_evaluator = dev_evaluator
        self.device = next(model.mlp.parameters()).device
        self.train_vectors = train_vectors.to(self.device)

    def _writer(self):
        """A TensorBoard writer when ``report_to`` asks for one (the same flag as the Trainer-based recipes)."""
        if self.args.report_to in (None, "none"):
            return None
        if self.args.report_to != "tensorboard":
            raise DataError(f"report_to {self.args.report_to!r}: CLSR logs to 'tensorboard' or 'none'")
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise DataError("--report_to tensorboard needs tensorboard: pip install 'csekit[tensorboard]'") from None
        return SummaryWriter(self.args.logging_dir or str(Path(self.args.output_dir) / "runs"))

    def train(self) -> dict:
        """Run all epochs; restores the best-dev ``e`` (the last one without a dev evaluator) and returns a log."""
        assert_disjoint_from_held_out(self.corpus.sentences, self.held_out, list(self.corpus.contaminated))
        writer = self._writer()
        args, mlp = self.args, self.model.mlp
        torch.manual_seed(args.seed)
        size = mlp.dense_out.out_features
        projection = nn.Linear(size, size).to(self.device)  # h: training only, never saved
        trainable = nn.ModuleDict({"mlp": mlp, "projection": projection}).train()
        optimizer = LARS(lars_param_groups(trainable, args.weight_decay), lr=args.learning_rate,
                         momentum=args.lars_momentum, trust_coefficient=args.lars_trust_coefficient)
        batch = args.per_device_train_batch_size
        steps_per_epoch = len(self.corpus.pairs) // batch
        scheduler = get_cosine_schedule_with_warmup(
            optimizer, args.warmup_epochs * steps_per_epoch, args.num_train_epochs * steps_per_epoch
        )
        generator = torch.Generator().manual_seed(args.seed)
        temperature = self.model.config.temperature
        pairs = self.corpus.pairs.to(self.device)
        history, best = [], {"epoch": None, "dev": -float("inf"), "state": None}
        epoch_losses = []
        start = time.perf_counter()
        progress = trange(args.num_train_epochs, desc="CLSR epochs")
        for epoch in progress:
            order = torch.randperm(len(pairs), generator=generator).to(self.device)
            total = torch.zeros((), device=self.device)
            for step in range(steps_per_epoch):
                rows = pairs[order[step * batch : (step + 1) * batch]].T.reshape(-1)  # all sent0, then all sent1
                projected = projection(mlp(self.train_vectors[rows]))
                loss = nt_xent_loss(projected[:batch], projected[batch:], temperature)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                total += loss.detach()
            epoch_losses.append(total / steps_per_epoch)
            last = epoch + 1 == args.num_train_epochs
            if (epoch + 1) % args.eval_epochs == 0 or last:
                record = {"epoch": epoch + 1, "loss": float(torch.stack(epoch_losses).mean()),
                          "lr": scheduler.get_last_lr()[0], "seconds": round(time.perf_counter() - start, 1)}
                epoch_losses = []
                if self.dev_evaluator is not None:
                    mlp.eval()
                    record["dev_STSBenchmark"] = self.dev_evaluator(mlp)["STSBenchmark"]
                    mlp.train()
                    if record["dev_STSBenchmark"] > best["dev"]:
                        best = {"epoch": epoch + 1, "dev": record["dev_STSBenchmark"],
                                "state": {k: v.detach().clone() for k, v in mlp.state_dict().items()}}
                history.append(record)
                if writer is not None:
                    for name in ("loss", "lr", "dev_STSBenchmark"):
                        if name in record:
                            writer.add_scalar(f"clsr/{name}", record[name], epoch + 1)
                progress.set_postfix({k: v for k, v in record.items() if k in ("loss", "dev_STSBenchmark")})
                logger.info("%s", record)
        train_seconds = time.perf_counter() - start
        if writer is not None:
            writer.close()
        if best["state"] is not None:
            mlp.load_state_dict(best["state"])
        mlp.eval()
        return {"history": history, "best_epoch": best["epoch"], "best_dev_STSBenchmark": best["dev"]
                if best["state"] is not None else None, "steps": steps_per_epoch * args.num_train_epochs,
                "train_seconds": round(train_seconds, 1)}


__all__ = [
    "CLSR_DATA_SOURCES",
    "CLSRTrainer",
    "CLSRTrainingArguments",
    "CachedSTSEvaluator",
    "PairCorpus",
    "DEV_TASKS",
    "HeldOutSentences",
    "assert_disjoint_from_held_out",
    "build_pair_corpus",
    "held_out_sentences",
    "load_positive_pairs",
    "require_full_batch",
]
