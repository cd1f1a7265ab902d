"""What every training recipe shares: its flags, YAML + command-line parsing, data, Trainer set-up, save and test.

A recipe's method flags are its model config's fields: :func:`model_arguments` turns the ``@strict`` config class
(defaults = the paper's, help = the config docstring's ``Args:`` entry) into an ``HfArgumentParser`` dataclass, so
a setting is declared once, in ``modeling/``. The shared vocabulary of the four recipes:

* model: ``--model_name_or_path`` (a local folder, ``all-MiniLM-L6-v2`` or a Hub id) + the config fields;
* data (:class:`DataArguments`): ``--train_file`` (a local ``.txt``/``.csv``, a name the recipe knows, or a Hub
  dataset), ``--data_dir``, ``--do_test_eval``, ``--overwrite_output_dir``;
* training: ``transformers.TrainingArguments`` (``--output_dir``, ``--seed``, ``--report_to``, ...).

Bad input ends with one line and exit status 2 before anything is written (:func:`main_guard`, the one-line
:class:`RecipeArgumentParser`, :func:`prepare_output_dir`); the final model appears whole or not at all.

``recipes/simcse.py`` is the smallest example.
"""

import argparse
import dataclasses
import inspect
import json
import logging
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
import yaml
from huggingface_hub import constants
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoTokenizer, HfArgumentParser, PreTrainedConfig, TrainingArguments, set_seed

from ..atomic import STAGING, commit_files, write_json, write_text
from ..data import DATA_DIR_HELP, resolve_data_dir
from ..errors import DataError, OneLineUsageErrors
from ..evaluation.sts import DEV_TASKS, STS_TASKS, STSEvaluator, format_sts_table
from ..loading import ARGUMENTS_FILE, RESULTS_FILE, resolve_model_path
from ..options import positive_int
from .collators import ContrastiveCollator
from .data import load_training_dataset

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
    report_to: Optional[str] = field(default="none", metadata={"help": "'tensorboard' to log there."})
    remove_unused_columns: bool = field(default=False, metadata={"help": "Keep text columns for the collator."})
    dataloader_drop_last: bool = field(default=True, metadata={"help": "Every step sees a full batch."})

    def __post_init__(self):
        # A host without a GPU (or other accelerator) trains on CPU. Saying so is also what makes the processes of
        # `accelerate launch --multi_gpu --num_processes N` join one gloo group; otherwise each trains alone.
        if not torch.accelerator.is_available():
            self.use_cpu = True
        super().__post_init__()


class RecipeArgumentParser(OneLineUsageErrors, HfArgumentParser):
    """``HfArgumentParser`` whose errors (unknown flag, bad value, unknown YAML key) are one line."""


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
    parser.add_argument("--config", default=None, help="YAML file of arguments, or the name of one shipped with csekit "
                        f"({', '.join(shipped_configs())}); flags on the command line win.")
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
        values = yaml.safe_load(path.read_text()) or {}
        known = {f.name for cls in dataclass_types for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            parser.error(f"{path}: unknown key(s) {', '.join(unknown)}")
        parser.set_defaults(**values)
    # the outputs also hold the namespace of --config (declared only for --help) and the leftover strings
    *outputs, remaining = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
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
    record = {name: (value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value))
              for name, value in groups.items()}
    write_text(Path(output_dir, ARGUMENTS_FILE), json.dumps(record, indent=2, default=str) + "\n")


# ------------------------------------------------------------------------------------------------ the output folder
def is_csekit_output(folder: Path) -> bool:
    """Whether ``folder`` is (the start of) a csekit run's output: ``training_args.json``, ``checkpoint-*`` folders,
    an interrupted final save, or the ``config.json`` of a csekit model."""
    if (folder / ARGUMENTS_FILE).is_file() or (folder / STAGING).is_dir() or any(folder.glob("checkpoint-*/")):
        return True
    try:
        return json.loads((folder / "config.json").read_text()).get("model_type", "").startswith("csekit-")
    except (OSError, ValueError, AttributeError):
        return False


def prepare_output_dir(output_dir, overwrite: bool = False) -> Path:
    """Check ``--output_dir`` before anything is read or written, and remove what a final save killed midway left.

    Raises :class:`DataError` for a file, or for an existing non-empty folder that is not a csekit output
    (:func:`is_csekit_output`) unless ``overwrite``; a csekit run's own folder is fine (resuming, re-training).
    The final model is then built in ``output_dir/.csekit-staging`` and moved in by
    :func:`csekit.atomic.commit_files` (``config.json`` last): the folder also holds ``checkpoint-*``, so it cannot
    be swapped whole, and a reader sees the previous final model, no model (no ``config.json``), or the new one.
    """
    folder = Path(output_dir)
    if folder.exists() and not folder.is_dir():
        raise DataError(f"--output_dir {folder}: is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not overwrite and not is_csekit_output(folder):
        raise DataError(f"--output_dir {folder}: exists and is not a csekit output folder (no training_args.json, "
                        "checkpoint-* or csekit config.json); choose another folder or pass "
                        "--overwrite_output_dir true")
    shutil.rmtree(folder / STAGING, ignore_errors=True)
    return folder / STAGING


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
        if self.make_collator is not None:
            return self.make_collator(tokenizer, model, data_args, extra_args)
        views = getattr(model.config, "num_views", 2)
        return ContrastiveCollator(tokenizer, max_length=data_args.max_seq_length, unsupervised_views=views)

    def main(self, argv: Optional[list] = None, prog: Optional[str] = None) -> dict:
        model_args, data_args, training_args, extra_args = self.parse(argv, prog)
        return run_recipe(self, model_args, data_args, training_args, extra_args)


def run_recipe(recipe: ContrastiveRecipe, model_args, data_args, training_args, extra_args=None) -> dict:
    """Train with STS-B dev model selection, save the best model + tokenizer, score the 7 STS test sets.

    With ``--push_to_hub --hub_model_id NAME`` the scored folder is then published as ``csekit push`` does.

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
    staging = prepare_output_dir(training_args.output_dir, data_args.overwrite_output_dir)
    set_seed(training_args.seed)
    data_dir = resolve_data_dir(data_args.data_dir)
    model_path = resolve_model_path(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    global_batch = training_args.per_device_train_batch_size * training_args.world_size
    train_dataset = load_training_dataset(data_args.train_file, data_args.data_dir, global_batch,
                                          data_args.max_train_samples)
    model = recipe.build_model(model_path, model_args)
    model.tokenizer = tokenizer
    dev_tasks = (*DEV_TASKS, "SICKRelatedness") if data_args.eval_sickr else DEV_TASKS
    trainer = recipe.trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=recipe.collator(tokenizer, model, data_args, extra_args),
        processing_class=tokenizer,
        sts_evaluator=STSEvaluator(data_dir, dev_tasks, split="dev"),
    )
    resume = training_args.resume_from_checkpoint
    trainer.train(resume_from_checkpoint=True if resume == "last" else resume)
    # the final model, its arguments and test scores are built in the staging folder and appear together
    trainer.save_model(str(staging))  # on every process (sharded states are gathered); the main one writes
    results = {}
    if trainer.is_world_process_zero():
        groups = dict(model_args=model_args, data_args=data_args, training_args=training_args)
        write_arguments(staging, **groups, **({"extra_args": extra_args} if extra_args else {}))
        if data_args.do_test_eval:
            evaluator = STSEvaluator(data_dir, STS_TASKS, split="test")
            results = evaluator(lambda sentences: model.eval().encode(sentences, batch_size=128))
            record = {"model": training_args.output_dir, "pooler": model.config.pooler_type, "sts": results}
            write_json(staging / RESULTS_FILE, record)
        commit_files(staging, training_args.output_dir)
        if results:
            print(format_sts_table({training_args.output_dir: results}, title="STS test (Spearman x100)"))
        if publish:
            print(f"pushed to {training_args.hub_model_id}: {trainer.push_to_hub()}")
    return results


def main_guard(main: Callable, argv: Optional[list] = None) -> None:
    """Run a recipe's ``main``; bad input or an invalid model config ends with one line on stderr and exit status 2
    instead of a traceback."""
    try:
        main(argv)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except StrictDataclassError as error:  # config validators: report their own message
        print(f"error: invalid model configuration: {error.__cause__ or error}", file=sys.stderr)
        sys.exit(2)


__all__ = [
    "CSETrainingArguments", "ContrastiveDataArguments", "ContrastiveRecipe", "DataArguments", "RecipeArgumentParser",
    "config_kwargs", "docstring_arguments", "is_csekit_output", "main_guard", "model_arguments", "parse_recipe_args",
    "prepare_output_dir", "run_recipe", "write_arguments",
]
