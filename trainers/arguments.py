"""A recipe's flags and how they are read: YAML + command line into dataclasses, checked before any work.

A recipe's method flags are its model config's fields: [`model_arguments`][csekit.trainers.arguments.model_arguments]
turns the ``@strict`` config class
(defaults = the paper's, help = the config docstring's ``Args:`` entry) into an ``HfArgumentParser`` dataclass, so
a setting is declared once, in ``modeling/``. The shared vocabulary of the recipes:

* model: ``--model_name_or_path`` (a local folder, ``all-MiniLM-L6-v2`` or a Hub id) + the config fields;
* data ([`DataArguments`][csekit.trainers.arguments.DataArguments]): ``--train_file`` (a local ``.txt``/``.csv``, a
name the recipe knows, or a Hub
  dataset), ``--data_dir``, ``--do_test_eval``, ``--overwrite_output_dir``;
* training: ``transformers.TrainingArguments`` (``--output_dir``, ``--seed``, ``--report_to``, ...).

Bad input ends with one line and exit status 2 (the one-line
[`RecipeArgumentParser`][csekit.trainers.arguments.RecipeArgumentParser], [`csekit.preflight`][csekit.preflight]).
"""

import argparse
import dataclasses
import inspect
import json
import re
import sys
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import yaml
from transformers import HfArgumentParser, PreTrainedConfig, TrainingArguments

from ..atomic import write_text
from ..data import DATA_DIR_HELP
from ..errors import DataError, OneLineUsageErrors
from ..loading import ARGUMENTS_FILE, LOCAL_PATHS, local_paths
from ..options import FLAG_ALIASES, FLAG_NAMES, positive_int
from ..paper_configs import configs_dir, paper_configs
from ..preflight import backbone_table, check_finite_groups, check_training_arguments
from .multi_dataset import BATCH_SAMPLERS


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
    nested backbone config (the recipe loads the backbone from ``--model_name_or_path``) and the fields the class
    lists in ``fields_without_flags`` (settings its method refuses)."""
    inherited = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    excluded = (*NOT_FLAGS, *getattr(config_class, "fields_without_flags", ()))
    return [f for f in dataclasses.fields(config_class) if f.name not in inherited and f.name not in excluded]


def flag_settings(config) -> dict:
    """``{field: value}`` of a config's method settings that are flags
    ([`config_fields`][csekit.trainers.arguments.config_fields]): what a run record and ``training_args.json``
    hold of the model."""
    return {f.name: getattr(config, f.name) for f in config_fields(type(config))}


def built_from(model) -> Optional[str]:
    """The backbone folder or Hub id a model was built from (``from_encoder`` names it in ``config.name_or_path``),
    or ``None``: ``training_args.json``'s ``model_name_or_path`` for a run built in Python."""
    return getattr(getattr(model, "config", None), "name_or_path", None) or None


# config fields that are not method flags: the backbone's config (from --model_name_or_path) and the inference
# settings of a sentence-transformers backbone (read from its folder)
NOT_FLAGS = ("encoder_config", "sentence_transformers_settings")
# dataloader workers per process on an accelerator, where collation in the main process would sit between steps
ACCELERATOR_LOADER_WORKERS = 2



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
        fields.append((FLAG_NAMES.get(config_field.name, config_field.name), config_field.type, field(
            default=default, metadata={"help": helps[config_field.name]}
        ) if not isinstance(default, dataclasses.Field) else default))
    return dataclasses.make_dataclass(name or config_class.__name__.replace("Config", "Arguments"), fields)


def config_kwargs(model_args, config_class) -> dict:
    """The config fields of a parsed [`model_arguments`][csekit.trainers.arguments.model_arguments] instance, ready for
    ``from_encoder(**kwargs)``."""
    return {f.name: getattr(model_args, FLAG_NAMES.get(f.name, f.name)) for f in config_fields(config_class)}


# ------------------------------------------------------------------------------------------------ shipped configs
def shipped_configs(recipe: Optional[str] = None) -> list:
    """The names ``--config`` accepts for the YAML files shipped with csekit (``quickstart``, ``paper/...``); with
    ``recipe``, the paper configs among them are that recipe's own (their headers' commands run it)."""
    folder = configs_dir()
    names = sorted(str(path.relative_to(folder).with_suffix("")) for path in folder.rglob("*.yaml"))
    if recipe is None:
        return names
    own = {f"paper/{config.name}" for config in paper_configs() if config.recipe == recipe}
    return [name for name in names if not name.startswith("paper/") or name in own]


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
POSITIVE_FLAGS = ("max_seq_length", "per_device_train_batch_size", "encode_batch_size", "max_train_samples",
                  "mini_batch_size", "mini_batch_tokens", "lora_r")


class SeveralValues(argparse.Action):
    """``nargs="+"`` that also takes its flag more than once (``--train_file a --train_file b`` is ``--train_file a
    b``): the values add up, and replace the default rather than join it (argparse's own ``extend`` joins it)."""

    def __call__(self, parser, namespace, values, option_string=None):
        previous = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, [*([] if previous is self.default else previous or []), *values])


@dataclass
class DataArguments:
    train_file: list[str] = field(
        default_factory=lambda: ["wiki/wiki1m_for_simcse.txt"],
        metadata={"help": "Training data: a .txt (one sentence a line, unsupervised), a .csv (sent0,sent1[,hard_neg], "
                  "supervised), or a Hub dataset id (the .csv's columns, or 'text'), also looked up in the data "
                  "folder. Several train in one run, each step's batch from one.",
                  "action": SeveralValues, "metavar": "FILE"},
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

    def __post_init__(self):
        # one file is recorded as a path, as ever; several as their list, each its own dataset
        files = [self.train_file] if isinstance(self.train_file, str) else list(self.train_file)
        repeated = sorted({name for name in files if files.count(name) > 1})
        if repeated:
            raise DataError(f"--train_file {repeated[0]} is given more than once; give each dataset once")
        self.train_file = files[0] if len(files) == 1 else files


@dataclass
class ContrastiveDataArguments(DataArguments):
    max_seq_length: int = field(default=32, metadata={"help": "Truncation length of training sentences."})
    padding_free: Optional[bool] = field(default=None, metadata={
        "help": "Pack each batch's real tokens into one row (same math, less work); false pads. Default: packed on "
                "the CPU, padded on a GPU (faster there)."})
    pad_to_multiple_of: Optional[int] = field(default=None, metadata={
        "help": "Pad each padded batch's length (a packed batch's layout width) to a multiple of N, so a compiled "
                "step meets few shapes (CUDA graphs need fixed ones). Default: --max_seq_length under --torch_compile "
                "(one shape), else the batch's longest sentence."})
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
    logging_nan_inf_filter: bool = field(default=False, metadata={
        "help": "transformers' filter of non-finite logged losses, which reads the loss on the host every step; off, "
                "since csekit stops at the first non-finite loss or gradient before its update."})
    report_to: Optional[str] = field(default="none", metadata={
        "help": "'tensorboard' to log there (pip install 'csekit[tensorboard]'); 'none' logs to the console."})
    resume_from_checkpoint: Optional[str] = field(default=None, metadata={
        "help": "Continue from 'last' (the newest complete checkpoint in --output_dir) or a checkpoint folder; the "
                "result equals the uninterrupted run."})
    resume_accept_changes: bool = field(default=False, metadata={
        "help": "Resume from a checkpoint made with other settings (refused otherwise, naming each); "
                "training_args.json records each change and whether it took effect."})
    push_to_hub: bool = field(default=False, metadata={
        "help": "Publish the final model to --hub_model_id once, after the test evaluation, as `csekit push` does "
                "(checkpoints are never pushed)."})
    mini_batch_size: Optional[int] = field(default=None, metadata={
        "help": "Exact gradient caching: encode each step's batch in chunks of this many examples (twice, same "
                "dropout masks), the loss on the whole batch: same loss and gradients, one chunk's activation "
                "memory, about one more forward pass of time."})
    mini_batch_tokens: Optional[int] = field(default=None, metadata={
        "help": "Exact gradient caching with chunks of whole examples holding at most this many tokens (packed: real "
                "tokens; padded: rows x width), so memory follows the budget whatever the lengths; instead of "
                "--mini_batch_size."})
    duplicate_negatives: str = field(default="keep", metadata={
        "help": "'mask': leave out of each anchor's negatives the in-batch candidates whose text is its own or its "
                "positive's (logged as masked_pairs per step); 'keep' is the paper's loss.",
        "choices": ["keep", "mask"]})
    lora_r: Optional[int] = field(default=None, metadata={
        "help": "Train low-rank adapters of this rank (LoRA, through peft: pip install 'csekit[peft]') instead of the "
                "backbone: its weights stay as loaded, the adapters and the method's head train, checkpoints hold the "
                "adapters and the published folder the merged weights. Unset: the whole model trains."})
    lora_alpha: Optional[float] = field(default=None, metadata={
        "help": "LoRA's scaling: each update is alpha / r x B A. Default: 2 x --lora_r (LLM2Vec's setting)."})
    lora_dropout: float = field(default=0.05, metadata={
        "help": "Dropout on each adapter's input (LLM2Vec's 0.05)."})
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"], metadata={
        "help": "The layers that get adapters: names (q_proj v_proj ...), or all-linear (every linear layer, as "
                "LLM2Vec)."})
    save_adapter: bool = field(default=False, metadata={
        "help": "With --lora_r: the adapter, too, in OUTPUT_DIR/adapter/."})
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "Keep the checkpoint-N folders after the run (resumable)."})
    multi_dataset_batch_sampler: str = field(default="proportional", metadata={
        "help": "With several --train_file: 'proportional' (each dataset's batches once an epoch, in shuffled "
                "turns) or 'round_robin' (one of each in turn).",
        "choices": list(BATCH_SAMPLERS)})
    dataset_prompts: Optional[list[str]] = field(default=None, metadata={
        "help": "With several --train_file: a file's own prompt, not the model's.", "metavar": "FILE=PROMPT"})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep text columns for the collator."})
    dataloader_drop_last: bool = field(default=True, metadata={"help": "Every step sees a full batch."})
    dataloader_num_workers: Optional[int] = field(default=None, metadata={
        "help": f"Processes that collate batches ahead of the step: {ACCELERATOR_LOADER_WORKERS} on a GPU (into "
                "pinned memory), 0 on the CPU (workers would take the step's cores). The batches are the same "
                "either way (random draws are seeded per example)."})

    def __post_init__(self):
        # A host without a GPU (or other accelerator) trains on CPU. Saying so is also what makes the processes of
        # `accelerate launch --multi_gpu --num_processes N` join one gloo group; otherwise each trains alone.
        if not torch.accelerator.is_available():
            self.use_cpu = True
        if self.dataloader_num_workers is None:
            self.dataloader_num_workers = 0 if self.use_cpu else ACCELERATOR_LOADER_WORKERS
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
    "resume_accept_changes", "keep_checkpoints", "mini_batch_size", "mini_batch_tokens", "duplicate_negatives",
    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "push_to_hub", "hub_model_id",
    "dataloader_num_workers",
)
HELP_GROUPS = {"model": "method: the model config's fields (the paper's defaults)", "data": "data and evaluation",
               "training": "training (the common flags; --help-all lists every one)"}


def group_help(parser: argparse.ArgumentParser, dataclass_types: tuple, show_all: bool) -> None:
    """Put each argument group's flags under a titled section of ``--help`` and, unless ``show_all``, hide the
    TrainingArguments flags that are not in
    [`COMMON_TRAINING_FLAGS`][csekit.trainers.arguments.COMMON_TRAINING_FLAGS]."""
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
        check_yaml_null(parser, dataclass_types, path, key, action)
        return value
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    items = value if many and isinstance(value, list) else [value]
    if (not many and isinstance(value, list)) or any(isinstance(item, (list, dict)) for item in items):
        parser.error(f"--config {path}: {key}: expected {'values' if many else 'one value'}, got a "
                     f"{type(value).__name__}")
    converted = [yaml_item(parser, path, key, action, item) for item in items]
    return converted if many else converted[0]


def check_yaml_null(parser: argparse.ArgumentParser, dataclass_types: tuple, path: Path, key: str, action) -> None:
    """A YAML ``null`` is taken only by a flag whose annotation allows ``None``; otherwise one line."""
    # the class annotations: HfArgumentParser rewrites Field.type (Optional[X] becomes X) when it builds flags
    annotation = next((str(hints[key]) for hints in map(typing.get_type_hints, dataclass_types) if key in hints), "")
    if "None" not in annotation and "Optional" not in annotation:  # a flag that always has a value
        parser.error(f"--config {path}: {key}: null, but it takes a value (default {action.default}); remove the "
                     "line to keep the default")


def yaml_item(parser: argparse.ArgumentParser, path: Path, key: str, action, item):
    """One YAML value through the flag's type and choices, as its command-line text; else one line."""
    text = str(item).lower() if isinstance(item, bool) else str(item)
    try:
        converted = action.type(text) if action.type is not None else item
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        parser.error(f"--config {path}: {key}: invalid value {item!r}")
    if action.choices is not None and converted not in action.choices:
        parser.error(f"--config {path}: {key}: invalid choice {item!r} (choose from "
                     f"{', '.join(map(str, action.choices))})")
    return converted


def build_recipe_parser(dataclass_types: tuple, defaults: Optional[dict], description: Optional[str],
                        prog: Optional[str], show_all: bool, recipe: Optional[str] = None) -> RecipeArgumentParser:
    """The recipe's parser: the dataclasses' flags in titled groups
    ([`group_help`][csekit.trainers.arguments.group_help]), ``--config`` and
    ``--help-all``, with ``defaults`` (the recipe's own, e.g. its output folder) over the dataclass defaults."""
    parser = RecipeArgumentParser(dataclass_types, description=description, prog=prog,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    if show_all:
        parser.epilog = ("backbones (config.json model_type; anything else, decoder-only and encoder-decoder models "
                         f"included, is refused before any work):\n{backbone_table()}")
    for action in parser._actions:  # HfArgumentParser gives --no_X the help of --X
        if action.option_strings and all(flag.startswith(("--no_", "--no-")) for flag in action.option_strings):
            action.help = f"Turn --{action.dest} off (the same as --{action.dest} false)."
    group_help(parser, dataclass_types, show_all)
    parser.add_argument("--config", default=None, help="YAML file of arguments, or the name of one shipped with csekit "
                        f"({', '.join(shipped_configs(recipe))}); flags on the command line win.")
    parser.add_argument("--help-all", action="store_true", help="Show every flag, all of transformers' "
                        "TrainingArguments included, and exit.")
    if defaults:
        parser.set_defaults(**defaults)
    return parser


def pop_config_flag(argv: list) -> Optional[str]:
    """Remove ``--config VALUE`` from ``argv`` and return ``VALUE`` (``None`` when absent)."""
    if "--config" not in argv:
        return None
    position = argv.index("--config")
    value = argv[position + 1] if position + 1 < len(argv) else None
    del argv[position : position + 2]
    return value


def read_config_file(parser: argparse.ArgumentParser, dataclass_types: tuple, name: str,
                     recipe: Optional[str] = None) -> dict:
    """The ``{flag: value}`` of a ``--config`` YAML file (a path or a shipped name), each value typed as its flag
    ([`yaml_value`][csekit.trainers.arguments.yaml_value]); anything else is one line through ``parser.error``."""
    path = resolve_recipe_config(name)
    if path is None:
        parser.error(f"--config {name}: no such file (shipped configs: {', '.join(shipped_configs(recipe))})")
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
    for old, new in FLAG_ALIASES.items():
        if old in values and old not in known and new in known:
            warnings.warn(f"--config {path}: {old} is now {new}; the old name is accepted until the next release")
            values[new] = values.pop(old)
    unknown = sorted(set(values) - known)
    if unknown:
        parser.error(f"{path}: unknown key(s) {', '.join(unknown)}")
    return {key: yaml_value(parser, dataclass_types, path, key, value) for key, value in values.items()}


def check_sizes(parser: argparse.ArgumentParser, groups: tuple) -> None:
    """Every float finite ([`check_finite_groups`][csekit.preflight.check_finite_groups]) and every size of
    [`POSITIVE_FLAGS`][csekit.trainers.arguments.POSITIVE_FLAGS]
    at least 1."""
    check_finite_groups(groups)
    for group in groups:
        for name in POSITIVE_FLAGS:
            if getattr(group, name, None) is not None:
                try:
                    positive_int(getattr(group, name))
                except argparse.ArgumentTypeError as error:
                    parser.error(f"argument --{name}: {error}")


# flags that add up where a recipe takes several (``SeveralValues``): in a recipe taking one, a repeat is one line
ADDING_FLAGS = ("train_file",)


def check_repeated_flags(parser: argparse.ArgumentParser, argv: list) -> None:
    """``--train_file`` given twice to a recipe that trains on one (CLSR's pairs) is one line: argparse would keep the
    last, where the other recipes train on both. (Any other flag given twice keeps its last value, as argparse does:
    the usual way to override a flag in a script.)"""
    counts = {}
    for item in argv:
        action = parser._option_string_actions.get(item.split("=", 1)[0]) if item.startswith("--") else None
        if action is not None and action.dest in ADDING_FLAGS and not isinstance(action, SeveralValues):
            counts[action.dest] = counts.get(action.dest, 0) + 1
            if counts[action.dest] > 1:
                parser.error(f"--{action.dest} is given more than once, but this recipe takes one; give it once")


def parse_recipe_args(
    dataclass_types: tuple, argv: Optional[list] = None, defaults: Optional[dict] = None,
    description: Optional[str] = None, prog: Optional[str] = None, recipe: Optional[str] = None,
) -> tuple:
    """Parse ``[--config file.yaml] [--key value ...]``: ``defaults`` (the recipe's own, e.g. its output folder)
    replace the dataclass defaults, YAML values replace those, command-line flags replace YAML.

    ``--config`` takes a YAML path, or the name of a configuration shipped with csekit (``quickstart``,
    ``paper/simcse_bert_base``; see [`resolve_recipe_config`][csekit.trainers.arguments.resolve_recipe_config]);
    its help lists ``recipe``'s own paper configs ([`shipped_configs`][csekit.trainers.arguments.shipped_configs])."""
    argv = list(sys.argv[1:] if argv is None else argv)
    show_all = "--help-all" in argv
    argv = ["--help" if item == "--help-all" else item for item in argv]
    parser = build_recipe_parser(dataclass_types, defaults, description, prog, show_all, recipe)
    known = {f.name for cls in dataclass_types for f in dataclasses.fields(cls)}
    for old, new in FLAG_ALIASES.items():
        if old not in known and new in known:
            renamed = [f"--{new}{item[len(old) + 2:]}" if item.split("=")[0] == f"--{old}" else item for item in argv]
            if renamed != argv:
                warnings.warn(f"--{old} is now --{new}; the old name is accepted until the next release")
            argv = renamed
    check_repeated_flags(parser, argv)
    config = pop_config_flag(argv)
    if config:
        parser.set_defaults(**read_config_file(parser, dataclass_types, config, recipe))
    # the outputs also hold the namespace of --config (declared only for --help) and the leftover strings
    try:
        *outputs, remaining = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    except ValueError as error:  # TrainingArguments' own validation of a value combination (DataError: ours)
        if isinstance(error, DataError):
            raise
        parser.error(str(error).strip().splitlines()[0])
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    groups = tuple(outputs[: len(dataclass_types)])
    check_sizes(parser, groups)
    return groups


# The fields of a run's argument groups that do not change the trained model; a resume may change them freely. Every
# other field (method, data, training, extra flags) is in the resume record (setup_record) and compared by
# csekit.preflight.check_resume. Evaluation cadence is not here: STS-B dev scores select the final model.
BOOKKEEPING_FIELDS = frozenset({
    # where the run writes and what it keeps
    "output_dir", "overwrite_output_dir", "keep_checkpoints", "logging_dir", "data_dir", "cache_dir",
    # logging and progress
    "logging_strategy", "logging_steps", "logging_first_step", "log_on_each_node", "logging_nan_inf_filter",
    "log_level", "log_level_replica", "disable_tqdm", "include_num_input_tokens_seen", "skip_memory_metrics",
    # saving checkpoints (a checkpoint holds the state, not the model's course)
    "save_strategy", "save_steps", "save_total_limit", "save_on_each_node", "save_only_model", "save_epochs",
    "enable_jit_checkpoint",
    # reporting and publishing
    "report_to", "run_name", "project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id",
    "push_to_hub", "hub_token", "hub_private_repo", "hub_model_id", "hub_strategy", "hub_always_push", "hub_revision",
    # the resume flags themselves, and the test scores computed after training
    "resume_from_checkpoint", "resume_accept_changes", "do_test_eval", "do_predict",
    # how fast data reaches the model (the batches are the same)
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "dataloader_multiprocessing_context", "torch_threads", "encode_batch_size", "per_device_eval_batch_size",
    "eval_accumulation_steps", "torch_empty_cache_steps", "ddp_timeout", "local_rank",
})


def group_values(group) -> dict:
    """An argument group as ``{field: value}``: ``TrainingArguments.to_dict()`` (tokens masked), a dict as it is, any
    other dataclass through ``asdict``."""
    if isinstance(group, dict):
        return group
    return group.to_dict() if hasattr(group, "to_dict") else dataclasses.asdict(group)


def setup_record(method: str, processes: Optional[int], **groups) -> dict:
    """What a resume must match (``csekit_run.json`` in every checkpoint): the method, the processes and every
    field of the argument ``groups`` (dataclasses, or dicts of settings) except
    [`BOOKKEEPING_FIELDS`][csekit.trainers.arguments.BOOKKEEPING_FIELDS], as JSON
    values."""
    record = {"method": method, **({"processes": processes} if processes is not None else {})}
    for group in groups.values():
        record.update({key: value for key, value in group_values(group).items() if key not in BOOKKEEPING_FIELDS})
    return json.loads(json.dumps(record, default=str))


def arguments_record(**groups) -> dict:
    """What ``training_args.json`` holds: every argument group of the run (dataclasses, ``TrainingArguments`` or
    dicts), as JSON values, and the local paths among them (shown by base name in the card and the upload)."""
    record = json.loads(json.dumps({name: group_values(value) for name, value in groups.items()}, default=str))
    record[LOCAL_PATHS] = local_paths(record)
    return record


def write_arguments(output_dir, **groups) -> None:
    """``training_args.json``: [`arguments_record`][csekit.trainers.arguments.arguments_record] of the run (the card
    reads it; nothing is unpickled)."""
    write_text(Path(output_dir, ARGUMENTS_FILE), json.dumps(arguments_record(**groups), indent=2) + "\n")


__all__ = [
    "COMMON_TRAINING_FLAGS", "CSETrainingArguments", "ContrastiveDataArguments", "DataArguments",
    "RecipeArgumentParser", "arguments_record", "build_recipe_parser", "built_from", "config_fields", "config_kwargs",
    "flag_settings",
    "docstring_arguments", "model_arguments", "parse_recipe_args", "read_config_file", "resolve_recipe_config",
    "setup_record", "shipped_configs", "write_arguments",
]
