"""The run of a Trainer-based recipe: checks, data, model, Trainer, save, test scores, publish.

Everything a run needs is checked before its first step ([`csekit.preflight`][csekit.preflight], the one-line
[`RecipeArgumentParser`][csekit.trainers.arguments.RecipeArgumentParser], `RunFolder`,
[`main_guard`][csekit.trainers.runner.main_guard]); the final model appears whole or not at all. ``recipes/simcse.py``
is the smallest recipe.
"""

import contextlib
import dataclasses
import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from huggingface_hub import constants
from transformers import set_seed

from ..atomic import commit_files, write_json
from ..data import resolve_data_dir
from ..errors import DataError, report_errors
from ..evaluation.encoders import load_embedder
from ..evaluation.geometry import GeometryEvaluator
from ..evaluation.protocol import protocol_record
from ..evaluation.score_cache import ScoreCache, key_of
from ..evaluation.sts import DEV_TASKS, STS_TASKS, STSEvaluator, format_sts_table
from ..loading import LOCAL_PATHS, RESULTS_FILE, hub_id_of, local_paths, resolve_model_path
from ..methods import Method
from ..modeling.encoding import encoding_label
from ..preflight import (
    AUXILIARY_CHECKS,
    TRAIN_DATA,
    check_model_inputs,
    check_not_an_input,
    check_resume,
    find_checkpoint,
    is_csekit_model,
    load_tokenizer,
    read_model_config,
)
from ..st_folder import is_st_folder
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
from .data import data_fingerprint, load_training_dataset
from .output_dir import RunFolder
from .trainer import require_finite_weights

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ the runner
@dataclass
class ContrastiveRecipe:
    """A Trainer-based recipe (a method whose trainer is a transformers Trainer): a method and how its batches are made.

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
                                   prog)
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

    def main(self, argv: Optional[list] = None, prog: Optional[str] = None) -> dict:
        """Parse ``argv`` and run the recipe ([`run_recipe`][csekit.trainers.runner.run_recipe]); returns the test
        scores."""
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


def encoded_once(embed: Callable[[list], object]) -> Callable[[list], object]:
    """``embed`` that encodes a list of sentences once and returns the same vectors when asked for it again (the STS
    test sentences, scored at each Matryoshka size)."""
    last = {}

    def encode(sentences: list):
        key = tuple(sentences)
        if key not in last:
            last.clear()
            last[key] = embed(sentences)
        return last[key]

    return encode


def scores_at_sizes(test: STSEvaluator, encode: Callable[[list], object], sizes: list) -> dict:
    """``{size: scores}``: ``test``'s scores of the first ``size`` coordinates of ``encode``'s vectors, at each size
    (a Matryoshka size; ``csekit evaluate --truncate-dim`` scores one). Pass an
    [`encoded_once`][csekit.trainers.runner.encoded_once] ``encode`` to
    encode the sentences once for all sizes."""
    return {size: test.evaluate(lambda sentences, size=size: encode(sentences)[:, :size])[test.aggregation]
            for size in sizes}


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


def base_representation(path, config) -> dict:
    """How the card's base-model row scores the model training started from: a csekit or sentence-transformers
    folder with its own representation (``{}``), a bare encoder with the trained model's (``config``'s pooler and
    layers, less the trained head: ``cls`` reads the [CLS] state, ``cls_before_pooler``, never BERT's
    ``pooler_output``), so both rows differ by training alone. ``path``: the base model's resolved folder."""
    if is_st_folder(path) or is_csekit_model(path):
        return {}
    pooler = "cls_before_pooler" if config.pooler_type == "cls" else config.pooler_type
    return {"pooler": pooler, **({"pooling_layers": list(config.pooling_layers)} if pooler == "layers" else {})}


def base_scores_valid(test: STSEvaluator):
    """The check of a cached base-model entry: ``test``'s tasks, each a finite Spearman x100, and a pooler name."""
    tasks = {*test.tasks, "avg"}

    def check(scores: dict) -> bool:
        sts, pooler = scores.get("base_sts"), scores.get("base_pooler")
        return (isinstance(sts, dict) and set(sts) == tasks and isinstance(pooler, str) and all(
            type(value) in (int, float) and math.isfinite(value) and -100 <= value <= 100 for value in sts.values()))

    return check


def base_model_scores(name_or_path: str, path, test: STSEvaluator, representation: dict) -> dict:
    """``{"base_sts", "base_pooler"}``: the STS test scores of the model training started from, scored with
    ``representation`` ([`base_representation`][csekit.trainers.runner.base_representation]), for the card's row
    beside the trained model's (``path``: its resolved folder). Kept in the score cache
    ([ScoreCache][csekit.evaluation.score_cache.ScoreCache]) under the model's revision, the protocol and the
    representation, so a second run from the same base does not score it again; an entry is used only when its inputs
    and scores check out."""
    cache = ScoreCache()
    inputs = cache.inputs(path, test, **representation)
    cached = cache.get(inputs, base_scores_valid(test))
    if cached is not None:
        logger.info("%s: its STS test scores come from the score cache (%s)", name_or_path,
                    cache.path(key_of(inputs)))
        return cached
    embed, info = load_embedder(name_or_path, batch_size=128, **representation)
    with encoding_label(f"Encoding {name_or_path} (base model) for the STS test sets"):
        scores = {"base_sts": test.evaluate(embed)[test.aggregation], "base_pooler": info["pooler"]}
    cache.put(inputs, scores)
    return scores


def finish_run(folder: Path, record: dict, table: Optional[str] = None, card: Optional[dict] = None) -> None:
    """The end of every recipe, on the main process, once the trained model is committed to ``folder``: the test
    record (``eval_results.json``) and, with ``card``
    ([`write_model_card`][csekit.publishing.model_card.write_model_card]'s
    ``repo_id`` and ``data_dir``), the model card (its figures, ``mteb_model_meta.json``, ``README.md`` last) are added
    beside it, each file whole or not at all; then the test table is printed."""
    write_json(folder / RESULTS_FILE, {**record, LOCAL_PATHS: local_paths(record)})
    if card is not None and "sts" in record:  # a card needs the test scores (--do_test_eval)
        from ..publishing.model_card import write_model_card

        write_model_card(folder, repo_id=card.get("repo_id") or f"<your-namespace>/{folder.name}", figure="missing",
                         data_dir=card.get("data_dir"))
    if table:
        print(table)


@contextlib.contextmanager
def scoring(folder: Path):
    """The scoring of a committed model: whatever stops it (an error, Ctrl-C, a kill signal turned into an
    exception) is logged with the commands that finish the folder, since the model is already in place."""
    try:
        yield
    except BaseException:
        logger.error("the scoring of the trained model did not finish; the model is in %s: score it with `csekit "
                     "evaluate %s --output %s` and write its card with `csekit card %s`", folder, folder,
                     folder / RESULTS_FILE, folder)
        raise


# ------------------------------------------------------------------------------------------------ the stages
# run_recipe is check -> build -> train -> commit (save, score, finish_run) -> publish; CLSR's recipe shares commit_run.
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


def check_run(recipe: ContrastiveRecipe, model_args, data_args, training_args, extra_args=None) -> CheckedRun:
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
    check_lengths(model_args, model_path, tokenizer, max_seq_length=data_args.max_seq_length)
    global_batch = training_args.per_device_train_batch_size * training_args.world_size
    train_dataset = load_training_dataset(data_args.train_file, data_args.data_dir, global_batch,
                                          data_args.max_train_samples)
    record[TRAIN_DATA] = data_fingerprint(train_dataset)  # what is trained on, not only the file's name
    accepted = check_resume(resume, record, training_args.resume_accept_changes) if resume else []
    columns = recipe.trainer_class.check_columns(train_dataset.column_names, data_args.train_file, recipe.method.name)
    if recipe.trainer_class.negatives_per_anchor(global_batch, columns) < 1:
        raise DataError(f"--per_device_train_batch_size {training_args.per_device_train_batch_size} x "
                        f"{training_args.world_size} process(es): each anchor would see no negative, so the "
                        "contrastive loss is constant and nothing trains; use 2 or more examples per step")
    for flag in ("mini_batch_size", "mini_batch_tokens"):
        if getattr(training_args, flag, None) and not recipe.method.gradient_caching:
            raise DataError(f"--{flag}: {recipe.method.name} does not support gradient caching (the registry's "
                            "gradient_caching capability)")
    for name, kind in getattr(recipe.config_class, "model_path_fields", {}).items():  # further models (a generator)
        value = getattr(model_args, name)
        AUXILIARY_CHECKS[kind](value, resolve_model_path(value), f"--{name}", tokenizer, model_path)
    return CheckedRun(folder, resume, accepted, record, publish, data_dir, dev, test, model_path, tokenizer,
                      train_dataset, columns)


def training_layout(padding_free: Optional[bool], training_args) -> tuple:
    """``(packed, why)``: ``--padding_free`` as given, else packed on the CPU and padded on a GPU or under
    ``--torch_compile``. Packing saves the CPU the padding's work; on a GPU the padded step is faster at the papers'
    lengths (its kernels are few and large: docs/training.md), and a compiled step would recompile the packed
    attention for every batch layout, so --torch_compile always pads."""
    if training_args.torch_compile:
        if padding_free:
            logger.info("--padding_free is off under --torch_compile: the packed attention would recompile for every "
                        "batch layout")
        return False, "--torch_compile pads: a packed layout would recompile every batch"
    if padding_free is not None:
        return padding_free, f"--padding_free {str(padding_free).lower()}"
    if training_args.device.type == "cuda":
        return False, "the default on a GPU, where the padded step is faster"
    return True, "the default on the CPU"


def build_trainer(recipe: ContrastiveRecipe, run: CheckedRun, model_args, data_args, training_args, extra_args=None):
    """Stage 2: the training model on the checked backbone, its collator and the method's Trainer."""
    set_seed(training_args.seed)
    model = recipe.build_model(run.model_path, model_args)
    model.tokenizer = run.tokenizer
    if model.config.matryoshka_dims and model.inference_head_layers() is None:
        raise DataError(f"--matryoshka_dims: {type(model).__name__}'s inference vectors (this config's) are not a "
                        "Linear chain over the pooler, so their first coordinates cannot be trained as they are used; "
                        "choose an inference representation without whitening")
    collator = recipe.collator(run.tokenizer, model, data_args, extra_args)
    packed = getattr(collator, "padding_free", False)  # (a backbone that cannot pack was logged by the collator)
    logger.info("training step: %s, %s batches (%s)%s", "compiled (--torch_compile)" if training_args.torch_compile
                else "eager", "packed" if packed else "padded", getattr(data_args, "layout_reason", "--padding_free"),
                f", lengths padded to a multiple of {data_args.pad_to_multiple_of}"
                if data_args.pad_to_multiple_of and not packed else "")
    if hasattr(collator, "draws"):  # its random draws derive from the run's seed (randomness.py)
        collator.draws.seed = training_args.data_seed if training_args.data_seed is not None else training_args.seed
    collator.text_ids = training_args.duplicate_negatives == "mask"
    trainer = recipe.trainer_class(model=model, args=training_args, train_dataset=run.train_dataset,
                                   data_collator=collator, processing_class=run.tokenizer, sts_evaluator=run.dev)
    trainer.setup_record = run.record
    return trainer


def score_run(trainer, run: CheckedRun, model_args, training_args, batch: dict) -> tuple:
    """Stage 4b, on the main process: ``(eval_results record, printed table)`` of the trained model on the STS test
    sets beside its base model (``(None, None)`` without ``--do_test_eval``)."""
    if run.test is None:
        return None, None
    model, test = trainer.model, run.test
    encode = encoded_once(lambda sentences: model.eval().encode(sentences, batch_size=128))
    with encoding_label(f"Encoding the trained model ({training_args.output_dir}) for the STS test sets"):
        scores = test.evaluate(encode)
    base = base_model_scores(model_args.model_name_or_path, run.model_path, test,
                             base_representation(run.model_path, model.config))
    record = {"model": training_args.output_dir, "base_model": hub_id_of(model_args.model_name_or_path),
              "pooler": model.config.pooler_type, "sts": scores[test.aggregation],
              "sts_aggregations": scores, "protocol": protocol_record(model.config.pooler_type, test),
              "training_curve": training_curve(trainer.state.log_history), "batch": batch, **base}
    if model.config.matryoshka_dims:  # the same vectors' first d coordinates, at every trained size
        record["matryoshka_sts"] = {str(size): scores for size, scores in scores_at_sizes(
            test, encode, sorted(model.config.matryoshka_dims, reverse=True)).items()}
    table = format_sts_table({training_args.output_dir: record["sts"],
                              f"{model_args.model_name_or_path} (base)": base["base_sts"]},
                             title="STS test (Spearman x100)")
    return record, table


def commit_run(folder: RunFolder, main: bool, save: Callable[[Path], None], score: Callable[[], tuple],
               arguments: dict, card: dict, keep_checkpoints: bool) -> Optional[dict]:
    """Stage 4, the end every recipe shares (Trainer-based and CLSR): ``save`` writes the trained model into the run's
    staging folder (on every process: a sharded state is gathered, one process writes); on the main process the
    run's argument groups (``training_args.json``) join it and it is committed into the output folder at once
    (``config.json`` last, [`csekit.atomic.commit_files`][csekit.atomic.commit_files]): the folder is a loadable model
    from here on, and a
    line says where. Then ``score`` gives ``(record, table)``, [`finish_run`][csekit.trainers.runner.finish_run] adds
    scores and card, the
    checkpoints go unless kept, and a last line names the folder and its card. A kill anywhere leaves the checkpoints,
    from which ``--resume_from_checkpoint last`` trains no further step and ends here again; an interrupted scoring
    says how to score the committed model ([`scoring`][csekit.trainers.runner.scoring]). Returns the record (``None``
    off the main process)."""
    with folder.keeping_trained_model(main):
        save(folder.staging)
        if not main:
            return None
        write_arguments(folder.staging, **arguments)
        commit_files(folder.staging, folder.folder)
    where = folder.folder.resolve()
    logger.info("the trained model is in %s (it loads from there now; its scores and card follow)", where)
    with scoring(where):
        record, table = score()
        if record is not None:
            finish_run(where, record, table, card=card)
    if not keep_checkpoints:
        removed = folder.remove_checkpoints()
        if removed:
            logger.info("removed %s from %s (--keep_checkpoints true keeps them)", ", ".join(removed), where)
    card_file = where / "README.md"
    print(f"The model is in {where}" + (f"; its card: {card_file}" if card_file.is_file() else
                                        f" (no card without test scores: `csekit evaluate {where} --output "
                                        f"{where / RESULTS_FILE}`, then `csekit card {where}`)"))
    return record


def run_recipe(recipe: ContrastiveRecipe, model_args, data_args, training_args, extra_args=None) -> dict:
    """Train with STS-B dev model selection, save the best model + tokenizer, score the 7 STS test sets: the stages
    [`check_run`][csekit.trainers.runner.check_run] (before any work),
    [`build_trainer`][csekit.trainers.runner.build_trainer], the Trainer's training,
    [`commit_run`][csekit.trainers.runner.commit_run], and with
    ``--push_to_hub --hub_model_id NAME`` the publication of the scored folder as ``csekit push`` does it.

    Returns:
        the test results ``{"STS12": ..., "avg": ...}`` (empty if ``do_test_eval`` is off).
    """
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    run = check_run(recipe, model_args, data_args, training_args, extra_args)
    trainer = build_trainer(recipe, run, model_args, data_args, training_args, extra_args)
    batch = batch_record(trainer, run.columns)
    logger.info(describe_batch(batch))
    main = trainer.is_world_process_zero()
    arguments = dict(model_args=model_args, data_args=data_args, training_args=training_args,
                     **({"extra_args": extra_args} if extra_args else {}),
                     **({"resume": {"checkpoint": run.resume, "accepted_changes": run.accepted}} if run.accepted
                        else {}))
    run.folder.acquire(lock=main)
    try:
        trainer.train(resume_from_checkpoint=run.resume)
        require_finite_weights(trainer.model, "the final model")
        record = commit_run(run.folder, main, lambda staging: trainer.save_model(str(staging)),
                            lambda: score_run(trainer, run, model_args, training_args, batch), arguments,
                            dict(repo_id=training_args.hub_model_id, data_dir=run.data_dir),
                            training_args.keep_checkpoints)
    finally:
        run.folder.release()
    if not main:
        return {}
    if run.publish:
        print(f"pushed to {training_args.hub_model_id}: {trainer.push_to_hub()}")
    return (record or {}).get("sts") or {}


def main_guard(main: Callable, argv: Optional[list] = None) -> None:
    """Run a recipe's ``main`` as ``python recipes/X.py`` / ``accelerate launch`` do, in the commands' error boundary
    ([`csekit.errors.report_errors`][csekit.errors.report_errors]): bad input ends with one line on stderr and exit
    status 2."""
    def run() -> int:
        main(argv)
        return 0

    code = report_errors(run)
    if code:
        sys.exit(code)


__all__ = ["CheckedRun", "ContrastiveRecipe", "batch_record", "build_trainer", "check_lengths", "check_run",
           "commit_run", "describe_batch", "finish_run", "main_guard", "run_recipe", "score_run", "training_curve"]
