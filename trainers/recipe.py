"""What every training recipe shares: argument parsing (YAML + CLI), data, Trainer set-up, final save and test.

A recipe supplies its model-arguments dataclass, a function building the model, and its Trainer class; see
``recipes/simcse.py`` for the smallest example.
"""

import dataclasses
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import yaml
from huggingface_hub import constants
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments, set_seed

from .collators import ContrastiveCollator
from .data import DataError, load_training_dataset, resolve_data_dir, resolve_data_file
from .encoders import resolve_model_path
from .sts import STS_TASKS, STSEvaluator, format_sts_table

logger = logging.getLogger(__name__)


@dataclass
class ContrastiveModelArguments:
    """Model fields shared by the contrastive recipes (SimCSE, WhitenedCSE, CMLM-CSE)."""

    model_name_or_path: str = field(
        default="bert-base-uncased",
        metadata={"help": "Backbone: a local folder, 'all-MiniLM-L6-v2' (embedded), or a Hub id in the local cache."},
    )
    pooler_type: str = field(
        default="cls", metadata={"help": "cls, cls_before_pooler, avg, avg_first_last, avg_top2 or layers."}
    )
    pooling_layers: list[int] = field(default=None, metadata={"help": "Layers averaged by pooler_type=layers."})
    temperature: float = field(default=0.05, metadata={"help": "InfoNCE temperature."})


@dataclass
class SimCSEArguments(ContrastiveModelArguments):
    mlp_only_train: bool = field(default=True, metadata={"help": "Use the [CLS] MLP only in training."})
    hard_negative_weight: float = field(default=0.0, metadata={"help": "Logit bonus of each own hard negative."})


@dataclass
class DataArguments:
    train_file: str = field(
        default="wiki/wiki1m_for_simcse.txt",
        metadata={"help": "Training data: .txt (one sentence a line, unsupervised) or .csv (sent0,sent1[,hard_neg]). "
                  "Relative paths are also looked up in the data folder."},
    )
    data_dir: Optional[str] = field(
        default=None, metadata={"help": "Data folder (default: $CSEKIT_DATA_DIR, ./data, ../shared/data)."}
    )
    max_seq_length: int = field(default=32, metadata={"help": "Truncation length of training sentences."})
    eval_sickr: bool = field(default=False, metadata={"help": "Also score SICK-R trial during training."})
    do_test_eval: bool = field(default=True, metadata={"help": "Score the final model on the 7 STS test sets."})


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


def parse_recipe_args(dataclass_types: tuple, argv: Optional[list] = None) -> tuple:
    """Parse ``[--config file.yaml] [--key value ...]``: YAML values replace defaults, CLI flags replace YAML."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = HfArgumentParser(dataclass_types)
    parser.add_argument("--config", default=None, help="YAML file of arguments; flags on the command line win.")
    config_path = None
    if "--config" in argv:
        position = argv.index("--config")
        config_path = argv[position + 1] if position + 1 < len(argv) else None
        del argv[position : position + 2]
    if config_path:
        path = Path(config_path)
        if not path.is_file():
            parser.error(f"--config {config_path}: no such file")
        values = yaml.safe_load(path.read_text()) or {}
        known = {f.name for cls in dataclass_types for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            parser.error(f"{config_path}: unknown key(s) {', '.join(unknown)}")
        parser.set_defaults(**values)
    # the outputs also hold the namespace of --config (declared only for --help) and the leftover strings
    *outputs, remaining = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    return tuple(outputs[: len(dataclass_types)])


def run_recipe(
    model_args,
    data_args: DataArguments,
    training_args: CSETrainingArguments,
    build_model: Callable,
    trainer_class,
    collator: Optional[Callable] = None,
) -> dict:
    """Train with STS-B dev model selection, save the best model + tokenizer, score the 7 STS test sets.

    With ``--push_to_hub --hub_model_id NAME`` the scored folder is then published as ``csekit push`` does.

    Args:
        model_args: the recipe's model dataclass; must have ``model_name_or_path``.
        build_model: ``(model_path, model_args) -> model`` (a csekit ``PreTrainedModel``).
        trainer_class: a :class:`~trainers.trainer.ContrastiveTrainer` subclass.
        collator: ``tokenizer -> data collator``; default :class:`ContrastiveCollator`.
    Returns:
        the test results ``{"STS12": ..., "avg": ...}`` (empty if ``do_test_eval`` is off).
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    publish = training_args.push_to_hub
    if publish and not (training_args.hub_model_id and data_args.do_test_eval):
        raise DataError("--push_to_hub needs --hub_model_id namespace/name and the test evaluation (the card's scores)")
    if publish and constants.is_offline_mode():  # say so now, not after hours of training
        raise DataError("--push_to_hub: HF_HUB_OFFLINE is set, so the Hub cannot be reached; unset it to push")
    training_args.push_to_hub = False  # the Trainer must not push checkpoints: we publish once, after the test scores
    set_seed(training_args.seed)
    data_dir = resolve_data_dir(data_args.data_dir)
    model_path = resolve_model_path(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    global_batch = training_args.per_device_train_batch_size * training_args.world_size
    train_dataset = load_training_dataset(resolve_data_file(data_args.train_file, data_args.data_dir), global_batch)
    model = build_model(model_path, model_args)
    model.tokenizer = tokenizer
    dev_tasks = ("STSBenchmark", "SICKRelatedness") if data_args.eval_sickr else ("STSBenchmark",)
    make_collator = collator or (lambda tok: ContrastiveCollator(tok, max_length=data_args.max_seq_length))
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=make_collator(tokenizer),
        processing_class=tokenizer,
        sts_evaluator=STSEvaluator(data_dir, dev_tasks, split="dev"),
    )
    resume = training_args.resume_from_checkpoint
    trainer.train(resume_from_checkpoint=True if resume == "last" else resume)
    trainer.save_model(training_args.output_dir)
    if trainer.is_world_process_zero():  # JSON twin of training_args.bin: model cards read it without unpickling
        arguments = {"model_args": dataclasses.asdict(model_args), "data_args": dataclasses.asdict(data_args),
                     "training_args": training_args.to_dict()}
        Path(training_args.output_dir, "training_args.json").write_text(json.dumps(arguments, indent=2, default=str) + "\n")
    results = {}
    if data_args.do_test_eval and trainer.is_world_process_zero():
        evaluator = STSEvaluator(data_dir, STS_TASKS, split="test")
        results = evaluator(lambda sentences: model.eval().encode(sentences, batch_size=128))
        record = {"model": training_args.output_dir, "pooler": model.config.pooler_type, "sts": results}
        Path(training_args.output_dir, "eval_results.json").write_text(json.dumps(record, indent=2) + "\n")
        print(format_sts_table({training_args.output_dir: results}, title="STS test (Spearman x100)"))
        if publish:
            print(f"pushed to {training_args.hub_model_id}: {trainer.push_to_hub()}")
    return results


def main_guard(main: Callable) -> None:
    """Run a recipe's ``main``; bad input or an invalid model config ends with one line instead of a traceback."""
    try:
        main()
    except DataError as error:
        sys.exit(f"error: {error}")
    except StrictDataclassError as error:  # config validators: report their own message
        sys.exit(f"error: invalid model configuration: {error.__cause__ or error}")
