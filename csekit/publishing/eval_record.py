"""What an ``eval_results.json`` may hold before a card, a model-index or an upload is built from it.

The record is csekit's own file, but it sits in a folder anyone can edit: every field the card prints or the
metadata carries is checked here for the shape csekit writes (``csekit.recipe_run``, ``csekit evaluate``), and a
field that is not is refused in one line naming it. A score is a finite number in [-100, 100]; an STS row holds the
seven SentEval tasks and their average, which must be the mean of the seven as csekit rounds it; a count is a
non-negative integer; the base model is a Hub id.

    # None, or "'sts' avg 90.0 is not the mean of its tasks (71.43)"
    problem = record_problem(record)
"""

import math
from typing import Callable, Optional

from ..evaluation.sts import AGGREGATIONS, DEV_TASKS, STS_TASKS, is_score, sts_row_problem
from ..loading import HUB_ID


def is_count(value) -> bool:
    return type(value) is int and value >= 0


def is_number(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def mapping_of(check: Callable, keys: Optional[Callable] = None, what: str = "entries") -> Callable:
    """A check of a mapping whose every value passes ``check`` (a predicate, or a problem function returning a
    string) and, with ``keys``, whose every key passes ``keys``."""
    def problem(value) -> Optional[str]:
        if not isinstance(value, dict):
            return f"is not a mapping of {what}"
        for key, item in value.items():
            if keys is not None and not keys(key):
                return f"{key!r} is not a name csekit writes there"
            found = check(item)
            if found is False or isinstance(found, str):
                return f"{key}: " + (found if isinstance(found, str) else f"{item!r} is not valid there")
        return None
    return problem


def predicate(check: Callable, what: str) -> Callable:
    return lambda value: None if check(value) else f"{value!r} is not {what}"


def curve_problem(value) -> Optional[str]:
    if not isinstance(value, list) or not all(isinstance(point, dict) for point in value):
        return "is not a list of logged steps"
    for point in value:
        if not is_count(point.get("step")) or not all(is_number(item) for key, item in point.items()
                                                      if key not in ("step", "epoch") and item is not None):
            return f"{point!r} is not a logged step (a step number and finite values)"
    return None


def protocol_problem(value) -> Optional[str]:
    if not isinstance(value, dict):
        return "is not a mapping"
    sts = value.get("sts")
    if sts is not None:
        if not isinstance(sts, dict) or sts.get("aggregation") not in AGGREGATIONS or not isinstance(
                sts.get("split"), str):
            return "sts: not an aggregation and a split"
        problem = mapping_of(lambda entry: isinstance(entry, dict) and is_count(entry.get("pairs"))
                             and isinstance(entry.get("sha256"), str), lambda key: key in STS_TASKS)(sts.get("tasks"))
        if problem:
            return f"sts tasks: {problem}"
    versions = value.get("versions")
    if versions is not None and (not isinstance(versions, dict) or not all(
            isinstance(item, str) for item in (*versions, *versions.values()))):
        return "versions: not a mapping of library names to versions"
    return None


def hub_id(value) -> bool:
    return value is None or (isinstance(value, str) and HUB_ID.fullmatch(value) is not None)


def text(value) -> bool:
    return isinstance(value, str)


# every field a card, a model-index or the MTEB metadata reads, and its check
FIELDS = {
    "sts": sts_row_problem,
    "base_sts": sts_row_problem,
    "sts_aggregations": mapping_of(sts_row_problem, lambda key: key in AGGREGATIONS, "aggregations to STS rows"),
    "matryoshka_sts": mapping_of(sts_row_problem, lambda key: str(key).isdigit() and int(key) > 0,
                                 "sizes to STS rows"),
    "mteb": mapping_of(is_score, text, "task names to scores"),
    "contaminated": mapping_of(is_count, lambda key: key in STS_TASKS or key in {f"{task}-dev" for task in DEV_TASKS},
                               "STS sets to pair counts"),
    "geometry": mapping_of(is_number, text, "names to numbers"),
    "batch": mapping_of(lambda item: item is None or type(item) in (int, str, bool), text, "settings"),
    "figure": mapping_of(lambda item: type(item) in (int, float, bool) and (type(item) is bool or math.isfinite(item)),
                         text, "figure numbers"),
    "training_curve": curve_problem,
    "protocol": protocol_problem,
    "wall_seconds": predicate(lambda value: is_number(value) and value >= 0, "a duration in seconds"),
    "pooler": predicate(text, "a pooler name"),
    "base_pooler": predicate(text, "a pooler name"),
    "base_model": predicate(hub_id, "a Hub id (a local model is recorded as null)"),
}


def record_problem(record: dict) -> Optional[str]:
    """Why ``record`` is not an ``eval_results.json`` csekit writes (the first field that is not, named), or
    ``None``. ``sts`` is required; every other field is checked when present."""
    if "sts" not in record:
        return "'sts' is missing"
    for name, check in FIELDS.items():
        if name in record and (name == "sts" or record[name] is not None):
            problem = check(record[name])
            if problem:
                return f"'{name}' {problem}"
    for suite in ("transfer", "clustering"):
        average = record.get(suite, {}).get("avg") if isinstance(record.get(suite), dict) else None
        if suite in record and (not isinstance(record[suite], dict) or (average is not None and not is_score(
                average))):
            return f"'{suite}' is not a mapping with a score as its 'avg'"
    return None


__all__ = ["FIELDS", "record_problem"]
