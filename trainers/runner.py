"""The training stages of a recipe run: check, build, train, commit.

[`check_run`][csekit.trainers.runner.check_run] reads and checks every input before any work (with
[`csekit.preflight`][csekit.preflight], the one-line
[`RecipeArgumentParser`][csekit.trainers.arguments.RecipeArgumentParser] and `RunFolder`);
[`build_trainer`][csekit.trainers.runner.build_trainer] makes the method's model, collator and Trainer;
[`train_run`][csekit.trainers.runner.train_run] trains; [`commit_model`][csekit.trainers.runner.commit_model] makes
the trained model appear in the output folder whole or not at all. Scoring, the card and the Hub push come after, in
[`csekit.recipe_run`][csekit.recipe_run], which runs the stages in order: nothing here imports publishing code.
"""

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from huggingface_hub import constants
from transformers import set_seed

from ..atomic import commit_files
from ..data import resolve_data_dir
from ..errors import DataError
from ..evaluation.geometry import GeometryEvaluator
from ..evaluation.sts import DEV_TASKS, STS_TASKS, STSEvaluator
from ..loading import resolve_model_path
from ..methods import Method
from ..preflight import (
    AUXILIARY_CHECKS,
    TRAIN_DATA,
    backbone_config,
    check_method_backbone,
    check_model_inputs,
    check_not_an_input,
    check_prompt_room,
    check_resume,
    find_checkpoint,
    load_tokenizer,
    prepare_decoder_tokenizer,
    read_model_config,
)
from .arguments import (
    ContrastiveDataArguments,
    CSETrainingArguments,
    config_kwargs,
    model_arguments,
    parse_recipe_args,
    setup_record,
    write_arguments,
)
from .collators import enable_padding_free
from .data import check_train_dataset, load_training_dataset
from .lora import check_lora_method
from .multi_dataset import DatasetMix, MultiDatasetBatchSampler, use_dataset_prompts
from .output_dir import RunFolder
from .trainer import check_contrastable, data_identity

logger = logging.getLogger(__name__)


@dataclass
class TrainingRecipe:
    """What a Trainer-based recipe trains (a method whose trainer is a transformers Trainer): a method, its flags and
    how its batches are made. The training stages take it; [`ContrastiveRecipe`][csekit.recipe_run.ContrastiveRecipe]
    adds the whole run (``main``).

    Args:
        method: the registry entry ([`Method`][csekit.methods.Method]): the model trained (its config's fields are the
            method flags), the trainer, the default ``--output_dir`` (``outputs/NAME``).
        extra_arguments: an optional dataclass of recipe-only flags (data augmentations that are not model
            settings).
        make_collator: ``(tokenizer, model, data_args, extra_args) -> collator``, for a recipe whose extra flags shape
            the batches; default: the trainer's
            [`default_collator`][csekit.trainers.trainer.ContrastiveTrainer.default_collator].
        description: the ``--help`` text (the recipe module's docstring).
        model_class, trainer_class: the method's training model and trainer unless given (a test may record what
            a trainer sees with a subclass).
    """

    method: Method
    extra_arguments: Optional[type] = None
    make_collator: Optional[Callable] = None
    description: Optional[str] = None
    model_class: Optional[type] = None
    trainer_class: Optional[type] = None

    def __post_init__(self):
        self.model_class = self.model_class or self.method.training_model_class
        self.trainer_class = self.trainer_class or self.method.trainer_class

    @property
    def config_class(self):
        return self.model_class.config_class

    @property
    def output_dir(self) -> str:
        return self.method.output_dir

    def argument_types(self) -> tuple:
        """The recipe's flag dataclasses: method (the config's fields), data, training, and its extra ones."""
        types = (model_arguments(self.config_class), ContrastiveDataArguments, CSETrainingArguments)
        return types + ((self.extra_arguments,) if self.extra_arguments else ())

    def parse(self, argv: Optional[list] = None, prog: Optional[str] = None) -> tuple:
        """``(model_args, data_args, training_args, extra_args or None)`` from ``argv`` (YAML + flags)."""
        parsed = parse_recipe_args(self.argument_types(), argv, {"output_dir": self.output_dir}, self.description,
                                   prog, self.method.name)
        data_args, training_args = parsed[1], parsed[2]
        data_args.padding_free, data_args.layout_reason = training_layout(data_args.padding_free, training_args)
        if data_args.pad_to_multiple_of is not None and data_args.pad_to_multiple_of < 1:
            raise DataError(f"--pad_to_multiple_of {data_args.pad_to_multiple_of}: give a positive length")
        if not self.method.packing and data_args.pad_to_multiple_of:  # (the capability says why)
            raise DataError(f"--pad_to_multiple_of: {self.method.name}'s loss counts the padded positions, so more "
                            "padding would change it")
        if data_args.pad_to_multiple_of is None and training_args.torch_compile and self.method.packing:
            data_args.pad_to_multiple_of = data_args.max_seq_length
        return parsed if self.extra_arguments else (*parsed, None)

    def build_model(self, model_path: str, model_args):
        """The training model on the backbone at ``model_path``, with the method flags of ``model_args``."""
        return self.model_class.from_encoder(model_path, **config_kwargs(model_args, self.config_class))

    def collator(self, tokenizer, model, data_args, extra_args):
        """The training collator; packed batches (and ``model`` switched to run them) when ``--padding_free`` is on
        and the backbone can ([`enable_padding_free`][csekit.trainers.collators.enable_padding_free])."""
        packed = data_args.padding_free and enable_padding_free(model, tokenizer, data_args.max_seq_length)
        data_args = dataclasses.replace(data_args, padding_free=packed)
        if self.make_collator is not None:
            collator = self.make_collator(tokenizer, model, data_args, extra_args)
        else:
            collator = self.trainer_class.default_collator(tokenizer, model, max_length=data_args.max_seq_length,
                                                           padding_free=packed)
        if hasattr(collator, "pad_to_multiple_of"):
            collator.pad_to_multiple_of = data_args.pad_to_multiple_of
        return collator


def batch_record(trainer, columns: tuple) -> dict:
    """What one step of ``trainer`` learns from: the per-device batch, the processes, the accumulation, the
    mini-batch its gradient cache encodes (``None`` without one) and the in-batch negatives each anchor sees (the
    per-device batch times the processes; accumulation adds steps, not negatives). Logged at the start, kept in
    ``eval_results.json`` and the card."""
    args = trainer.args
    per_device, processes = args.per_device_train_batch_size, args.world_size
    return {"per_device_train_batch_size": per_device, "processes": processes,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "mini_batch_size": trainer.gradient_cache.mini_batch_size if trainer.gradient_cache else None,
            "mini_batch_tokens": trainer.gradient_cache.mini_batch_tokens if trainer.gradient_cache else None,
            "examples_per_update": per_device * processes * args.gradient_accumulation_steps,
            "negatives_per_anchor": trainer.negatives_per_anchor(per_device * processes, columns),
            "duplicate_negatives": args.duplicate_negatives}


def describe_batch(record: dict) -> str:
    """[`batch_record`][csekit.trainers.runner.batch_record] in one line."""
    mini, tokens = record["mini_batch_size"], record.get("mini_batch_tokens")
    chunks = (f", encoded in chunks of {mini} (gradient caching)" if mini else
              f", encoded in chunks of at most {tokens} tokens (gradient caching)" if tokens else "")
    return (f"batch: {record['per_device_train_batch_size']} per device x {record['processes']} process(es) x "
            f"{record['gradient_accumulation_steps']} accumulation step(s) = {record['examples_per_update']} examples "
            f"per update{chunks}; each anchor sees "
            f"{record['negatives_per_anchor']} in-batch negatives per step"
            f"{' less masked duplicates' if record['duplicate_negatives'] == 'mask' else ''}")


def check_lengths(model_args, model_path: str, tokenizer, **lengths) -> None:
    """Every length the run will feed the backbone fits its position embeddings and leaves room for a word
    ([`check_model_inputs`][csekit.preflight.check_model_inputs]): ``lengths`` (``max_seq_length=32``) and the
    published model's
    ``--inference_max_length``."""
    lengths = {**lengths, "inference_max_length": getattr(model_args, "inference_max_length", None)}
    config = read_model_config(model_path)
    for flag, length in lengths.items():
        if length is not None:
            check_model_inputs(model_args.model_name_or_path, config, tokenizer, length, f"--{flag}")


@dataclass
class CheckedRun:
    """What [`check_run`][csekit.trainers.runner.check_run] established before any work: every input read and checked,
    nothing written."""

    folder: RunFolder
    resume: Optional[str]
    accepted: list  # the setup differences --resume_accept_changes accepted
    record: dict  # what the checkpoints record and a resume must match (setup_record)
    publish: bool
    data_dir: Path
    dev: STSEvaluator
    test: Optional[STSEvaluator]
    model_path: str
    tokenizer: object
    train_dataset: object
    columns: tuple


def check_run(recipe: TrainingRecipe, model_args, data_args, training_args, extra_args=None) -> CheckedRun:
    """Stage 1: the output folder, the resume target and its record, the evaluation data, the model with its
    tokenizer and lengths, the training data and what one step of it can learn from; one line for anything wrong."""
    publish = training_args.push_to_hub
    if publish and not (training_args.hub_model_id and data_args.do_test_eval):
        raise DataError("--push_to_hub needs --hub_model_id namespace/name and the test evaluation (the card's scores)")
    if publish and constants.is_offline_mode():  # say so now, not after hours of training
        raise DataError("--push_to_hub: HF_HUB_OFFLINE is set, so the Hub cannot be reached; unset it to push")
    if training_args.fp16 and training_args.device.type == "cpu":  # accelerate would silently train in float32
        raise DataError("--fp16 needs a GPU; on CPU use --bf16 true (bfloat16 autocast)")
    training_args.push_to_hub = False  # the Trainer must not push checkpoints: we publish once, after the test scores
    check_not_an_input(training_args.output_dir, "--output_dir", [model_args.model_name_or_path])
    folder = RunFolder(training_args.output_dir, data_args.overwrite_output_dir, main=training_args.process_index == 0)
    resume = find_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)
    record = setup_record(recipe.config_class.model_type, training_args.world_size, model_args=model_args,
                          data_args=data_args, training_args=training_args,
                          **({"extra_args": extra_args} if extra_args else {}))
    data_dir = resolve_data_dir(data_args.data_dir)
    dev_tasks = (*DEV_TASKS, "SICKRelatedness") if data_args.eval_sickr else DEV_TASKS
    dev = STSEvaluator(data_dir, dev_tasks, split="dev")
    test = STSEvaluator(data_dir, STS_TASKS, split="test") if data_args.do_test_eval else None  # read now, not after
    if test is not None:
        GeometryEvaluator(data_dir, isoscore_sentences=[])  # the card's figure reads STS-B train: checked now
    model_path = resolve_model_path(model_args.model_name_or_path)
    tokenizer = load_tokenizer(model_args.model_name_or_path, model_path)
    backbone_type = backbone_config(read_model_config(model_path)).get("model_type")
    check_method_backbone(recipe.method, backbone_type, model_args.model_name_or_path)
    check_lora_method(recipe.method, training_args)
    prepare_decoder_tokenizer(tokenizer, backbone_type, getattr(model_args, "pooler_type", None),
                              model_args.model_name_or_path)
    check_lengths(model_args, model_path, tokenizer, max_seq_length=data_args.max_seq_length)
    check_prompt_room(getattr(model_args, "prompt", None), tokenizer, data_args.max_seq_length, "--max_seq_length")
    global_batch = training_args.per_device_train_batch_size * training_args.world_size
    files = [data_args.train_file] if isinstance(data_args.train_file, str) else data_args.train_file
    loaded = {name: load_training_dataset(name, data_args.data_dir, global_batch, data_args.max_train_samples)
              for name in files}
    train_dataset = loaded[files[0]] if len(files) == 1 else DatasetMix(loaded, "--train_file")
    for prompt in use_dataset_prompts(train_dataset, getattr(training_args, "dataset_prompts", None),
                                      recipe.config_class.prompt_refused).values():
        check_prompt_room(prompt, tokenizer, data_args.max_seq_length, "--max_seq_length")
    # what is trained on, not only the files' names (several: each one's, with its share of the steps)
    record[TRAIN_DATA] = data_identity(train_dataset, mix_shares(train_dataset, training_args))
    accepted = check_resume(resume, record, training_args.resume_accept_changes) if resume else []
    trained_columns = []
    for name, dataset in loaded.items():
        columns = check_train_dataset(dataset, recipe.trainer_class.data_columns, global_batch, name,
                                      recipe.method.name)
        recipe.trainer_class.check_step(training_args, columns, recipe.method)
        if training_args.duplicate_negatives == "mask":
            check_contrastable(dataset, columns, global_batch, len(columns) > 2)
        trained_columns.append(columns)
    # the record's negatives per anchor: those of the data with the fewest
    columns = min(trained_columns, key=lambda each: recipe.trainer_class.negatives_per_anchor(global_batch, each))
    for name, kind in getattr(recipe.config_class, "model_path_fields", {}).items():  # further models (a generator)
        value = getattr(model_args, name)
        AUXILIARY_CHECKS[kind](value, resolve_model_path(value), f"--{name}", tokenizer, model_path)
    return CheckedRun(folder, resume, accepted, record, publish, data_dir, dev, test, model_path, tokenizer,
                      train_dataset, columns)


def mix_shares(dataset, training_args) -> Optional[dict]:
    """Each dataset's share of the steps when ``dataset`` is several
    ([`MultiDatasetBatchSampler`][csekit.trainers.multi_dataset.MultiDatasetBatchSampler]), else ``None``."""
    if not isinstance(dataset, DatasetMix):
        return None
    return MultiDatasetBatchSampler.of_arguments(dataset, training_args).shares()


def training_layout(padding_free: Optional[bool], training_args) -> tuple:
    """``(packed, why)``: ``--padding_free`` as given, else packed on the CPU and padded on a GPU. Packing saves the
    CPU the padding's work; on a GPU the padded step is faster at the papers' lengths (its kernels are few and large:
    docs/training.md). Compiled or not: a packed step compiles as one graph too (``PackedSequences.of_batch``)."""
    if padding_free is not None:
        return padding_free, f"--padding_free {str(padding_free).lower()}"
    if training_args.device.type == "cuda":
        return False, "the default on a GPU, where the padded step is faster"
    return True, "the default on the CPU"


def describe_step(training_args, data_args, packed: bool) -> str:
    """The first log line of training: which step runs (compiled or eager, packed or padded, the padded width) and
    why."""
    width = data_args.pad_to_multiple_of
    return (f"training step: {'compiled (--torch_compile)' if training_args.torch_compile else 'eager'}, "
            f"{'packed' if packed else 'padded'} batches ({getattr(data_args, 'layout_reason', '--padding_free')})"
            + (f", {'the packed layout' if packed else 'lengths'} padded to a multiple of {width}" if width else ""))


def build_trainer(recipe: TrainingRecipe, run: CheckedRun, model_args, data_args, training_args, extra_args=None):
    """Stage 2: the training model on the checked backbone, its collator and the method's Trainer."""
    set_seed(training_args.seed)
    model = recipe.build_model(run.model_path, model_args)
    model.tokenizer = run.tokenizer
    if model.config.matryoshka_dims and model.inference_head_layers() is None:
        raise DataError(f"--matryoshka_dims: {type(model).__name__}'s inference vectors (this config's) are not a "
                        "Linear chain over the pooler, so their first coordinates cannot be trained as they are used; "
                        "choose an inference representation without whitening")
    collator = recipe.collator(run.tokenizer, model, data_args, extra_args)
    # (a backbone that cannot pack was logged by the collator)
    logger.info("%s", describe_step(training_args, data_args, getattr(collator, "padding_free", False)))
    if hasattr(collator, "draws"):  # its random draws derive from the run's seed (randomness.py)
        collator.draws.seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    collator.text_ids = training_args.duplicate_negatives == "mask"
    trainer = recipe.trainer_class(model=model, args=training_args, train_dataset=run.train_dataset,
                                   data_collator=collator, processing_class=run.tokenizer, sts_evaluator=run.dev)
    trainer.setup_record = run.record
    return trainer


def train_run(trainer, run: CheckedRun) -> None:
    """Stage 3: train (from ``run``'s checkpoint when it resumes). A non-finite update stops the run in ``train``; a
    final model with a non-finite weight is refused by the trainer's ``save_model``, before anything is committed."""
    trainer.train(resume_from_checkpoint=run.resume)


def commit_model(folder: RunFolder, main: bool, save: Callable[[Path], None], arguments: dict) -> Optional[Path]:
    """Stage 4, shared by every recipe (Trainer-based and CLSR): ``save`` writes the trained model into the run's
    staging folder (on every process: a sharded state is gathered, one process writes); on the main process the
    run's argument groups (``training_args.json``) join it and it is committed into the output folder at once
    (``config.json`` last, [`csekit.atomic.commit_files`][csekit.atomic.commit_files]): the folder is a loadable model
    from here on, and a line says where. Returns the folder (``None`` off the main process). A kill anywhere leaves
    the checkpoints, from which ``--resume_from_checkpoint last`` trains no further step and commits again."""
    with folder.keeping_trained_model(main):
        save(folder.staging)
        if not main:
            return None
        write_arguments(folder.staging, **arguments)
        commit_files(folder.staging, folder.folder)
    where = folder.folder.resolve()
    logger.info("the trained model is in %s (it loads from there now; its scores and card follow)", where)
    return where


def remove_checkpoints(folder: RunFolder, keep: bool) -> None:
    """The run's checkpoints go once its model is committed and scored, unless ``keep`` (``--keep_checkpoints``)."""
    removed = [] if keep else folder.remove_checkpoints()
    if removed:
        logger.info("removed %s from %s (--keep_checkpoints true keeps them)", ", ".join(removed), folder.folder)


__all__ = ["CheckedRun", "TrainingRecipe", "batch_record", "build_trainer", "check_lengths", "check_run",
           "commit_model", "describe_batch", "remove_checkpoints", "train_run", "training_layout"]
