"""CLSR training (Qiu, Ding & Chen): positive pairs, cached frozen-encoder vectors, and the head trainer.

The backbone is frozen, so its pooled vectors are computed once (`csekit.trainers.embedding_cache`) and every epoch
trains only the MLP encoder ``e`` and the projection head ``h`` on those vectors with NT-Xent (eq. 1), 10 warm-up
epochs and cosine decay. STS-B dev is scored on cached vectors as well, so model selection costs milliseconds.

The optimizer is an inferred reading: the paper names none. It says CLSR "adopts contrastive learning framework
SimCLR" and gives "Learning rate is 0.5 with the decay rate of 0.0001", so csekit uses SimCLR's optimizer, LARS
(momentum 0.9, trust coefficient 1e-3, biases excluded), with 0.0001 read as weight decay.

Why not ``transformers.Trainer``: a step here is a few small matrix products on an in-memory tensor; batches are
index slices of that tensor, not collated examples. Trainer's per-step machinery (DataLoader sampling and
collation of 512 items, callbacks, accelerate wrappers, checkpoint-based best-model selection) would cost more
than the step itself, and its checkpoints would hold the training module instead of the model that is saved.

The training pairs and the held-out check are in `csekit.trainers.clsr_data`.
"""

import dataclasses
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from torch import nn
from tqdm.auto import trange
from transformers import get_cosine_schedule_with_warmup

from ..errors import DataError
from ..evaluation.sts import CachedSTSEvaluator, STSEvaluator
from ..modeling.losses import nt_xent_loss
from ..preflight import (
    CHECKPOINT_PREFIX,
    CHECKPOINT_RECORD,
    DECODER_BACKBONES,
    RUN_RECORD,
    TRAIN_DATA,
    check_resume,
    check_trainer_model,
    check_training_arguments,
    find_checkpoint,
    prepare_decoder_tokenizer,
)
from .arguments import arguments_record, built_from, flag_settings, setup_record
from .clsr_data import (
    HeldOutSentences,
    PairCorpus,
    assert_disjoint_from_held_out,
    build_pair_corpus,
    held_out_sentences,
    require_full_batch,
)
from .data import check_train_dataset, data_fingerprint, dataset_column_names
from .lars import LARS, lars_param_groups
from .output_dir import PARTIAL_CHECKPOINT_PREFIX, partial_checkpoint

logger = logging.getLogger(__name__)


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
    logging_epochs: int = field(default=0, metadata={"help": "Log the epoch's loss and learning rate every N epochs "
                                                     "(0: with each dev score only)."})
    max_steps: Optional[int] = field(default=None, metadata={
        "help": "The Trainer's step flags, --max_steps, --eval_steps, --save_steps, --logging_steps, mean what they "
                "mean there (optimizer steps) and set the epoch flags: an epoch is pairs // batch steps, so each "
                "must be a whole number of epochs."})
    eval_steps: Optional[int] = field(default=None, metadata={"help": "--eval_epochs in steps (see --max_steps)."})
    save_steps: Optional[int] = field(default=None, metadata={"help": "--save_epochs in steps (see --max_steps)."})
    logging_steps: Optional[int] = field(default=None, metadata={"help": "--logging_epochs in steps (see "
                                                                 "--max_steps)."})
    seed: int = field(default=42, metadata={"help": "Seed for the head initialisation and the pair shuffling."})
    report_to: str = field(default="none", metadata={"help": "'tensorboard' to log loss, lr and STS-B dev there."})
    logging_dir: Optional[str] = field(default=None, metadata={"help": "TensorBoard folder (default OUTPUT_DIR/runs)."})
    save_epochs: int = field(
        default=100, metadata={"help": "Write OUTPUT_DIR/checkpoint-<epoch> every N epochs (0: never); only the newest "
                               "is kept. It holds e, h, the optimizer, schedule and shuffling state and the best e."}
    )
    resume_from_checkpoint: Optional[str] = field(
        default=None, metadata={"help": "Continue from 'last' (the newest complete checkpoint in --output_dir) or a "
                                "checkpoint folder; the result equals the uninterrupted run."}
    )
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "Keep the checkpoint folder after the run; by default it is removed once the final model, its scores "
                "and card are in --output_dir."})
    resume_accept_changes: bool = field(default=False, metadata={
        "help": "Resume from a checkpoint made with another batch size (refused otherwise: the result is not the "
                "uninterrupted run's); training_args.json records it."})
    mini_batch_size: Optional[int] = field(default=None, metadata={
        "help": "Gradient caching does not apply to CLSR and is refused: its frozen encoder runs once per sentence, "
                "outside the steps (the vector cache), and the head trains on vectors, so the paper's 512 pairs fit "
                "whole."})
    mini_batch_tokens: Optional[int] = field(default=None, metadata={
        "help": "Refused, as --mini_batch_size is."})

    def __post_init__(self):
        check_training_arguments(self)
        for flag in ("mini_batch_size", "mini_batch_tokens"):
            if getattr(self, flag) is not None:
                raise DataError(f"--{flag} does not apply to clsr: its frozen encoder runs once per sentence "
                                "outside the steps and the head trains on cached vectors, so every batch fits whole")
        if self.per_device_train_batch_size == 1:  # each process trains the same head on the whole batch
            raise DataError(f"--per_device_train_batch_size {self.per_device_train_batch_size}: a batch of one pair "
                            "gives its anchors no negative, so the contrastive loss is constant and nothing trains; "
                            "use 2 or more")
        if self.eval_epochs < 1 or self.warmup_epochs < 0 or self.save_epochs < 0 or self.logging_epochs < 0:
            raise DataError("--eval_epochs must be >= 1, --warmup_epochs, --save_epochs and --logging_epochs >= 0")
        for flag in STEP_FLAGS:
            value = getattr(self, flag)
            if value is not None and value < 1:
                raise DataError(f"--{flag} {value}: must be >= 1")


# the Trainer's step flags and the epoch flags they set (steps_as_epochs)
STEP_FLAGS = {"max_steps": "num_train_epochs", "eval_steps": "eval_epochs", "save_steps": "save_epochs",
              "logging_steps": "logging_epochs"}


def steps_as_epochs(args: CLSRTrainingArguments, steps_per_epoch: int) -> CLSRTrainingArguments:
    """``args`` with each step flag given (``--max_steps 40``) turned into its epoch flag (``--num_train_epochs 10``
    at 4 steps an epoch), said in one log line; a step count that is not a whole number of epochs is refused in one
    line naming the nearest that are (CLSR's schedule and checkpoints are per epoch)."""
    given = {flag: getattr(args, flag) for flag in STEP_FLAGS if getattr(args, flag) is not None}
    if not given:
        return args
    epochs = {}
    for flag, steps in given.items():
        if steps % steps_per_epoch:
            below, above = steps // steps_per_epoch * steps_per_epoch, (steps // steps_per_epoch + 1) * steps_per_epoch
            nearest = f"{below} or {above}" if below else f"{above}"
            raise DataError(f"--{flag} {steps}: CLSR trains whole epochs of {steps_per_epoch} steps (pairs // "
                            f"--per_device_train_batch_size), so use a multiple of {steps_per_epoch} ({nearest}) or "
                            f"--{STEP_FLAGS[flag]}")
        epochs[STEP_FLAGS[flag]] = steps // steps_per_epoch
    logger.info("CLSR counts epochs of %d steps: %s", steps_per_epoch, ", ".join(
        f"--{flag} {steps} = --{STEP_FLAGS[flag]} {epochs[STEP_FLAGS[flag]]}" for flag, steps in given.items()))
    return dataclasses.replace(args, **epochs)


STATE_FILE, RECORD_FILE = "state.safetensors", CHECKPOINT_RECORD  # no pickle: tensors + JSON; the record last


def save_checkpoint(output_dir, epoch: int, trainable, optimizer, scheduler, generator, best: dict, history: list,
                    epoch_losses: list, run_record: dict) -> None:
    """``output_dir/checkpoint-<epoch>``, built under a hidden name and renamed into place (visible only when
    complete); older checkpoints are removed after it."""
    from safetensors.torch import save_file

    from ..atomic import apply_default_modes, move_into_place, write_json

    tensors = {f"trainable.{name}": value for name, value in trainable.state_dict().items()}
    optimizer_state = optimizer.state_dict()
    for index, state in optimizer_state["state"].items():
        tensors.update({f"optimizer.{index}.{name}": value for name, value in state.items()})
    tensors["generator"] = generator.get_state()
    if best["state"] is not None:
        tensors.update({f"best.{name}": value for name, value in best["state"].items()})
    record = {"epoch": epoch, "scheduler": scheduler.state_dict(), "param_groups": optimizer_state["param_groups"],
              "best_epoch": best["epoch"], "best_dev": best["dev"], "history": history,
              "epoch_losses": [float(loss) for loss in epoch_losses]}  # the epochs since the last logged record
    output_dir = Path(output_dir)
    staging = output_dir / f"{PARTIAL_CHECKPOINT_PREFIX}{epoch}"
    shutil.rmtree(staging, ignore_errors=True)
    final = output_dir / f"{CHECKPOINT_PREFIX}{epoch}"
    with partial_checkpoint(staging, final, lambda: "the earlier checkpoints are unchanged"):
        staging.mkdir(parents=True)
        save_file({name: value.detach().cpu().contiguous() for name, value in tensors.items()},
                  str(staging / STATE_FILE))
        write_json(staging / RUN_RECORD, run_record)
        write_json(staging / RECORD_FILE, record)
        apply_default_modes(staging)
        move_into_place(staging, final)
    for older in output_dir.glob(f"{CHECKPOINT_PREFIX}*"):
        if older != final:
            shutil.rmtree(older, ignore_errors=True)


def load_checkpoint(folder: Path, trainable, optimizer, scheduler, generator, device) -> tuple:
    """Restore the states `save_checkpoint` wrote; returns ``(epoch, best, history, epoch_losses)``."""
    from safetensors.torch import load_file

    tensors = load_file(str(folder / STATE_FILE))
    record = json.loads((folder / RECORD_FILE).read_text())
    trainable.load_state_dict({name[len("trainable."):]: value for name, value in tensors.items()
                               if name.startswith("trainable.")})
    state = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = value.to(device)
    optimizer.load_state_dict({"state": state, "param_groups": record["param_groups"]})
    scheduler.load_state_dict(record["scheduler"])
    generator.set_state(tensors["generator"])
    best_state = {name[len("best."):]: value.to(device) for name, value in tensors.items() if name.startswith("best.")}
    best = {"epoch": record["best_epoch"], "dev": record["best_dev"], "state": best_state or None}
    losses = [torch.tensor(loss, device=device) for loss in record["epoch_losses"]]
    return record["epoch"], best, record["history"], losses


class CLSRTrainer:
    """Trains ``model.mlp`` (``e``) and a fresh linear projection ``h`` on cached pooled vectors.

    Its own loop, not a ``transformers.Trainer``: a step is a few small matrix products on an in-memory tensor,
    which the Trainer's per-step machinery would cost more than (this module's docstring says why in full).

    Args:
        model: a [`CLSRModel`][csekit.modeling.modeling_clsr.CLSRModel]; only ``model.mlp`` is updated (in place).
        args: `CLSRTrainingArguments`.
        train_vectors: ``(num_sentences, hidden)`` pooled vectors of ``corpus.sentences``.
        corpus: the positive pairs.
        held_out: `held_out_sentences`; no corpus sentence may belong to them, except to the sets listed in
            ``corpus.contaminated`` (overlap kept on purpose, and reported).
        dev_evaluator: optional [`CachedSTSEvaluator`][csekit.trainers.clsr.CachedSTSEvaluator] on STS-B dev for model
            selection.
        is_main_process: whether this process writes the checkpoints (``args.save_epochs``).
        run_record: what a resume must match, written into each checkpoint (the recipe's
            [`setup_record`][csekit.trainers.arguments.setup_record] of all its argument groups; default: the training
            arguments alone).
    """

    data_columns = (("sent0", "sent1"),)  # positive pairs (a sent0,sent1 .csv or STS-B's pairs scored >= 4)

    def __init__(self, model, args: CLSRTrainingArguments, train_vectors: torch.Tensor, corpus: PairCorpus,
                 held_out: HeldOutSentences, dev_evaluator: Optional[CachedSTSEvaluator] = None,
                 is_main_process: bool = True, run_record: Optional[dict] = None):
        if train_vectors.shape[0] != len(corpus.sentences):
            raise ValueError(f"{train_vectors.shape[0]} vectors for {len(corpus.sentences)} sentences")
        require_full_batch(corpus, args.per_device_train_batch_size)
        self.model = model
        self.args = args
        self.corpus = corpus
        self.held_out = held_out
        self.dev_evaluator = dev_evaluator
        self.is_main_process = is_main_process  # every process trains the same head; one writes checkpoints
        self.run_record = run_record or setup_record("csekit-clsr", None, training_args=args)
        self.device = next(model.mlp.parameters()).device
        self.train_vectors = train_vectors.to(self.device)
        self.pairs = corpus.pairs.to(self.device)

    @classmethod
    def from_dataset(cls, model, args: CLSRTrainingArguments, train_dataset, sts_evaluator=None,
                     data_dir: Optional[str] = None, encode_batch_size: int = 512) -> "CLSRTrainer":
        """The trainer from what a ``Trainer``'s caller passes: positive pairs as a ``datasets.Dataset`` (or a dict)
        with ``sent0`` and ``sent1`` columns, and optionally an
        [`STSEvaluator`][csekit.evaluation.sts.STSEvaluator] for model selection (STS-B dev). As the recipe does by
        default (``--test_overlap drop``), a pair with a sentence of an STS test or dev set (``data_dir``'s data
        folder: `held_out_sentences`) is dropped; the backbone's pooled vectors are computed here, once (the recipe
        caches them on disk: ``csekit.trainers.EmbeddingCache``)."""
        check_trainer_model(model, cls)
        backbone = getattr(getattr(getattr(model, "config", None), "encoder_config", None), "model_type", None)
        tokenizer = model.known_tokenizer() if backbone in DECODER_BACKBONES else None
        if tokenizer is not None:  # the frozen decoder's vectors are pooled as the saved folder pools them
            model.tokenizer = prepare_decoder_tokenizer(tokenizer, backbone, model.config.pooler_type,
                                                        "model.tokenizer")
        columns = dataset_column_names(train_dataset, "train_dataset")
        if not {"sent0", "sent1"} <= set(columns):
            raise DataError(f"train_dataset: columns {','.join(columns)}, but CLSR trains on positive pairs, "
                            "sent0,sent1")
        pairs = {name: list(train_dataset[name]) for name in ("sent0", "sent1")}  # (a hard_neg column is not read)
        check_train_dataset(pairs, cls.data_columns, args.per_device_train_batch_size, "train_dataset", "clsr")
        if sts_evaluator is not None and not isinstance(sts_evaluator, STSEvaluator):
            raise DataError(f"sts_evaluator: a {type(sts_evaluator).__name__}; pass csekit.evaluation.STSEvaluator("
                            "data_dir, ['STSBenchmark'], split='dev'), which scores the model in training")
        held_out = held_out_sentences(data_dir)
        corpus = build_pair_corpus(pairs["sent0"], pairs["sent1"], held_out)
        require_full_batch(corpus, args.per_device_train_batch_size)
        args = steps_as_epochs(args, len(corpus.pairs) // args.per_device_train_batch_size)
        vectors = model.encode_pooled(corpus.sentences, batch_size=encode_batch_size)
        dev = None if sts_evaluator is None else CachedSTSEvaluator(
            sts_evaluator, model.encode_pooled(sts_evaluator.sentences(), batch_size=encode_batch_size))
        record = {**setup_record("csekit-clsr", None, training_args=args),
                  TRAIN_DATA: data_fingerprint(pairs)}
        return cls(model, args, vectors, corpus, held_out, dev, run_record=record)

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
        run = self._start()
        start = time.perf_counter()
        progress = trange(run.first_epoch, self.args.num_train_epochs, desc="CLSR epochs", initial=run.first_epoch,
                          total=self.args.num_train_epochs)
        for epoch in progress:
            run.epoch_losses.append(self._train_epoch(run, epoch))
            last = epoch + 1 == self.args.num_train_epochs
            if self.args.logging_epochs and (epoch + 1) % self.args.logging_epochs == 0:
                logger.info("epoch %d: loss %.4g, lr %.4g", epoch + 1, float(run.epoch_losses[-1]),
                            run.scheduler.get_last_lr()[0])
            if (epoch + 1) % self.args.eval_epochs == 0 or last:
                record = self._evaluate(run, epoch, time.perf_counter() - start)
                if writer is not None:
                    for name in ("loss", "lr", "dev_STSBenchmark"):
                        if name in record:
                            writer.add_scalar(f"clsr/{name}", record[name], epoch + 1)
                progress.set_postfix({k: v for k, v in record.items() if k in ("loss", "dev_STSBenchmark")})
            if (self.args.save_epochs and (epoch + 1) % self.args.save_epochs == 0 and not last
                    and self.is_main_process):
                save_checkpoint(self.args.output_dir, epoch + 1, run.trainable, run.optimizer, run.scheduler,
                                run.generator, run.best, run.history, run.epoch_losses, self.run_record)
        if writer is not None:
            writer.close()
        return self._finish(run, time.perf_counter() - start)

    def _start(self) -> "_Run":
        """The head's training state: ``e`` and a fresh ``h``, LARS, warm-up + cosine, the pair-order generator;
        restored from a checkpoint when ``resume_from_checkpoint`` names one."""
        args, mlp = self.args, self.model.mlp
        torch.manual_seed(args.seed)
        size = mlp.dense_out.out_features
        projection = nn.Linear(size, size).to(self.device)  # h: training only, never saved
        trainable = nn.ModuleDict({"mlp": mlp, "projection": projection}).train()
        optimizer = LARS(lars_param_groups(trainable, args.weight_decay), lr=args.learning_rate,
                         momentum=args.lars_momentum, trust_coefficient=args.lars_trust_coefficient)
        steps_per_epoch = len(self.corpus.pairs) // args.per_device_train_batch_size
        scheduler = get_cosine_schedule_with_warmup(
            optimizer, args.warmup_epochs * steps_per_epoch, args.num_train_epochs * steps_per_epoch
        )
        run = _Run(trainable, projection, optimizer, scheduler, torch.Generator().manual_seed(args.seed),
                   steps_per_epoch)
        if args.resume_from_checkpoint:
            folder = Path(find_checkpoint(args.output_dir, args.resume_from_checkpoint))
            check_resume(folder, self.run_record, args.resume_accept_changes)  # (the recipe's check, run again)
            run.first_epoch, run.best, run.history, run.epoch_losses = load_checkpoint(
                folder, trainable, optimizer, scheduler, run.generator, self.device)
            logger.info("resumed from %s at epoch %d", folder, run.first_epoch)
        return run

    def _train_epoch(self, run: "_Run", epoch: int) -> torch.Tensor:
        """One pass over the pairs in a fresh random order; returns the mean loss (a device tensor)."""
        batch, mlp = self.args.per_device_train_batch_size, self.model.mlp
        pairs = self.pairs
        order = torch.randperm(len(pairs), generator=run.generator).to(self.device)
        total = torch.zeros((), device=self.device)
        for step in range(run.steps_per_epoch):
            rows = pairs[order[step * batch : (step + 1) * batch]].T.reshape(-1)  # all sent0, then all sent1
            projected = run.projection(mlp(self.train_vectors[rows]))
            loss = nt_xent_loss(projected[:batch], projected[batch:], self.model.config.temperature)
            if not torch.isfinite(loss):  # before the update: the head never holds a NaN
                raise DataError(f"epoch {epoch + 1}, step {step + 1}: the loss is not finite "
                                f"({float(loss.detach()):.4g}); the run stopped before this update; lower "
                                "--learning_rate or check the data")
            run.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            run.optimizer.step()
            run.scheduler.step()
            total += loss.detach()
        return total / run.steps_per_epoch

    def _evaluate(self, run: "_Run", epoch: int, seconds: float) -> dict:
        """The record of the epochs since the last one: mean loss, learning rate, STS-B dev; keeps the best ``e``."""
        mlp = self.model.mlp
        record = {"epoch": epoch + 1, "loss": float(torch.stack(run.epoch_losses).mean()),
                  "lr": run.scheduler.get_last_lr()[0], "seconds": round(seconds, 1)}
        run.epoch_losses = []
        if self.dev_evaluator is not None:
            mlp.eval()
            record["dev_STSBenchmark"] = self.dev_evaluator(mlp)["STSBenchmark"]
            mlp.train()
            if record["dev_STSBenchmark"] > run.best["dev"]:
                run.best = {"epoch": epoch + 1, "dev": record["dev_STSBenchmark"],
                            "state": {k: v.detach().clone() for k, v in mlp.state_dict().items()}}
        run.history.append(record)
        logger.info("%s", record)
        return record

    def run_arguments(self) -> dict:
        """``training_args.json`` of the run, as a recipe records it: the backbone and the method's settings, the
        pairs trained on (their hash and count, after the held-out ones are dropped), every training argument."""
        return arguments_record(
            model_args={"model_name_or_path": built_from(self.model), **flag_settings(self.model.config)},
            data_args={"train_dataset": self.run_record.get(TRAIN_DATA), "train_pairs": len(self.corpus.pairs)},
            training_args=self.args)

    def _finish(self, run: "_Run", train_seconds: float) -> dict:
        """Put the best ``e`` back (in eval mode) and return the run's log."""
        mlp, best = self.model.mlp, run.best
        if best["state"] is not None:
            mlp.load_state_dict(best["state"])
        mlp.eval()
        self.model.training_arguments = self.run_arguments()  # a save of the model writes them (a recipe: its own)
        return {"history": run.history, "best_epoch": best["epoch"], "best_dev_STSBenchmark": best["dev"]
                if best["state"] is not None else None, "steps": run.steps_per_epoch * self.args.num_train_epochs,
                "train_seconds": round(train_seconds, 1)}


@dataclass
class _Run:
    """What changes while [`CLSRTrainer.train`][csekit.trainers.clsr.CLSRTrainer.train] runs (and what a checkpoint
    holds)."""

    trainable: nn.ModuleDict
    projection: nn.Linear
    optimizer: torch.optim.Optimizer
    scheduler: object
    generator: torch.Generator
    steps_per_epoch: int
    first_epoch: int = 0
    best: dict = field(default_factory=lambda: {"epoch": None, "dev": -float("inf"), "state": None})
    history: list = field(default_factory=list)
    epoch_losses: list = field(default_factory=list)


__all__ = ["CLSRTrainer", "CLSRTrainingArguments", "steps_as_epochs"]
