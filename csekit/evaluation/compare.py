"""``csekit compare``: results side by side, with a warning wherever two of them were not measured the same way.

    csekit compare outputs/simcse outputs/whitenedcse results.json [--tasks sts,transfer,mteb]

Each argument is a model folder (its ``eval_results.json``) or a JSON file written by ``csekit evaluate --output``.
The first result is the reference: for every other one whose protocol record
([`csekit.evaluation.protocol`][csekit.evaluation.protocol])
differs from it, one warning line on stderr names the fields that differ (the STS aggregation, the pooler, a task's
pair count or data hash, the transfer protocol, a library version), or says that a result has no record.
"""

import json
import sys
from pathlib import Path

from ..errors import DataError
from .protocol import protocol_differences
from .sts import STS_TASKS, format_sts_table

COMPARED = ("sts", "transfer", "clustering", "mteb")


def read_result(name: str) -> dict:
    path = Path(name)
    if path.is_dir():
        path = path / "eval_results.json"
    if not path.is_file():
        raise DataError(f"{name}: no such results file (a model folder with eval_results.json, or the JSON of "
                        "`csekit evaluate --output`)")
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not valid JSON ({type(error).__name__})") from None
    if not isinstance(record, dict) or not any(isinstance(record.get(part), dict) for part in COMPARED):
        raise DataError(f"{path}: not a csekit results record (no {', '.join(COMPARED)} scores); give a model folder "
                        "with eval_results.json or the JSON of `csekit evaluate --output`")
    return record


def add_compare_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "compare", help="Put results side by side; warn where they were measured differently.",
        description="Print the results of several models side by side (model folders with eval_results.json, or "
        "`csekit evaluate --output` files). The first is the reference: a result whose protocol record differs "
        "from it (STS aggregation, pooler, pair counts or data hashes, transfer protocol, library versions) gets a "
        "warning line on stderr naming the differences.",
    )
    parser.add_argument("results", metavar="RESULT", nargs="+")
    parser.add_argument("--tasks", default=",".join(COMPARED),
                        help=f"Comma-separated parts to show: {', '.join(COMPARED)} (those present).")
    parser.set_defaults(handler=run_compare)


def run_compare(args) -> int:
    from .suites import format_table

    parts = [part.strip() for part in args.tasks.split(",") if part.strip()]
    unknown = [part for part in parts if part not in COMPARED]
    if unknown:
        raise DataError(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(COMPARED)}")
    records = {name: read_result(name) for name in args.results}
    reference_name, reference = next(iter(records.items()))
    for name, record in list(records.items())[1:]:
        differences = protocol_differences(reference.get("protocol"), record.get("protocol"))
        if differences:
            print(f"csekit: warning: {name} and {reference_name} were not measured the same way: "
                  f"{'; '.join(differences)}", file=sys.stderr)
    tables = []
    if "sts" in parts:
        rows = {name: record["sts"] for name, record in records.items()
                if all(task in record.get("sts", {}) for task in STS_TASKS)}
        if rows:
            tables.append(format_sts_table(rows, title="STS (Spearman x100)"))
    for part in ("transfer", "clustering", "mteb"):
        rows = {name: record[part] for name, record in records.items() if part in parts and part in record}
        if rows:
            tables.append(format_table(rows, title=part))
    print("\n\n".join(tables) if tables else "no shared results to show")
    return 0


__all__ = ["add_compare_parser", "read_result", "run_compare"]
