"""What every training recipe shares: its flags, YAML + command-line parsing, data, Trainer set-up, save and test.

A recipe's method flags are its model config's fields: :func:`model_arguments` turns the ``@strict`` config class
(defaults = the paper's, help = the config docstring's ``Args:`` entry) into an ``HfArgumentParser`` dataclass, so
a setting is declared once, in ``modeling/``. The shared vocabulary of the four recipes:

* model: ``--model_name_or_path`` (a local folder, ``all-MiniLM-L6-v2`` or a Hub id) + the config fields;
* data (:class:`DataArguments`): ``--train_file`` (a local ``.txt``/``.csv``, a name the recipe knows, or a Hub
  dataset), ``--data_dir``, ``--do_test_eval``, ``--overwrite_output_dir``;
* training: ``transformers.TrainingArguments`` (``--output_dir``, ``--seed``, ``--report_to``, ...).

Bad input ends with one line and exit status 2 before anything is written (:mod:`csekit.preflight`, the one-line
:class:`RecipeArgumentParser`, :class:`~csekit.trainers.output_dir.RunFolder`, :func:`main_guard`); the final model
appears whole or not at all.

``recipes/simcse.py`` is the smallest example.
"""

import argparse
import dataclasses
import inspect
import json
import logging
import re
import sys
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
import yaml
from accelerate import PartialState
from huggingface_hub import constants
from transformers import AutoConfig, HfArgumentParser, PreTrainedConfig, TrainingArguments, set_seed

from ..atomic import commit_files, write_json, write_text
from ..data import DATA_DIR_HELP, resolve_data_dir
from ..errors import DataError, OneLineUsageErrors, report_errors
from ..evaluation.protocol import protocol_record
from ..evaluation.sts import DEV_TASKS, STS_TASKS, CachedSTSEvaluator, STSEvaluator, format_sts_table
from ..loading import ARGUMENTS_FILE, RESULTS_FILE, resolve_model_path
from ..modeling import CLSRConfig, CLSRModel
from ..options import positive_int
from ..preflight import (
    backbone_table,
    check_finite_groups,
    check_model_inputs,
    check_not_an_input,
    check_output_dir,
    check_resume,
    check_training_arguments,
    find_checkpoint,
    load_tokenizer,
    read_model_config,
)
from .clsr import CLSRTrainer, CLSRTrainingArguments
from .clsr_data import build_pair_corpus, held_out_sentences, load_positive_pairs, require_full_batch
from .collators import ContrastiveCollator, enable_padding_free
from .data import PAIR_COLUMNS, load_training_dataset
from .embedding_cache import EmbeddingCache
from .output_dir import RunFolder, is_csekit_output
from .trainer import require_finite_weights, run_record

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ method flags
def docstring_arguments(cls) -> dict:
    """``{name: help}`` from the ``Args:`` sections of ``cls`` and its bases (the subclass's entry wins)."""
    helps = {}
    for klass in cls.__mro__:
        doc = inspect.getdoc(klass) or ""
        section = re.search(r"^Args:\n((?:(?: {4}.*)?\n?)*)", doc, flags=re.M)
        if not section:
            continue
        for name, text in re.findall(r"^ {4}(\w+): (.*(?:\n {8}.*)*)", section.group(1), flags=re.M):
            helps.setdefault(name, " ".join(text.split()))
    return helps


def config_fields(config_class) -> list:
    """The method settings of a csekit config class: its dataclass fields below ``PreTrainedConfig``, without the
    nested backbone config (the recipe loads the backbone from ``--model_name_or_path``)."""
    inherited = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    return [f for f in dataclasses.fields(config_class) if f.name not in inherited and f.name != "encoder_config"]


def model_arguments(config_class, name: Optional[str] = None, default_model: str = "bert-base-uncased") -> type:
    """An ``HfArgumentParser`` dataclass: ``model_name_or_path`` plus one flag per field of ``config_class``."""
    helps = docstring_arguments(config_class)
    fields = [("model_name_or_path", str, field(default=default_model, metadata={
        "help": "Backbone: a local folder, 'all-MiniLM-L6-v2', or a Hub id (downloaded through the Hugging Face cache)."
    }))]
    for config_field in config_fields(config_class):
        if config_field.name not in helps:
            raise TypeError(f"{config_class.__name__}.{config_field.name} has no entry in the docstring's Args:")
        default = config_field.default
        if isinstance(default, (list, dict)):
            default = field(default_factory=lambda value=default: type(value)(value))
        fields.append((config_field.name, config_field.type, field(
            default=default, metadata={"help": helps[config_field.name]}
        ) if not isinstance(default, dataclasses.Field) else default))
    return dataclasses.make_dataclass(name or config_class.__name__.replace("Config", "Arguments"), fields)


def config_kwargs(model_args, config_class) -> dict:
    """The config fields of a parsed :func:`model_arguments` instance, ready for ``from_encoder(**kwargs)``."""
    return {f.name: getattr(model_args, f.name) for f in config_fields(config_class)}


# ------------------------------------------------------------------------------------------------ shipped configs
def configs_dir() -> Path:
    """The YAML configurations shipped with the recipes (``recipes/configs`` = ``csekit.recipes/configs``)."""
    from importlib.resources import files

    return Path(str(files("csekit.recipes") / "configs"))


def shipped_configs() -> list:
    folder = configs_dir()
    return sorted(str(path.relative_to(folder).with_suffix("")) for path in folder.rglob("*.yaml"))


def resolve_recipe_config(name: str) -> Optional[Path]:
    """A YAML file: ``name`` as a path, else a configuration shipped with csekit (``quickstart``,
    ``paper/whitenedcse_bert_base``, with or without ``.yaml``); ``None`` when neither exists."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = configs_dir() / (name if name.endswith(".yaml") else f"{name}.yaml")
    return shipped if shipped.is_file() else None


# ------------------------------------------------------------------------------------------------ shared flags
# sizes and lengths, in whichever recipe has them: below 1 they are never meant (a length of 0 would silently mean
# "no truncation", a batch of 0 fail after the data and model are loaded)
POSITIVE_FLAGS = ("max_seq_length", "per_device_train_batch_size", "encode_batch_size", "max_train_samples")


@dataclass
class DataArguments:
    train_file: str = field(
        default="wiki/wiki1m_for_simcse.txt",
        metadata={"help": "Training data: a .txt (one sentence a line, unsupervised), a .csv (sent0,sent1[,hard_neg], "
                  "supervised), or a Hub dataset id (columns as for the .csv, or one 'text' column). Relative paths "
                  "are also looked up in the data folder."},
    )
    max_train_samples: Optional[int] = field(
        default=None, metadata={"help": "Train on the first N examples of --train_file only (file order; the rest "
                                "of the file is not read)."}
    )
    data_dir: Optional[str] = field(
        default=None, metadata={"help": DATA_DIR_HELP}
    )
    do_test_eval: bool = field(default=True, metadata={"help": "Score the final model on the 7 STS test sets."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Also write into an existing --output_dir that is not a csekit output folder "
                                 "(its top-level files are replaced by the model's)."}
    )


@dataclass
class ContrastiveDataArguments(DataArguments):
    max_seq_length: int = field(default=32, metadata={"help": "Truncation length of training sentences."})
    padding_free: bool = field(default=True, metadata={
        "help": "Pack each batch's real tokens into one row, no padding (same math, less work); false pads."})
    eval_sickr: bool = field(default=False, metadata={"help": "Also score SICK-R trial during training."})


@dataclass
class CSETrainingArguments(TrainingArguments):
    """TrainingArguments with the SimCSE paper's defaults."""

    output_dir: str = field(default="outputs/simcse", metadata={"help": "Where checkpoints and the model go."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Training epochs."})
    per_device_train_batch_size: int = field(default=64, metadata={"help": "Batch size per process."})
    learning_rate: float = field(default=3e-5, metadata={"help": "Peak learning rate (linear decay)."})
    eval_strategy: str = field(default="steps", metadata={"help": "When to score STS-B dev."})
    eval_steps: float = field(default=125, metadata={"help": "Score STS-B dev every N steps."})
    save_steps: float = field(default=125, metadata={"help": "Checkpoint every N steps (must match eval_steps)."})
    save_total_limit: Optional[int] = field(default=2, metadata={"help": "Checkpoints kept (best one always kept)."})
    load_best_model_at_end: bool = field(default=True, metadata={"help": "Keep the best STS-B dev checkpoint."})
    metric_for_best_model: Optional[str] = field(default="STSBenchmark", metadata={"help": "Selection metric."})
    greater_is_better: Optional[bool] = field(default=True, metadata={"help": "Higher metric is better."})
    logging_steps: float = field(default=10, metadata={"help": "Log losses every N steps."})
    report_to: Optional[str] = field(default="none", metadata={
        "help": "'tensorboard' to log there (pip install 'csekit[tensorboard]'); 'none' logs to the console."})
    resume_from_checkpoint: Optional[str] = field(default=None, metadata={
        "help": "Continue from 'last' (the newest complete checkpoint in --output_dir) or a checkpoint folder; the "
                "result equals the uninterrupted run."})
    resume_accept_changes: bool = field(default=False, metadata={
        "help": "Resume from a checkpoint made with another per-device batch, number of processes or accumulation "
                "(refused otherwise: the result is not the uninterrupted run's); training_args.json records it."})
    push_to_hub: bool = field(default=False, metadata={
        "help": "Publish the final model to --hub_model_id once, after the test evaluation, as `csekit push` does "
                "(checkpoints are never pushed)."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep text columns for the collator."})
    dataloader_drop_last: bool = field(default=True, metadata={"help": "Every step sees a full batch."})

    def __post_init__(self):
        # A host without a GPU (or other accelerator) trains on CPU. Saying so is also what makes the processes of
        # `accelerate launch --multi_gpu --num_processes N` join one gloo group; otherwise each trains alone.
        if not torch.accelerator.is_available():
            self.use_cpu = True
        check_training_arguments(self)
        if self.eval_strategy == "no":  # no evaluation: nothing to select the best checkpoint by
            self.load_best_model_at_end = False
        super().__post_init__()


class RecipeArgumentParser(OneLineUsageErrors, HfArgumentParser):
    """``HfArgumentParser`` whose errors (unknown flag, bad value, unknown YAML key) are one line."""


# the TrainingArguments flags ``--help`` shows (``--help-all`` shows the other ~150 of transformers too)
COMMON_TRAINING_FLAGS = (
    "output_dir", "per_device_train_batch_size", "gradient_accumulation_steps", "num_train_epochs", "max_steps",
    "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "seed", "bf16", "fp16",
    "gradient_checkpointing", "eval_strategy", "eval_steps", "save_strategy", "save_steps", "save_total_limit",
    "load_best_model_at_end", "metric_for_best_model", "logging_steps", "report_to", "resume_from_checkpoint",
    "resume_accept_changes",
    "push_to_hub", "hub_model_id", "dataloader_num_workers",
)
HELP_GROUPS = {"model": "method: the model config's fields (the paper's defaults)", "data": "data and evaluation",
               "training": "training (the common flags; --help-all lists every one)"}


def group_help(parser: argparse.ArgumentParser, dataclass_types: tuple, show_all: bool) -> None:
    """Put each argument group's flags under a titled section of ``--help`` and, unless ``show_all``, hide the
    TrainingArguments flags that are not in :data:`COMMON_TRAINING_FLAGS`."""
    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    owners = {}
    for cls in dataclass_types:
        kind = ("training" if cls.__name__.endswith("TrainingArguments")
                else "data" if issubclass(cls, DataArguments) else "model")
        for item in dataclasses.fields(cls):
            owners.setdefault(item.name, HELP_GROUPS[kind])
    groups = {title: parser.add_argument_group(title) for title in dict.fromkeys(owners.values())}
    default_group = parser._action_groups[1]  # argparse's "options" section, where HfArgumentParser put them all
    for action in list(default_group._group_actions):
        name = action.dest
        if name not in owners:
            continue
        if not show_all and name in inherited and name not in COMMON_TRAINING_FLAGS and action.help is not None:
            action.help = argparse.SUPPRESS
        default_group._group_actions.remove(action)
        groups[owners[name]]._group_actions.append(action)


def yaml_value(parser: argparse.ArgumentParser, dataclass_types: tuple, path: Path, key: str, value):
    """A ``--config`` value as the flag's own parser would take it from the command line: its type and choices are
    applied (argparse does not check defaults), so a list, a mapping or a word where a number goes is one line."""
    action = next((item for item in parser._actions if item.dest == key), None)
    if action is None:
        return value
    if value is None:
        # the class annotations: HfArgumentParser rewrites Field.type (Optional[X] becomes X) when it builds flags
        annotation = next((str(hints[key]) for hints in map(typing.get_type_hints, dataclass_types) if key in hints),
                          "")
        if "None" not in annotation and "Optional" not in annotation:  # a flag that always has a value
            parser.error(f"--config {path}: {key}: null, but it takes a value (default {action.default}); remove the "
                         "line to keep the default")
        return value
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    items = value if many and isinstance(value, list) else [value]
    if (not many and isinstance(value, list)) or any(isinstance(item, (list, dict)) for item in items):
        parser.error(f"--config {path}: {key}: expected {'values' if many else 'one value'}, got a "
                     f"{type(value).__name__}")
    converted = []
    for item in items:
        text = str(item).lower() if isinstance(item, bool) else str(item)
        try:
            converted.append(action.type(text) if action.type is not None else item)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            parser.error(f"--config {path}: {key}: invalid value {item!r}")
        if action.choices is not None and converted[-1] not in action.choices:
            parser.error(f"--config {path}: {key}: invalid choice {item!r} (choose from "
                         f"{', '.join(map(str, action.choices))})")
    return converted if many else converted[0]


def parse_recipe_args(
    dataclass_types: tuple, argv: Optional[list] = None, defaults: Optional[dict] = None,
    description: Optional[str] = None, prog: Optional[str] = None,
) -> tuple:
    """Parse ``[--config file.yaml] [--key value ...]``: ``defaults`` (the recipe's own, e.g. its output folder)
    replace the dataclass defaults, YAML values replace those, command-line flags replace YAML.

    ``--config`` takes a YAML path, or the name of a configuration shipped with csekit (``quickstart``,
    ``paper/simcse_bert_base``; see :func:`resolve_recipe_config`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = RecipeArgumentParser(dataclass_types, description=description, prog=prog,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    show_all = "--help-all" in argv
    argv = ["--help" if item == "--help-all" else item for item in argv]
    if show_all:
        parser.epilog = ("backbones (config.json model_type; anything else, decoder-only and encoder-decoder models "
                         f"included, is refused before any work):\n{backbone_table()}")
    group_help(parser, dataclass_types, show_all)
    parser.add_argument("--config", default=None, help="YAML file of arguments, or the name of one shipped with csekit "
                        f"({', '.join(shipped_configs())}); flags on the command line win.")
    parser.add_argument("--help-all", action="store_true", help="Show every flag, all of transformers' "
                        "TrainingArguments included, and exit.")
    if defaults:
        parser.set_defaults(**defaults)
    config_path = None
    if "--config" in argv:
        position = argv.index("--config")
        config_path = argv[position + 1] if position + 1 < len(argv) else None
        del argv[position : position + 2]
    if config_path:
        path = resolve_recipe_config(config_path)
        if path is None:
            parser.error(f"--config {config_path}: no such file (shipped configs: {', '.join(shipped_configs())})")
        try:
            values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {mark.line + 1}: " if mark else ""
            reason = getattr(error, "problem", None) or type(error).__name__
            parser.error(f"--config {path}: not valid YAML ({where}{reason})")
        if not isinstance(values, dict):
            parser.error(f"--config {path}: holds a {type(values).__name__}; write one 'flag: value' line per setting "
                         "(e.g. learning_rate: 3.0e-5)")
        known = {f.name for cls in dataclass_types for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            parser.error(f"{path}: unknown key(s) {', '.join(unknown)}")
        parser.set_defaults(**{key: yaml_value(parser, dataclass_types, path, key, value)
                               for key, value in values.items()})
    # the outputs also hold the namespace of --config (declared only for --help) and the leftover strings
    try:
        *outputs, remaining = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    except ValueError as error:  # TrainingArguments' own validation of a value combination (DataError: ours)
        if isinstance(error, DataError):
            raise
        parser.error(str(error).strip().splitlines()[0])
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    check_finite_groups(outputs[: len(dataclass_types)])
    for group in outputs[: len(dataclass_types)]:
        for name in POSITIVE_FLAGS:
            if getattr(group, name, None) is not None:
                try:
                    positive_int(getattr(group, name))
                except argparse.ArgumentTypeError as error:
                    parser.error(f"argument --{name}: {error}")
    return tuple(outputs[: len(dataclass_types)])


def write_arguments(output_dir, **groups) -> None:
    """``training_args.json``: every argument group of the run, as JSON (the card reads it; nothing is unpickled)."""
    record = {name: (value.to_dict() if hasattr(value, "to_dict") else value if isinstance(value, dict)
                     else dataclasses.asdict(value)) for name, value in groups.items()}
    write_text(Path(output_dir, ARGUMENTS_FILE), json.dumps(record, indent=2, default=str) + "\n")


# ------------------------------------------------------------------------------------------------ the runner
@dataclass
class ContrastiveRecipe:
    """A Trainer-based recipe (SimCSE, WhitenedCSE, CMLM-CSE): which model and trainer, and how batches are made.

    Args:
        model_class: the csekit model class trained (its ``config_class`` gives the method flags).
        trainer_class: a :class:`~csekit.trainers.trainer.ContrastiveTrainer` subclass.
        output_dir: the default ``--output_dir``.
        extra_arguments: an optional dataclass of recipe-only flags (data augmentations that are not model
            settings).
        make_collator: ``(tokenizer, model, data_args, extra_args) -> collator``; default
            :class:`ContrastiveCollator` with the model's ``num_views`` (2 when it has none).
        description: the ``--help`` text (the recipe module's docstring).
    """

    model_class: type
    trainer_class: type
    output_dir: str
    extra_arguments: Optional[type] = None
    make_collator: Optional[Callable] = None
    description: Optional[str] = None

    @property
    def config_class(self):
        return self.model_class.config_class

    def argument_types(self) -> tuple:
        types = (model_arguments(self.config_class), ContrastiveDataArguments, CSETrainingArguments)
        return types + ((self.extra_arguments,) if self.extra_arguments else ())

    def parse(self, argv: Optional[list] = None, prog: Optional[str] = None) -> tuple:
        parsed = parse_recipe_args(self.argument_types(), argv, {"output_dir": self.output_dir}, self.description,
                                   prog)
        return parsed if self.extra_arguments else (*parsed, None)

    def build_model(self, model_path: str, model_args):
        return self.model_class.from_encoder(model_path, **config_kwargs(model_args, self.config_class))

    def collator(self, tokenizer, model, data_args, extra_args):
        """The training collator; packed batches (and ``model`` switched to run them) when ``--padding_free`` is on
        and the backbone can (:func:`~csekit.trainers.collators.enable_padding_free`)."""
        packed = data_args.padding_free and enable_padding_free(model, tokenizer, data_args.max_seq_length)
        data_args = dataclasses.replace(data_args, padding_free=packed)
        if self.make_collator is not None:
            return self.make_collator(tokenizer, model, data_args, extra_args)
        views = getattr(model.config, "num_views", 2)
        return ContrastiveCollator(tokenizer, max_length=data_args.max_seq_length, unsupervised_views=views,
                                   padding_free=packed)

    def main(self, argv: Optional[list] = None, prog: Optional[str] = None) -> dict:
        model_args, data_args, training_args, extra_args = self.parse(argv, prog)
        return run_recipe(self, model_args, data_args, training_args, extra_args)


def training_curve(log_history: list, dev_task: str = DEV_TASKS[0]) -> list:
    """``[{"step", "loss"?, "dev"?}]`` from the Trainer's ``log_history``: the logged training loss and the dev
    score (``eval_<dev_task>``) per step, for the model card's curve."""
    curve = {}
    for entry in log_history:
        values = {"loss": entry.get("loss"), "dev": entry.get(f"eval_{dev_task}")}
        if entry.get("step") is not None and any(value is not None for value in values.values()):
            point = curve.setdefault(entry["step"], {"step": entry["step"]})
            point.update({key: float(value) for key, value in values.items() if value is not None})
    return [curve[step] for step in sorted(curve)]


def finish_run(staging: Path, output_dir, arguments: dict, record: Optional[dict] = None,
               table: Optional[str] = None) -> None:
    """The end of every recipe, on the main process, once the model and its tokenizer are saved in ``staging``: the
    run's argument groups (``training_args.json``) and test record (``eval_results.json``) join them, everything
    moves into ``output_dir`` together (``config.json`` last, :func:`csekit.atomic.commit_files`), then the test
    table is printed."""
    write_arguments(staging, **arguments)
    if record is not None:
        write_json(staging / RESULTS_FILE, record)
    commit_files(staging, output_dir)
    if table:
        print(table)


def run_recipe(recipe: ContrastiveRecipe, model_args, data_args, training_args, extra_args=None) -> dict:
    """Train with STS-B dev model selection, save the best model + tokenizer, score the 7 STS test sets.

    Everything the run needs is checked before its first step (:mod:`csekit.preflight`): the output folder, the
    resume target, the evaluation data, the model with its tokenizer, the training data. With ``--push_to_hub
    --hub_model_id NAME`` the scored folder is then published as ``csekit push`` does.

    Returns:
        the test results ``{"STS12": ..., "avg": ...}`` (empty if ``do_test_eval`` is off).
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
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
    accepted = (check_resume(resume, run_record(recipe.config_class.model_type, training_args),
                             training_args.resume_accept_changes) if resume else [])
    set_seed(training_args.seed)
    data_dir = resolve_data_dir(data_args.data_dir)
    dev_tasks = (*DEV_TASKS, "SICKRelatedness") if data_args.eval_sickr else DEV_TASKS
    dev = STSEvaluator(data_dir, dev_tasks, split="dev")
    test = STSEvaluator(data_dir, STS_TASKS, split="test") if data_args.do_test_eval else None  # read now, not after
    model_path = resolve_model_path(model_args.model_name_or_path)
    tokenizer = load_tokenizer(model_args.model_name_or_path, model_path)
    check_model_inputs(model_args.model_name_or_path, read_model_config(model_path), tokenizer,
                       data_args.max_seq_length, "--max_seq_length")
    global_batch = training_args.per_device_train_batch_size * training_args.world_size
    train_dataset = load_training_dataset(data_args.train_file, data_args.data_dir, global_batch,
                                          data_args.max_train_samples)
    columns = tuple(name for name in PAIR_COLUMNS if name in train_dataset.column_names)
    if columns not in recipe.trainer_class.data_columns:
        accepted = " or ".join(",".join(shape) for shape in recipe.trainer_class.data_columns)
        method = recipe.config_class.model_type.removeprefix("csekit-")
        raise DataError(f"{data_args.train_file}: columns {','.join(columns)}, but {method} trains on {accepted} "
                        "(a .txt is one sentence a line)")
    model = recipe.build_model(model_path, model_args)
    model.tokenizer = tokenizer
    if training_args.torch_compile and data_args.padding_free:
        logger.info("padding-free training is off, batches are padded: --torch_compile would recompile the packed "
                    "attention for every batch layout")
        data_args = dataclasses.replace(data_args, padding_free=False)
    collator = recipe.collator(tokenizer, model, data_args, extra_args)
    if hasattr(collator, "draws"):  # its random draws derive from the run's seed (randomness.py)
        collator.draws.seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    trainer = recipe.trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        sts_evaluator=dev,
    )
    folder.acquire(lock=trainer.is_world_process_zero())
    try:
        trainer.train(resume_from_checkpoint=resume)
        require_finite_weights(model, "the final model")
        with folder.keeping_trained_model(trainer.is_world_process_zero()):
            # the final model, its arguments and test scores are built in the run's staging folder, then appear
            # together in output_dir
            trainer.save_model(str(folder.staging))  # on every process (sharded states are gathered); one writes
            if not trainer.is_world_process_zero():
                return {}
            arguments = dict(model_args=model_args, data_args=data_args, training_args=training_args,
                             **({"extra_args": extra_args} if extra_args else {}),
                             **({"resume": {"checkpoint": resume, "accepted_changes": accepted}} if accepted else {}))
            results = record = table = None
            if test is not None:
                scores = test.evaluate(lambda sentences: model.eval().encode(sentences, batch_size=128))
                results = scores[test.aggregation]
                record = {"model": training_args.output_dir, "pooler": model.config.pooler_type, "sts": results,
                          "sts_aggregations": scores, "protocol": protocol_record(model.config.pooler_type, test),
                          "training_curve": training_curve(trainer.state.log_history)}
                table = format_sts_table({training_args.output_dir: results}, title="STS test (Spearman x100)")
            finish_run(folder.staging, training_args.output_dir, arguments, record, table)
    finally:
        folder.release()
    if publish:
        print(f"pushed to {training_args.hub_model_id}: {trainer.push_to_hub()}")
    return results or {}


# ------------------------------------------------------------------------------------------------ CLSR
@dataclass
class BackboneArguments:
    random_init: bool = field(default=False, metadata={"help": "Random backbone weights from the config (seeded); "
                              "then a --model_name_or_path folder holding only config + tokenizer is enough."})
    random_init_num_layers: Optional[int] = field(
        default=None, metadata={"help": "With --random_init: override the backbone depth (a smaller random BERT)."}
    )


@dataclass
class CLSRDataArguments(DataArguments):
    train_file: str = field(
        default="nli", metadata={"help": "Positive pairs: nli (SNLI dev+test entailment pairs in the data folder), "
                                 "stsb (STS-B train pairs scored >= 4, the paper's 1,406), or a sent0,sent1 .csv "
                                 "(relative paths are also looked up in the data folder)."}
    )
    test_overlap: str = field(
        default="drop", metadata={"choices": ["drop", "keep"], "help": "Pairs sharing a sentence with any of the 7 "
                                  "STS test sets or STS-B dev: drop (default; counted in eval_results.json) or keep "
                                  "(the paper's selection as published; scores on those sets are marked "
                                  "contaminated)."}
    )
    cache_dir: Optional[str] = field(
        default=None, metadata={"help": "Embedding cache folder (default: $CSEKIT_CACHE_DIR or "
                                "~/.cache/csekit/embeddings)."}
    )
    encode_batch_size: int = field(default=128, metadata={"help": "Sentences per frozen-encoder forward pass."})
    torch_threads: Optional[int] = field(
        default=None, metadata={"help": "CPU threads for torch (default: torch's choice; 1 is often faster on a "
                                "machine shared with other jobs)."}
    )


@dataclass
class CLSRRecipe:
    """CLSR's recipe: a head trained on cached vectors of a frozen encoder (``recipes/clsr.py`` says how). It has the
    contrastive recipes' shape (``argument_types``, ``parse``, ``build_model``, ``main``) and their end of run
    (:func:`finish_run`); its training loop is :class:`~csekit.trainers.clsr.CLSRTrainer`, not a ``Trainer``."""

    output_dir: str = "outputs/clsr"
    description: Optional[str] = None
    config_class = CLSRConfig

    def argument_types(self) -> tuple:
        return (model_arguments(CLSRConfig), BackboneArguments, CLSRDataArguments, CLSRTrainingArguments)

    def parse(self, argv: Optional[list] = None, prog: Optional[str] = None) -> tuple:
        return parse_recipe_args(self.argument_types(), argv, {"output_dir": self.output_dir}, self.description, prog)

    def build_model(self, args, backbone: BackboneArguments, seed: int) -> CLSRModel:
        options = config_kwargs(args, CLSRConfig)
        set_seed(seed)  # e's initialisation (and a random backbone's) draw from the global generator
        if not backbone.random_init:
            if backbone.random_init_num_layers is not None:
                raise DataError("--random_init_num_layers needs --random_init true")
            path = resolve_model_path(args.model_name_or_path)
            tokenizer = load_tokenizer(args.model_name_or_path, path)
            check_model_inputs(args.model_name_or_path, read_model_config(path), tokenizer, None, "--max_seq_length")
            model = CLSRModel.from_encoder(path, **options)
        else:  # a config (and tokenizer) is all a random backbone needs
            path = resolve_model_path(args.model_name_or_path, require_weights=False)
            tokenizer = load_tokenizer(args.model_name_or_path, path)
            encoder_config = AutoConfig.from_pretrained(path, local_files_only=True)
            if backbone.random_init_num_layers is not None:
                encoder_config.num_hidden_layers = backbone.random_init_num_layers
            model = CLSRModel(CLSRConfig(encoder_config=encoder_config.to_dict(), **options))
            model.config.name_or_path = path
        model.tokenizer = tokenizer
        return model

    def main(self, argv: Optional[list] = None, prog: Optional[str] = None) -> None:
        run_clsr_recipe(self, *self.parse(argv, prog))


def run_clsr_recipe(recipe: "CLSRRecipe", model_args, backbone_args, data_args, training_args) -> None:
    """Pool the pairs' sentences once (cached), train the head, keep the best e by STS-B dev, save the model and
    score the 7 STS test sets for the base encoder alone and with CLSR (see ``recipes/clsr.py``)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    if data_args.torch_threads:
        torch.set_num_threads(data_args.torch_threads)
    # without a GPU (or other accelerator) the processes of a multi-process launch join one gloo group on CPU
    state = PartialState(cpu=not torch.accelerator.is_available())
    if not state.is_main_process:  # every process trains the same head; one writes the logs
        training_args = dataclasses.replace(training_args, report_to="none")
    check_not_an_input(training_args.output_dir, "--output_dir", [model_args.model_name_or_path])
    folder = RunFolder(training_args.output_dir, data_args.overwrite_output_dir, main=state.is_main_process)
    resume = find_checkpoint(training_args.output_dir, training_args.resume_from_checkpoint)  # resumed by train()
    accepted = check_resume(resume, training_args.run_record(), training_args.resume_accept_changes) if resume else []
    check_output_dir(EmbeddingCache(data_args.cache_dir).cache_dir, "--cache_dir")
    data_dir = resolve_data_dir(data_args.data_dir)
    dev = STSEvaluator(data_dir, DEV_TASKS, split="dev")
    test = STSEvaluator(data_dir, STS_TASKS, split="test") if data_args.do_test_eval else None  # read now, not after
    model = recipe.build_model(model_args, backbone_args, training_args.seed).to(state.device)
    held_out = held_out_sentences(data_dir)
    first, second = load_positive_pairs(data_args.train_file, data_dir)
    limit = data_args.max_train_samples  # the first N pairs, before the held-out filter
    corpus = build_pair_corpus(first[:limit], second[:limit], held_out, drop=data_args.test_overlap == "drop")
    require_full_batch(corpus, training_args.per_device_train_batch_size)  # before any pooling
    dev_overlap = [name for name in corpus.contaminated if name.endswith("-dev")]
    if dev_overlap:
        logging.warning("model selection on %s sees training sentences (--test_overlap keep)", ", ".join(dev_overlap))
    folder.acquire(lock=state.is_main_process)
    try:
        run_clsr_training(folder, model, corpus, held_out, dev, test, state, model_args, backbone_args, data_args,
                          training_args, {"checkpoint": resume, "accepted_changes": accepted} if accepted else None)
    finally:
        folder.release()


def run_clsr_training(folder: RunFolder, model, corpus, held_out, dev, test, state, model_args, backbone_args,
                      data_args, training_args, resume: Optional[dict] = None) -> None:
    """:func:`run_clsr_recipe` once everything is checked and the output folder is held."""
    cache = EmbeddingCache(data_args.cache_dir)
    start = time.perf_counter()
    train_entry = cache.get(model, corpus.sentences, data_args.encode_batch_size, across_processes=True)
    dev_vectors = cache.get(model, dev.sentences(), data_args.encode_batch_size, across_processes=True).vectors
    dev_evaluator = CachedSTSEvaluator(dev, dev_vectors)
    pooling_seconds = time.perf_counter() - start
    logging.info("%d pairs over %d sentences (%d dropped: they share a sentence with a held-out set); train cache %s "
                 "(%s)", len(corpus.pairs), len(corpus.sentences), corpus.dropped, train_entry.path, train_entry.status)
    trainer = CLSRTrainer(model, training_args, train_entry.vectors, corpus, held_out, dev_evaluator,
                          is_main_process=state.is_main_process)
    summary = trainer.train()
    test_vectors = (cache.get(model, test.sentences(), data_args.encode_batch_size, across_processes=True).vectors
                    if test else None)
    if not state.is_main_process:
        return
    require_finite_weights(model, "the final model")
    with folder.keeping_trained_model():
        model.save_pretrained(folder.staging)  # model, arguments and scores appear in output_dir together
        model.tokenizer.save_pretrained(folder.staging)
        record = {
            "model": training_args.output_dir, "base_model": model_args.model_name_or_path,
            "pooler": model.config.pooler_type, "train_data": data_args.train_file,
            "test_overlap": data_args.test_overlap, "pairs": len(corpus.pairs), "dropped_pairs": corpus.dropped,
            "overlap_pairs": corpus.overlap, "contaminated": corpus.contaminated,
            "pooling_seconds": round(pooling_seconds, 1), "train_cache": train_entry.status, **summary,
            "base_dev_STSBenchmark": dev_evaluator()["STSBenchmark"],
        }
        table = None
        if test is not None:
            test_evaluator = CachedSTSEvaluator(test, test_vectors)
            record["base_sts"], record["sts_aggregations"] = test_evaluator(), test_evaluator.evaluate(model.mlp)
            record["sts"] = record["sts_aggregations"][test.aggregation]
            record["protocol"] = protocol_record(model.config.pooler_type, test)
            clsr_row = f"+ CLSR ({data_args.train_file})"
            rows = {f"{model_args.model_name_or_path} ({model.config.pooler_type})": record["base_sts"],
                    clsr_row: record["sts"]}
            table = format_sts_table(rows, title="STS test (Spearman x100)",
                                     contaminated={clsr_row: corpus.contaminated})
        arguments = dict(model_args=model_args, backbone_args=backbone_args, data_args=data_args,
                         training_args=training_args, **({"resume": resume} if resume else {}))
        finish_run(folder.staging, training_args.output_dir, arguments, record, table)


def main_guard(main: Callable, argv: Optional[list] = None) -> None:
    """Run a recipe's ``main`` as ``python recipes/X.py`` / ``accelerate launch`` do, in the commands' error boundary
    (:func:`csekit.errors.report_errors`): bad input ends with one line on stderr and exit status 2."""
    def run() -> int:
        main(argv)
        return 0

    code = report_errors(run)
    if code:
        sys.exit(code)


__all__ = [
    "BackboneArguments", "CLSRDataArguments", "CLSRRecipe", "CSETrainingArguments", "ContrastiveDataArguments",
    "ContrastiveRecipe", "DataArguments", "RecipeArgumentParser", "config_kwargs", "docstring_arguments",
    "finish_run", "is_csekit_output", "main_guard", "model_arguments", "parse_recipe_args",
    "run_recipe", "write_arguments",
]
