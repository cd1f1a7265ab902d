"""Trainer extensions: combined contrastive losses with per-component logging, STS-based model selection, and
checkpoints that appear only when complete."""

import copy
import logging
import math
import os
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

import torch
from accelerate.utils import DistributedType
from huggingface_hub import HfApi
from transformers import Trainer, TrainerCallback, TrainingArguments, enable_full_determinism, set_seed
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy, rotate_checkpoints

from ..atomic import apply_default_modes, move_into_place, write_json
from ..errors import DataError
from ..evaluation.sts import STSEvaluator
from ..methods import method_of_trainer
from ..modeling.adapters import adapter_folder_problem
from ..modeling.configuration_encoder import SentenceEncoderConfig
from ..modeling.encoding import BatchCache, progress
from ..modeling.losses import false_negative_mask
from ..modeling.modeling_encoder import SentenceEncoderForTraining
from ..preflight import (
    RUN_RECORD,
    TRAIN_DATA,
    check_model_inputs,
    check_prompt_room,
    check_resume,
    check_trainer_model,
    checkpoint_problem,
    find_checkpoint,
    prepare_decoder_tokenizer,
)
from .arguments import arguments_record, built_from, flag_settings, setup_record
from .collators import TEXT_IDS, ContrastiveCollator, text_id
from .data import check_rows, check_train_dataset, data_fingerprint, method_columns
from .finite import FiniteCheck
from .gradient_cache import GradientCache, average_gradients, unsupported_device
from .lora import apply_lora, check_lora_method, lora_config, lora_group
from .multi_dataset import (
    DatasetMix,
    MultiDatasetBatchSampler,
    mix_identity,
    one_training_dataset,
    use_dataset_prompts,
)
from .output_dir import PARTIAL_CHECKPOINT_PREFIX, partial_checkpoint

logger = logging.getLogger(__name__)
TRAINER_STATE = "trainer_state.json"
# where a cached step's gradients are averaged as DDP averages them; other engines shard or own the backward
CACHING_DISTRIBUTED_TYPES = (DistributedType.NO, DistributedType.MULTI_GPU, DistributedType.MULTI_CPU)


def run_record(model, args, data: Optional[str] = None, peft_config=None) -> dict:
    """The setup a resume from a run's checkpoints must match
    ([`csekit.preflight.check_resume`][csekit.preflight.check_resume]) when the
    recipe gave the trainer none: the method (its config's ``model_type``), the processes, every training argument,
    every method setting of the model's config ([`setup_record`][csekit.trainers.arguments.setup_record]), the
    adapters' settings of a ``peft_config`` ([`lora_group`][csekit.trainers.lora.lora_group]) and the
    training data's identity ``data`` ([`data_identity`][csekit.trainers.trainer.data_identity]), as the recipe's
    record holds them."""
    record = setup_record(model.config.model_type, args.world_size, training_args=args,
                          model_args=flag_settings(model.config), **lora_group(peft_config))
    return {**record, TRAIN_DATA: data} if data is not None else record


def data_identity(dataset, shares: Optional[dict] = None) -> Optional[str]:
    """What names a training dataset's content in a run record: the hash of its texts for a dataset of known size
    ([`data_fingerprint`][csekit.trainers.data.data_fingerprint], as ``--train_file``'s), for several datasets each
    one's with its ``shares`` of the steps ([`mix_identity`][csekit.trainers.multi_dataset.mix_identity]), else a
    streaming dataset's own fingerprint or description (its builder, config and split)."""
    if isinstance(dataset, DatasetMix):
        return mix_identity(dataset, shares)
    if hasattr(dataset, "__len__"):
        return data_fingerprint(dataset)
    info = getattr(dataset, "info", None)
    described = [getattr(info, name, None) for name in ("builder_name", "config_name", "dataset_name")]
    return (f"streaming {getattr(dataset, '_fingerprint', None) or ''} {getattr(dataset, 'split', None) or ''} "
            f"{' '.join(str(part) for part in described if part)}").strip()


def checked_stream(dataset, columns: tuple):
    """A streaming dataset whose rows are checked as they are read
    ([`check_rows`][csekit.trainers.data.check_rows]): its size is unknown before training, so its texts cannot be
    read up front."""
    def check(example: dict, number: int) -> dict:
        check_rows([example], columns, "train_dataset (streamed)", first=number + 1)
        return example

    return dataset.map(check, with_indices=True)


def check_contrastable(dataset, columns: tuple, examples_per_step: int, hard_negatives: bool) -> None:
    """With ``--duplicate_negatives mask``, refuse data where even its most varied batch (one row per distinct
    anchor first) leaves no anchor an unmasked negative
    ([`false_negative_mask`][csekit.modeling.losses.false_negative_mask]): each step's loss would be 0."""
    if not hasattr(dataset, "__len__"):
        return
    varied, rest, seen = [], [], set()
    for row in zip(*(dataset[name] for name in columns)):
        if row[0] not in seen:
            varied.append(row)
            seen.add(row[0])
        elif len(rest) < examples_per_step:
            rest.append(row)
        if len(varied) == examples_per_step:
            break
    batch = (varied + rest)[:examples_per_step]
    ids = torch.tensor([[text_id(text) for text in row] for row in batch])
    mask = false_negative_mask(ids, ids, 0, hard_negatives)
    own = torch.arange(len(batch))
    mask[own, own] = True  # the positive, which is no negative
    if bool(mask.all()):
        raise DataError("--duplicate_negatives mask: every in-batch candidate of this data is a copy of its anchor "
                        "or positive, so every step's loss is 0 and nothing trains; train on more than one distinct "
                        "text, or use --duplicate_negatives keep")


def model_inputs(inputs: dict) -> dict:
    """A batch without what only the loss reads (the texts' identities of ``--duplicate_negatives mask``)."""
    return {name: value for name, value in inputs.items() if name != TEXT_IDS}


def complete_checkpoints(folder: Path) -> str:
    """The names of ``folder``'s complete checkpoints, for a message (``none`` when there are none)."""
    names = sorted((path.name for path in Path(folder).glob(f"{PREFIX_CHECKPOINT_DIR}-*")
                    if path.is_dir() and checkpoint_problem(path) is None), key=lambda n: int(n.rsplit("-", 1)[1]))
    return ", ".join(names) or "none"


def require_finite_weights(model: torch.nn.Module, what: str) -> None:
    """Raise [`DataError`][csekit.trainers.trainer.DataError] before ``what`` (a checkpoint, the final model) is
    written from weights that are
    NaN or infinite: nothing non-finite is ever saved, whatever produced it."""
    bad = [name for name, tensor in model.state_dict().items()
           if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())]
    if bad:
        raise DataError(f"{what}: not written, {len(bad)} tensor(s) hold NaN or infinite values ({', '.join(bad[:3])}"
                        f"{' ...' if len(bad) > 3 else ''}); lower --learning_rate or check the data")


class CollatorEpoch(TrainerCallback):
    """Tells a collator with random draws (``randomness.py``), or a batch sampler of several datasets, the epoch whose
    batches it is about to collate or draw. The Trainer creates the epoch's dataloader iterator (and its worker
    processes) after ``on_epoch_begin``."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.collator.set_epoch(math.floor(state.epoch + 1e-6))  # a resumed run starts inside an epoch


class SamplerEpoch(CollatorEpoch):
    """`CollatorEpoch` for the batch sampler of several datasets (a callback class of its own: the Trainer keeps one
    callback per class)."""


class OptimizerStepHook(TrainerCallback):
    """Calls the model's ``after_optimizer_step`` once per optimizer step (after the update, before the gradients
    are cleared; once per update with gradient accumulation): momentum encoders, moving averages, queues."""

    def __init__(self, trainer: "ContrastiveTrainer"):
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.trainer.unwrapped().after_optimizer_step()


class NumericProgressCallback(ProgressCallback):
    """transformers' progress bar, titled ``Training``, whose log lines print values as numbers (``loss=0.0123``)
    rather than the quoted strings of its dict (``'loss': '0.0123'``); away from a terminal it prints a line every 5%
    of the steps instead of every step ([progress][csekit.modeling.encoding.progress])."""

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.training_bar = progress(desc="Training", total=state.max_steps, unit="step")
        self.current_step = 0

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.training_bar is not None:
            shown = {key: value for key, value in (logs or {}).items() if key != "total_flos"}
            self.training_bar.write("  ".join(
                f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}" for key, value in shown.items()))


# torch.compile modes that capture CUDA graphs
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


class ContrastiveTrainer(Trainer):
    """A ``Trainer`` whose loss is a sum of named components computed by
    [`compute_losses`][csekit.trainers.trainer.ContrastiveTrainer.compute_losses].

    Every component is logged separately (``loss_<name>``, averaged over the logging window and over processes)
    next to the total ``loss``. Evaluation runs an [`STSEvaluator`][csekit.evaluation.sts.STSEvaluator] (STS-B dev by
    default in
    the recipes) instead of a loss over ``eval_dataset``, so ``metric_for_best_model="STSBenchmark"`` keeps the best
    checkpoint by dev Spearman.

    Subclasses implement ``compute_losses(model, outputs, inputs) -> {"loss": total, "<name>": component, ...}``.

    With ``args.mini_batch_size`` below the per-device batch, or ``args.mini_batch_tokens``, every step is one exact
    gradient-cached step
    ([`gradient_cache`][csekit.trainers.gradient_cache]): the same loss and gradients, with one chunk's activations in
    memory at a time.

    With ``peft_config=LoraConfig(...)`` (as trl's trainers take it) or ``args.lora_r``, LoRA adapters train in place
    of the backbone's weights ([`add_adapters`][csekit.trainers.trainer.ContrastiveTrainer.add_adapters]).
    """

    # our losses are per-batch means: let Trainer divide by the accumulation steps
    loss_is_scaled_for_ga = False
    # the training data a method learns from, as its columns: sentences (unsupervised), pairs, pairs + hard negatives
    data_columns = (("sent0",), ("sent0", "sent1"), ("sent0", "sent1", "hard_neg"))

    def __init__(
        self,
        model=None,
        args=None,
        *rest,
        sts_evaluator: Optional[STSEvaluator] = None,
        eval_batch_size: int = 128,
        peft_config=None,
        **kwargs,
    ):
        if args is not None and args.push_to_hub:
            # Trainer's own pushes upload every checkpoint's training-time model (CMLM-CSE's auxiliary network
            # included) and the pickled training_args.bin, before the test scores the model card needs exist
            raise ValueError(
                "csekit trainers publish once, after the test evaluation: leave TrainingArguments.push_to_hub off and "
                "call trainer.push_to_hub() once eval_results.json is written (the recipes' --push_to_hub does this)"
            )
        check_trainer_model(model, type(self))
        self.peft_config = self.add_adapters(model, args, peft_config)
        self.base_model = built_from(model)  # for the run's training_args.json (model_name_or_path)
        if sts_evaluator is not None and not isinstance(sts_evaluator, STSEvaluator):
            raise DataError(f"sts_evaluator: a {type(sts_evaluator).__module__}.{type(sts_evaluator).__name__}; csekit "
                            "selects checkpoints on STS with csekit.evaluation.STSEvaluator(data_dir, "
                            "['STSBenchmark'], split='dev'), which scores the model in training")
        args = self.method_defaults(model, args, kwargs, sts_evaluator)
        tokenizer = kwargs.get("processing_class")
        if model is not None and tokenizer is not None:
            # the wrapper config names the tokenizer's special tokens, so the Trainer has nothing to "align" (and
            # no warning to print); a value the config already holds is left for the Trainer to report
            for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
                if getattr(tokenizer, name, None) is not None and getattr(model.config, name, None) is None:
                    setattr(model.config, name, getattr(tokenizer, name))
        collator = kwargs.get("data_collator")
        if (getattr(collator, "draws_at_random", False) and args is not None and args.dataloader_persistent_workers
                and args.dataloader_num_workers > 0):  # said before the Trainer makes the output folder
            raise DataError("--dataloader_persistent_workers: workers kept across epochs would collate every epoch "
                            "with the first epoch's random draws; leave it off")
        if sts_evaluator is not None and kwargs.get("eval_dataset") is None:
            # Trainer insists on an eval_dataset for step-wise evaluation; the evaluator's pairs are that data
            kwargs["eval_dataset"] = sts_evaluator.as_dataset()
        super().__init__(model, args, *rest, **kwargs)
        if self.pop_callback(ProgressCallback) is not None:
            self.add_callback(NumericProgressCallback)
        if hasattr(self.data_collator, "set_epoch"):
            self.add_callback(CollatorEpoch(self.data_collator))
        self.add_callback(OptimizerStepHook(self))
        self.use_prompt()
        self.sts_evaluator = sts_evaluator
        self.eval_batch_size = eval_batch_size
        self.eval_batches = BatchCache()  # the dev sentences, tokenized once for every evaluation of the run
        self._component_sums = defaultdict(float)
        self._component_count = 0
        self._checkpoint_run_dir = None
        self.finite_check = FiniteCheck()  # every update's losses and gradient, read without stalling (finite.py)
        self._count_sums = defaultdict(float)  # counts logged per step (masked duplicate pairs)
        self.gradient_cache = self.make_gradient_cache()
        if getattr(self.args, "duplicate_negatives", "keep") == "mask" and not getattr(self.data_collator,
                                                                                      "text_ids", False):
            raise DataError("--duplicate_negatives mask needs the texts' identities in each batch: a collator with "
                            "text_ids=True (ContrastiveCollator)")

    def use_prompt(self) -> None:
        """The model's prompt (``config.default_prompt``: its ``prompt``, else the default prompt of the
        sentence-transformers folder it was trained from) is prepended to every training text by the collator, as
        ``encode``, the evaluation and sentence-transformers prepend it; one line where the method cannot train with
        one (the config's ``prompt_refused``) or the collator cannot prepend it."""
        config = getattr(self.unwrapped(), "config", None)
        prompt = getattr(config, "default_prompt", "")
        if not prompt:
            return
        if config.prompt_refused:
            raise DataError(f"the model's prompt {prompt!r} (its config's prompt, or the default prompt of the "
                            f"sentence-transformers folder it was trained from): {config.prompt_refused}")
        if not hasattr(self.data_collator, "prompt"):
            raise DataError(f"the model's prompt {prompt!r}: the data collator ({type(self.data_collator).__name__}) "
                            "cannot prepend it to the training texts; use the method's collator")
        self.data_collator.prompt = prompt

    def use_dataset_prompts(self) -> None:
        """``--dataset_prompts`` (``dataset_prompts={name: prompt}``): each named dataset of several its own prompt
        in training, in place of the model's
        ([`use_dataset_prompts`][csekit.trainers.multi_dataset.use_dataset_prompts]); one line where the collator
        cannot take one."""
        config = getattr(self.unwrapped(), "config", None)
        prompts = use_dataset_prompts(self.train_dataset, getattr(self.args, "dataset_prompts", None),
                                      getattr(config, "prompt_refused", ""))
        if prompts and not hasattr(self.data_collator, "batch_prompt"):
            raise DataError(f"--dataset_prompts: the data collator ({type(self.data_collator).__name__}) cannot put a "
                            "dataset's prompt before its texts; use the method's collator")

    @classmethod
    def add_adapters(cls, model, args, peft_config=None):
        """LoRA adapters in ``model``'s encoder ([`apply_lora`][csekit.trainers.lora.apply_lora]) when ``args`` has
        ``--lora_r`` or the caller gave a ``peft_config``, where the method trains them
        ([`check_lora_method`][csekit.trainers.lora.check_lora_method]). Returns the ``LoraConfig`` (``None``: the
        whole model trains)."""
        check_lora_method(method_of_trainer(cls), args, peft_config)
        config = lora_config(args, peft_config)
        if config is not None and model is not None:
            apply_lora(model, config, args)
        if getattr(args, "save_adapter", False) and model is not None:
            problem = adapter_folder_problem(model) if config is not None else "the run trains no adapters"
            if problem:
                raise DataError(f"--save_adapter: {problem}; or publish the merged weights (the default)")
        return config

    @classmethod
    def default_collator(cls, tokenizer, model, max_length: int = 32, padding_free: bool = False):
        """The method's training collator for ``model`` (the recipes' too): a
        [`ContrastiveCollator`][csekit.trainers.collators.ContrastiveCollator] with the model's ``num_views`` (2 when
        it has none); ``max_length`` 32 is the papers' truncation length."""
        return ContrastiveCollator(tokenizer, max_length=max_length, unsupervised_views=getattr(model.config,
                                                                                                "num_views", 2),
                                   padding_free=padding_free)

    @classmethod
    def check_columns(cls, column_names, source: str = "train_dataset", method: Optional[str] = None) -> tuple:
        """The data columns of ``column_names`` the method trains on (``("sent0",)``, ...), or a one-line
        [`DataError`][csekit.errors.DataError] naming ``source``, the ``method`` (default: this class) and the
        columns it takes."""
        return method_columns(column_names, cls.data_columns, source, method or cls.__name__)

    @classmethod
    def check_step(cls, args, columns: tuple, method=None) -> None:
        """What one step of ``args`` (training arguments) on data ``columns`` must be able to do, checked for both
        doors (``csekit train`` and ``train()``): each anchor sees a negative (else the loss is constant and nothing
        trains), and gradient caching only where the ``method`` (registry entry) has that capability."""
        processes = args.world_size
        if cls.negatives_per_anchor(args.per_device_train_batch_size * processes, columns) < 1:
            raise DataError(f"--per_device_train_batch_size {args.per_device_train_batch_size} x {processes} "
                            "process(es): each anchor would see no negative, so the contrastive loss is constant and "
                            "nothing trains; use 2 or more examples per step")
        for flag in ("mini_batch_size", "mini_batch_tokens"):
            if getattr(args, flag, None) and method is not None and not method.gradient_caching:
                raise DataError(f"--{flag}: {method.name} does not support gradient caching (the registry's "
                                "gradient_caching capability)")
        cached = getattr(args, "mini_batch_size", None) or getattr(args, "mini_batch_tokens", None)
        if cached and args.torch_compile and args.torch_compile_mode in CUDA_GRAPH_MODES:
            raise DataError(f"--torch_compile_mode {args.torch_compile_mode}: CUDA graphs replay one captured call "
                            "per step, and gradient caching (--mini_batch_size/--mini_batch_tokens) calls the model "
                            "several times before its backward; use --torch_compile_mode default with it")

    def method_defaults(self, model, args, kwargs: dict, sts_evaluator) -> Optional[TrainingArguments]:
        """What a Python caller may leave out, as ``SentenceTransformerTrainer(model, args, train_dataset)`` allows:
        the tokenizer (``processing_class``, else the model's), the method's collator
        ([`default_collator`][csekit.trainers.trainer.ContrastiveTrainer.default_collator], seeded by ``data_seed`` or
        ``seed``), and evaluation, which needs an ``sts_evaluator``: without one, step-wise evaluation (the default of
        [`CSETrainingArguments`][csekit.trainers.arguments.CSETrainingArguments]) is turned off with a logged line and
        the last step's model is kept. The data's columns are checked
        ([`check_columns`][csekit.trainers.trainer.ContrastiveTrainer.check_columns]) and all are kept for the
        collator. transformers' filter of non-finite logged losses is turned off (it reads the loss on the host at
        every step, and csekit's own check stops the run at the first non-finite loss before its update). Returns the
        arguments the Trainer runs with (a copy when it changed them)."""
        tokenizer = kwargs.get("processing_class")
        if tokenizer is None and hasattr(model, "known_tokenizer"):
            tokenizer = kwargs["processing_class"] = model.known_tokenizer()
        if tokenizer is not None and isinstance(getattr(model, "config", None), SentenceEncoderConfig):
            prepare_decoder_tokenizer(tokenizer, model.config.encoder_config.model_type, model.config.pooler_type,
                                      "processing_class")
        if tokenizer is not None and getattr(model, "_tokenizer", False) is None:
            model.tokenizer = tokenizer  # saved with the model: its folder loads in sentence-transformers
        # several datasets (a dict of them) are read as one, every step's batch from one of them (multi_dataset.py)
        dataset = kwargs["train_dataset"] = one_training_dataset(kwargs.get("train_dataset"))
        if getattr(dataset, "column_names", None) is not None and not isinstance(dataset, dict):
            self.check_columns(dataset.column_names)
        if kwargs.get("data_collator") is None and model is not None and dataset is not None:
            if tokenizer is None:
                raise DataError(f"{type(self).__name__}: no tokenizer to collate with; pass processing_class=tokenizer")
            collator = kwargs["data_collator"] = self.default_collator(tokenizer, model)
            collator.text_ids = getattr(args, "duplicate_negatives", "keep") == "mask"  # as the recipes' collator
            seed = getattr(args, "data_seed", None)
            collator.draws.seed = seed if seed is not None else getattr(args, "seed", collator.draws.seed)
        if args is not None and args.logging_nan_inf_filter:  # two host reads a step; the finite check covers it
            args = copy.copy(args)
            args.logging_nan_inf_filter = False
        if (args is not None and args.eval_strategy != IntervalStrategy.NO and sts_evaluator is None
                and kwargs.get("eval_dataset") is None):
            logger.warning("no sts_evaluator: evaluation (eval_strategy %s) is off and the last step's model is kept; "
                           "pass sts_evaluator=STSEvaluator(data_dir, ['STSBenchmark'], 'dev') to select on STS-B "
                           "dev", args.eval_strategy.value)
            args = copy.copy(args)
            args.eval_strategy, args.load_best_model_at_end = IntervalStrategy.NO, False
            args.metric_for_best_model = None
        return args

    def train(self, resume_from_checkpoint=None, trial=None, **kwargs):
        """The Trainer's ``train``, after [`preflight`][csekit.trainers.trainer.ContrastiveTrainer.preflight]: the
        checks ``csekit train`` makes, as the same code, so a Python caller's run is refused in one line where the
        command line's would be. Afterwards the model runs without the mixed-precision autocast of its training
        forward: its scores and ``encode`` are those of its saved folder."""
        resume = self.preflight(resume_from_checkpoint)
        # seeded here as at construction: another trainer or model built since then (its own seed, its draws) must not
        # change this run; a resume restores the checkpoint's random states instead
        enable_full_determinism(self.args.seed) if self.args.full_determinism else set_seed(self.args.seed)
        output = super().train(resume_from_checkpoint=resume, trial=trial, **kwargs)
        self.finite_check.resolve()  # the last update's flag
        # accelerate wrapped the model's forward in --bf16/--fp16 autocast for training; the trained model encodes in
        # float32 from here on (its scores, a caller's encode), as its saved folder loads
        self.accelerator.unwrap_model(self.model, keep_fp32_wrapper=False)
        return output

    def preflight(self, resume_from_checkpoint=None) -> Optional[str]:
        """Check before work, for every door: the training data
        ([`check_train_dataset`][csekit.trainers.data.check_train_dataset]: columns, size, every text; a streaming
        dataset's rows as they are read), what one step can learn
        ([`check_step`][csekit.trainers.trainer.ContrastiveTrainer.check_step], and with ``--duplicate_negatives
        mask`` [`check_contrastable`][csekit.trainers.trainer.check_contrastable]), the tokenizer and truncation
        length against the backbone ([`check_model_inputs`][csekit.preflight.check_model_inputs]), and a resume
        target against this run's record, the data's identity included
        ([`check_resume`][csekit.preflight.check_resume]). Returns the checkpoint to resume from (``True`` resolved
        to the newest complete one), or ``None``."""
        args, method = self.args, method_of_trainer(type(self))
        examples = args.per_device_train_batch_size * args.world_size
        self.use_dataset_prompts()
        mixed = isinstance(self.train_dataset, DatasetMix)
        parts = self.train_dataset.sources() if mixed else {"train_dataset": self.train_dataset}
        for source, dataset in parts.items():
            columns = check_train_dataset(dataset, self.data_columns, examples, source,
                                          method.name if method else type(self).__name__)
            self.check_step(args, columns, method)
            if getattr(args, "duplicate_negatives", "keep") == "mask":
                check_contrastable(dataset, columns, examples, len(columns) > 2)
        if mixed:
            self.batch_sampler()  # made now, with its checks (whole batches, a sampler csekit has)
        if not hasattr(self.train_dataset, "__len__"):
            self.train_dataset = checked_stream(self.train_dataset, columns)
        model = self.accelerator.unwrap_model(self.model)
        if self.processing_class is not None and hasattr(model, "config"):
            check_model_inputs(type(model).__name__, model.config.to_dict(), self.processing_class,
                               getattr(self.data_collator, "max_length", None) or None, "max_length")
            prompts = [getattr(self.data_collator, "prompt", "")]
            prompts += list(self.train_dataset.prompts.values()) if mixed else []
            for prompt in prompts:
                check_prompt_room(prompt, self.processing_class, getattr(self.data_collator, "max_length", None),
                                  "max_length")
        if self.setup_record is None:
            self.data_identity = data_identity(self.train_dataset, self.mix_shares())
        if not resume_from_checkpoint:
            return None
        which = "last" if resume_from_checkpoint is True else str(resume_from_checkpoint)
        checkpoint = find_checkpoint(args.output_dir, which)
        check_resume(checkpoint, self.run_record(), getattr(args, "resume_accept_changes", False))
        return checkpoint

    def batch_sampler(self) -> Optional[MultiDatasetBatchSampler]:
        """The sampler of several datasets' batches (``None`` for one dataset), seeded by ``data_seed``, else
        ``seed``; the epoch callback tells it each epoch."""
        if not isinstance(self.train_dataset, DatasetMix):
            return None
        if self._batch_sampler is None or self._batch_sampler.mix is not self.train_dataset:
            self._batch_sampler = MultiDatasetBatchSampler.of_arguments(self.train_dataset, self.args)
            self.add_callback(SamplerEpoch(self._batch_sampler))
        return self._batch_sampler

    _batch_sampler: Optional[MultiDatasetBatchSampler] = None

    def mix_shares(self) -> Optional[dict]:
        """Each dataset's share of the steps, for several datasets."""
        sampler = self.batch_sampler()
        return sampler.shares() if sampler is not None else None

    def get_train_dataloader(self):
        """The Trainer's loader; for several datasets, one whose batches each come from one dataset
        ([`MultiDatasetBatchSampler`][csekit.trainers.multi_dataset.MultiDatasetBatchSampler]), prepared by
        accelerate as the Trainer prepares its own."""
        sampler = self.batch_sampler()
        if sampler is None:
            return super().get_train_dataloader()
        args = self.args
        loader = torch.utils.data.DataLoader(
            self.train_dataset, batch_sampler=sampler, collate_fn=self.data_collator,
            num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory,
            prefetch_factor=args.dataloader_prefetch_factor if args.dataloader_num_workers else None)
        return self.accelerator.prepare(loader)

    def _remove_unused_columns(self, dataset, description: Optional[str] = None):
        """Every column is kept: the method's collator reads the texts (``sent0``, ...), not ``forward``'s inputs."""
        return dataset

    def _get_collator_with_removed_columns(self, data_collator, description: Optional[str] = None):
        return data_collator

    @classmethod
    def negatives_per_anchor(cls, examples_per_step: int, columns: tuple) -> int:
        """The in-batch negatives each anchor is contrasted with in one step of ``examples_per_step`` examples (the
        per-device batch times the processes; accumulation adds none) of the data ``columns``: every other
        example's positive."""
        return examples_per_step - 1

    def make_gradient_cache(self) -> Optional[GradientCache]:
        """The gradient cache of ``--mini_batch_size`` or ``--mini_batch_tokens`` (``None`` when unset, or a count not
        below the per-device batch); whatever it cannot do exactly is refused in one line."""
        size = getattr(self.args, "mini_batch_size", None)
        tokens = getattr(self.args, "mini_batch_tokens", None)
        if not size and not tokens:
            return None
        flag = "--mini_batch_tokens" if tokens else "--mini_batch_size"
        batch = self.args.per_device_train_batch_size
        if size and size >= batch:
            logger.info("--mini_batch_size %d is not below the per-device batch %d: each step is encoded whole, "
                        "without gradient caching", size, batch)
            return None
        reason = unsupported_device(self.args.device)
        if reason is None and self.accelerator.distributed_type not in CACHING_DISTRIBUTED_TYPES:
            reason = (f"it runs under DDP (one process per device) or in one process, not "
                      f"{self.accelerator.distributed_type.value}")
        if reason is None and self.args.n_gpu > 1:
            reason = "one process drives several GPUs (DataParallel); launch one process per GPU with accelerate"
        if reason is not None:
            raise DataError(f"{flag}: {reason}")
        return GradientCache(size or None, self.args.device, tokens or None)

    def compute_losses(self, model, outputs, inputs) -> dict:
        raise NotImplementedError

    def with_matryoshka(self, model, outputs, term: Callable[[torch.Tensor], torch.Tensor],
                        contrastive: torch.Tensor) -> tuple:
        r"""The method's contrastive term plus its Matryoshka terms (Kusupati et al., 2022; off unless the config has
        ``matryoshka_dims``):

        $$ L_c^{MRL} = L_c(z) + \sum_k w_k\, L_c(v_{1:d_k}) $$

        ``L_c`` is the method's contrastive term (``term``, a function of ``(batch, views, size)`` vectors),
        ``contrastive`` its value on the training embeddings ``z``, ``v`` the vectors ``encode`` returns
        ([`sentence_vectors`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.sentence_vectors]),
        ``v_{1:d}`` their first ``d``
        coordinates (the cosine re-normalises them), ``w_k`` ``matryoshka_weights`` (1 each by default). Where the
        head is used at inference (supervised SimCSE) ``v = z`` and this is MRL's loss as sentence-transformers'
        ``MatryoshkaLoss`` computes it; where the head is training-only (unsupervised SimCSE, WhitenedCSE's pooled
        inference) the sizes are trained on the vectors users truncate, not on the head's. A term with extra
        negatives (a queue, [`info_nce_loss`][csekit.modeling.losses.info_nce_loss]'s ``extra_negatives``) cuts them to
        the size of the vectors it is given, ``queue[:, :vectors.shape[-1]]``, so each size contrasts them too.
        Returns ``(total, {"matryoshka_<d>": L_c(v_{1:d}), ...})``."""
        config = self.unwrapped(model).config
        if not config.matryoshka_dims:
            return contrastive, {}
        vectors = self.unwrapped(model).sentence_vectors(outputs)
        if vectors is None:  # (refused before training: trainers/runner.py)
            raise DataError("--matryoshka_dims: the model's inference vectors are not a Linear chain over the pooler")
        weights = config.matryoshka_weights or [1.0] * len(config.matryoshka_dims)
        terms = {f"matryoshka_{size}": term(vectors[..., :size]) for size in config.matryoshka_dims}
        total = contrastive + sum(weight * value for weight, value in zip(weights, terms.values()))
        return total, terms

    def forward_losses(self, model, inputs) -> tuple:
        """``(outputs, losses)`` of one batch: the forward and the method's loss terms, and nothing that touches the
        trainer's host-side state, so ``torch.compile`` takes it as one graph (tests/test_compile.py)."""
        outputs = model(**model_inputs(inputs))
        return outputs, self.compute_losses(model, outputs, inputs)

    @property
    def step_function(self):
        """What a batch's forward and losses run through: ``forward_losses``, or under ``--torch_compile`` that
        function compiled once with the arguments' backend and mode, so the loss is traced into the forward's graph
        (transformers compiles the model alone; its compiled module is inlined here)."""
        if not self.args.torch_compile:
            return self.forward_losses
        if getattr(self, "_compiled_forward_losses", None) is None:
            self._compiled_forward_losses = torch.compile(
                self.forward_losses, backend=self.args.torch_compile_backend or "inductor",
                mode=self.args.torch_compile_mode)
        return self._compiled_forward_losses

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs, losses = self.step_function(model, inputs)
        if model.training:
            self.record_losses(losses)
        return (losses["loss"], outputs) if return_outputs else losses["loss"]

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step, or with ``--mini_batch_size``/``--mini_batch_tokens`` the gradient-cached one: the same
        loss scaling and ``accelerator.backward`` for the loss, then the chunks' backward passes, then the gradients
        averaged over processes as DDP would."""
        if self.gradient_cache is None:
            return super().training_step(model, inputs, num_items_in_batch)
        model.train()
        if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
            self.optimizer.train()
        inputs = self._prepare_inputs(inputs)
        steps = self.current_gradient_accumulation_steps

        def backward(loss):
            self.accelerator.backward(loss / steps)

        losses = self.gradient_cache.step(self.unwrapped(model), model_inputs(inputs),
                                          lambda outputs: self.compute_losses(model, outputs, inputs), backward,
                                          self.accelerator.autocast)
        self.record_losses(losses)
        average_gradients(model.parameters(), self.accelerator.num_processes)
        return losses["loss"] / steps

    def record_losses(self, losses: dict) -> None:
        """Keep a training micro-batch's loss components for the log and its finiteness for the update's check."""
        for name, value in losses.items():
            if name != "loss":
                self._component_sums[name] += value.detach().float()
        self._component_count += 1
        self.finite_check.record(losses)

    def duplicate_mask(self, inputs: dict, hard_negatives: bool = False) -> Optional[torch.Tensor]:
        """With ``--duplicate_negatives mask``, the in-batch candidates each local anchor must not be contrasted with
        ([`false_negative_mask`][csekit.modeling.losses.false_negative_mask] over every process's texts), counted for
        the log as
        ``masked_pairs`` per step; ``None`` otherwise (the paper's loss)."""
        if getattr(getattr(self, "args", None), "duplicate_negatives", "keep") != "mask":
            return None
        text_ids = inputs.get(TEXT_IDS)
        if text_ids is None:
            raise DataError("--duplicate_negatives mask: the batch has no text_ids (use ContrastiveCollator with "
                            "text_ids=True)")
        everyone = self.accelerator.gather(text_ids) if self.accelerator.num_processes > 1 else text_ids
        mask = false_negative_mask(text_ids, everyone, self.accelerator.process_index, hard_negatives)
        if self.model.training:
            self._count_sums["masked_pairs"] += mask.sum().detach().float()
        return mask

    def _get_grad_norm(self, model, grad_norm=None):
        """The Trainer's gradient norm, computed before every optimizer step, and where a non-finite loss or gradient
        stops the run ([`FiniteCheck`][csekit.trainers.finite.FiniteCheck]): the update's flag is queued without a
        host read, a fused optimizer skips a non-finite update on the device, and the flag is read at the next update
        or before an evaluation, a checkpoint, a save or the end of training, whichever comes first. Under fp16 the
        gradient scaler skips steps with overflowing gradients itself (that is its job), so only the loss is checked
        there."""
        grad_norm = super()._get_grad_norm(model, grad_norm)
        self.finite_check.queue(self.state.global_step + 1, grad_norm, self.optimizer,
                                scaled=self.accelerator.scaler is not None)
        return grad_norm

    def log(self, logs: dict, start_time: Optional[float] = None) -> None:
        if "loss" in logs and self._component_count:
            names = sorted(self._component_sums)
            means = torch.stack([torch.as_tensor(self._component_sums[n]) for n in names]) / self._component_count
            means = self.accelerator.reduce(means.to(self.accelerator.device), reduction="mean")
            logs.update({f"loss_{name}": float(f"{value:.6g}") for name, value in zip(names, means.tolist())})
            if self._count_sums:  # summed over processes, per optimizer step
                steps = self._component_count / self.args.gradient_accumulation_steps
                counts = torch.stack([torch.as_tensor(value) for value in self._count_sums.values()])
                counts = self.accelerator.reduce(counts.to(self.accelerator.device), reduction="sum") / steps
                logs.update({name: float(f"{value:.6g}") for name, value in zip(self._count_sums, counts.tolist())})
                self._count_sums.clear()
            self._component_sums.clear()
            self._component_count = 0
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        self.finite_check.resolve()  # no score of weights a non-finite update reached
        if self.sts_evaluator is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        model.eval()
        tokenizer = self.processing_class
        model.tokenizer = tokenizer
        try:
            scores = self.sts_evaluator(  # model.encode, with a bar named after the job on the main process
                lambda sentences: model.encode_with(
                    lambda batch: model(**batch).embeddings, sentences, self.eval_batch_size,
                    show_progress_bar=self.is_world_process_zero(), desc="STS dev", cache=self.eval_batches).numpy()
            )
        finally:
            model.train(was_training)
        metrics = {f"{metric_key_prefix}_{task}": score for task, score in scores.items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    # ---------------------------------------------------------------------------------------------- checkpoints
    def _get_output_dir(self, trial) -> str:
        return self._checkpoint_run_dir or super()._get_output_dir(trial)

    def _run_epoch(self, *args, **kwargs):
        """The Trainer's epoch, unless the run already made its last step: a resume from the checkpoint of the last
        step (a kill in the final save, scoring or commit) trains nothing more and ends as the uninterrupted run
        (the Trainer's loop would take one step before checking)."""
        if self.state.max_steps and self.state.global_step >= self.state.max_steps:
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint, visible only when complete. The Trainer writes ``checkpoint-N`` (model,
        optimizer, scheduler, random states, ``trainer_state.json`` last) into the hidden ``.partial-checkpoint-N``
        (its run folder is redirected there through ``_get_output_dir``), which is then renamed into
        ``output_dir``: a kill inside the save leaves the complete checkpoints as they were plus a hidden folder the
        next run removes. Rotation (``save_total_limit``) runs after the rename, so it never removes the newest
        complete checkpoint, nor the best one."""
        self.finite_check.resolve()  # the update just made, read before anything of it is written
        require_finite_weights(model, f"checkpoint-{self.state.global_step}")
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        partial = run_dir / f"{PARTIAL_CHECKPOINT_PREFIX}{self.state.global_step}"
        if self.args.should_save:
            shutil.rmtree(partial, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self._checkpoint_run_dir = str(partial)

        def kept() -> str:
            previous = (f"the previous model in {run_dir} is unchanged" if (run_dir / "config.json").is_file()
                        else f"no model was written to {run_dir}")
            return f"{previous}; complete checkpoints: {complete_checkpoints(run_dir)}"

        with partial_checkpoint(partial, run_dir / name, kept):
            try:
                super()._save_checkpoint(model, trial)  # its rotation sees the one checkpoint of `partial`: a no-op
            finally:
                self._checkpoint_run_dir = None
            self.accelerator.wait_for_everyone()  # every process wrote its random state
            if self.args.should_save:  # (a multi-node run without a shared folder needs --save_on_each_node)
                write_json(partial / name / RUN_RECORD, self.run_record())
                if self.state.best_global_step == self.state.global_step:  # the Trainer recorded the hidden path
                    self.state.best_model_checkpoint = str(run_dir / name)
                    self.state.save_to_json(str(partial / name / TRAINER_STATE))
                apply_default_modes(partial / name)  # safetensors writes 0o600 files
                for path in (partial / name).rglob("*"):  # sub-folders too: the sentence-transformers modules
                    if path.is_file():
                        with open(path, "rb") as stream:
                            os.fsync(stream.fileno())
                move_into_place(partial / name, run_dir / name)
        if self.args.should_save:
            shutil.rmtree(partial, ignore_errors=True)
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)
        self.accelerator.wait_for_everyone()

    def save_model(self, output_dir: Optional[str] = None, _internal_call: bool = False) -> None:
        """The Trainer's save; for a training-only model
        ([`SentenceEncoderForTraining`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining]) the
        final save writes its published sentence encoder, while checkpoints (``_internal_call``) keep the whole
        training model. A final save is refused in one line, nothing written, when a weight is not finite."""
        model = self.accelerator.unwrap_model(self.model)
        if _internal_call:  # a checkpoint: the head stays in the weights index, which a resume reads by name
            model.saving_checkpoint = True
            try:
                return super().save_model(output_dir, _internal_call)
            finally:
                model.saving_checkpoint = False
        self.finite_check.resolve()
        require_finite_weights(model, "the final model")
        if not isinstance(model, SentenceEncoderForTraining):
            return super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self.save_whole(model.sentence_encoder(), output_dir or self.args.output_dir)

    def save_whole(self, model, output_dir: str, state_dict=None) -> None:
        """``model``'s folder with the trainer's tokenizer, written whole by its ``save_pretrained`` (staged, then
        committed under the folder's lock: [`staged_save`][csekit.modeling.folder_commit.staged_save]), never file by
        file into the folder."""
        if self.processing_class is not None:
            model.tokenizer = self.processing_class
        if self.setup_record is None:  # built in Python: the run's arguments go with the model (recipes add theirs)
            model.training_arguments = self.run_arguments()
        model.save_pretrained(output_dir, is_main_process=self.args.should_save,  # (the others join the gathers)
                              save_adapter=getattr(self.args, "save_adapter", False),
                              **({"state_dict": state_dict} if state_dict is not None else {}))

    def _save(self, output_dir: Optional[str] = None, state_dict=None) -> None:
        """A final save is [`save_whole`][csekit.trainers.trainer.ContrastiveTrainer.save_whole]'s; a checkpoint (into
        its hidden partial folder) is the Trainer's, less its pickled arguments (``training_args.bin``): a csekit
        folder holds no pickle. The run's arguments are in ``training_args.json``
        ([`write_arguments`][csekit.trainers.arguments.write_arguments]),
        what a resume checks in each checkpoint's ``csekit_run.json``."""
        model = self.accelerator.unwrap_model(self.model)
        if not getattr(model, "saving_checkpoint", True):
            return self.save_whole(model, output_dir or self.args.output_dir, state_dict)
        super()._save(output_dir, state_dict)
        pickled = os.path.join(output_dir or self.args.output_dir, TRAINING_ARGS_NAME)
        if self.args.should_save and os.path.exists(pickled):
            os.remove(pickled)

    # the recipe's record of the whole run (its data settings too: trainers/runner.py); else run_record()'s
    setup_record: Optional[dict] = None
    data_identity: Optional[str] = None  # the training data's, set by preflight when the recipe gave no record

    def unwrapped(self, model=None):
        """``model`` (default: the trainer's) without its DDP or compile wrappers, as accelerate's ``unwrap_model``
        gives it, kept for as long as the wrapper is the same: accelerate's call walks every module at each step."""
        model = self.model if model is None else model
        if self._unwrapped is None or self._unwrapped[0] is not model:
            self._unwrapped = (model, self.accelerator.unwrap_model(model))
        return self._unwrapped[1]

    _unwrapped: Optional[tuple] = None

    def floating_point_ops(self, inputs) -> int:
        """transformers' estimate of a step's work (6 x tokens x non-embedding parameters, for the logged
        ``total_flos``), with the parameters counted once per run: transformers counts them by walking every module
        at every step."""
        if self._parameter_count is None:
            model = self.unwrapped()
            self._parameter_count = model.num_parameters(exclude_embeddings=True) if hasattr(
                model, "num_parameters") else 0
        tokens = inputs.get("input_ids") if isinstance(inputs, dict) else None
        return 6 * (tokens.numel() if torch.is_tensor(tokens) else 0) * self._parameter_count

    _parameter_count: Optional[int] = None

    def run_arguments(self) -> dict:
        """``training_args.json`` of a run built in Python (a recipe writes its own): the backbone it started from
        and the method's settings, the data (its identity, size, and the truncation length and packing it trained
        at) and every training argument, as a recipe records them, for the card's training table."""
        collator, dataset = self.data_collator, self.train_dataset
        data = {"train_dataset": self.data_identity, "train_examples": len(dataset) if hasattr(dataset, "__len__")
                else None, "max_seq_length": getattr(collator, "max_length", None),
                "padding_free": getattr(collator, "padding_free", None)}
        return arguments_record(model_args={"model_name_or_path": self.base_model,
                                            **flag_settings(self.unwrapped().config)}, data_args=data,
                                training_args=self.args, **lora_group(self.peft_config))

    def run_record(self) -> dict:
        return self.setup_record or run_record(self.accelerator.unwrap_model(self.model), self.args,
                                               self.data_identity, self.peft_config)

    def push_to_hub(
        self, commit_message: str = "End of training", private: Optional[bool] = None, token: Optional[str] = None
    ):
        """Publish the saved model in ``args.output_dir`` to ``args.hub_model_id``, exactly as ``csekit push`` does.

        The upload is [`csekit.publishing.hub.files_to_push`][csekit.publishing.hub.files_to_push]'s pickle-free set
        (safetensors, config with
        ``auto_map``, code, tokenizer, a freshly rendered card, ``eval_results.json``), never ``training_args.bin`` or
        checkpoints. Call it after [`save_model`][csekit.trainers.trainer.ContrastiveTrainer.save_model] and the test
        evaluation. Returns the commit info (``None`` off
        rank 0).
        """
        from ..publishing.hub import push_to_hub as publish

        if not self.is_world_process_zero():
            return None
        if not self.args.hub_model_id:
            raise DataError("set hub_model_id (namespace/name) in the training arguments to push")
        private = self.args.hub_private_repo if private is None else private
        api = HfApi(token=token or self.args.hub_token)
        commit, _ = publish(self.args.output_dir, self.args.hub_model_id, private=bool(private),
                            commit_message=commit_message, api=api)
        return commit
