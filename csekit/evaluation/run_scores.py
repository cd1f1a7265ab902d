"""The test record of a trained model: its STS test scores beside the scores of the model its training started from.

[`score_run`][csekit.evaluation.run_scores.score_run] is the scoring stage of a recipe run
([`csekit.recipe_run`][csekit.recipe_run]); the base model's scores come from the score cache when an earlier run
scored the same revision under the same protocol.
"""

import logging
from typing import Callable, Optional

from ..loading import hub_id_of
from ..modeling.encoding import encoding_label
from ..preflight import is_csekit_model
from ..st_folder import is_st_folder
from .encoders import load_embedder
from .protocol import protocol_record
from .score_cache import ScoreCache, key_of
from .sts import DEV_TASKS, STSEvaluator, format_sts_table, sts_row_problem

logger = logging.getLogger(__name__)


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
    [`encoded_once`][csekit.evaluation.run_scores.encoded_once] ``encode`` to
    encode the sentences once for all sizes."""
    return {size: test.evaluate(lambda sentences, size=size: encode(sentences)[:, :size])[test.aggregation]
            for size in sizes}


def base_representation(path, config) -> dict:
    """How the card's base-model row scores the model training started from: a csekit or sentence-transformers
    folder with its own representation (``{}``), a bare encoder with the trained model's (``config``'s pooler and
    layers, less the trained head: ``cls`` reads the [CLS] state, ``cls_before_pooler``, never BERT's
    ``pooler_output``), so both rows differ by training alone. ``path``: the base model's resolved folder."""
    if is_st_folder(path) or is_csekit_model(path):
        return {}
    pooler = "cls_before_pooler" if config.pooler_type == "cls" else config.pooler_type
    return {"pooler": pooler, **({"pooling_layers": list(config.pooling_layers)} if pooler == "layers" else {})}


def base_scores_valid(test: STSEvaluator, pooler: Optional[str] = None):
    """The check of a cached base-model entry: a row of ``test``'s tasks as the evaluator returns one (each a finite
    Spearman x100, their average the mean: [`sts_row_problem`][csekit.evaluation.sts.sts_row_problem]), and the
    pooler it was scored with: ``pooler`` where the lookup names the representation, else a pooler name."""
    def check(scores: dict) -> bool:
        name = scores.get("base_pooler")
        return (sts_row_problem(scores.get("base_sts"), test.tasks) is None and isinstance(name, str)
                and (pooler is None or name == pooler))

    return check


def base_model_scores(name_or_path: str, path, test: STSEvaluator, representation: dict) -> dict:
    """``{"base_sts", "base_pooler"}``: the STS test scores of the model training started from, scored with
    ``representation`` ([`base_representation`][csekit.evaluation.run_scores.base_representation]), for the card's row
    beside the trained model's (``path``: its resolved folder). Kept in the score cache
    ([ScoreCache][csekit.evaluation.score_cache.ScoreCache]) under the model's revision, the protocol and the
    representation, so a second run from the same base does not score it again; an entry is used only when its inputs
    and scores check out."""
    cache = ScoreCache()
    inputs = cache.inputs(path, test, **representation)
    cached = cache.get(inputs, base_scores_valid(test, representation.get("pooler")))
    if cached is not None:
        logger.info("%s: its STS test scores come from the score cache (%s)", name_or_path,
                    cache.path(key_of(inputs)))
        return cached
    embed, info = load_embedder(name_or_path, batch_size=128, **representation)
    with encoding_label(f"Encoding {name_or_path} (base model) for the STS test sets"):
        scores = {"base_sts": test.evaluate(embed)[test.aggregation], "base_pooler": info["pooler"]}
    cache.put(inputs, scores)
    return scores


def score_run(trainer, test: Optional[STSEvaluator], base_model: str, base_path: str, batch: dict) -> tuple:
    """The scoring stage, on the main process: ``(eval_results record, printed table)`` of ``trainer``'s trained model
    on ``test``'s STS test sets beside ``base_model`` (the model training started from, resolved to ``base_path``),
    with the batch the run learned from (``batch_record``); ``(None, None)`` without a ``test``."""
    if test is None:
        return None, None
    model, name = trainer.model, trainer.args.output_dir
    encode = encoded_once(lambda sentences: model.eval().encode(sentences, batch_size=128))
    with encoding_label(f"Encoding the trained model ({name}) for the STS test sets"):
        scores = test.evaluate(encode)
    base = base_model_scores(base_model, base_path, test, base_representation(base_path, model.config))
    record = {"model": name, "base_model": hub_id_of(base_model),
              "pooler": model.config.pooler_type, "sts": scores[test.aggregation],
              "sts_aggregations": scores, "protocol": protocol_record(model.config.pooler_type, test),
              "training_curve": training_curve(trainer.state.log_history), "batch": batch, **base}
    if model.config.matryoshka_dims:  # the same vectors' first d coordinates, at every trained size
        record["matryoshka_sts"] = {str(size): scores for size, scores in scores_at_sizes(
            test, encode, sorted(model.config.matryoshka_dims, reverse=True)).items()}
    table = format_sts_table({name: record["sts"], f"{base_model} (base)": base["base_sts"]},
                             title="STS test (Spearman x100)")
    return record, table


__all__ = ["base_model_scores", "base_representation", "base_scores_valid", "encoded_once", "score_run",
           "scores_at_sizes", "training_curve"]
