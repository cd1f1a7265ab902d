"""``csekit evaluate``: score any sentence encoder on the STS, transfer, clustering and geometry suites.

    csekit evaluate MODEL --tasks sts [--pooler P] [--batch-size N] [--max-length L] [--device D]
                          [--data-dir DIR] [--output results.json]
    csekit evaluate MODEL --tasks transfer,clustering [--transfer-protocol senteval|fast] [--transfer-jobs N]
"""

from ..atomic import write_json
from ..data import resolve_data_dir
from ..errors import DataError
from ..modeling.pooling import POOLER_TYPES
from ..options import add_data_dir, add_device, add_encoding, add_output, add_suite_options
from ..preflight import check_output_file
from .sts import STS_TASKS, STSEvaluator, format_sts_table
from .suites import SUITES
from .transfer import PROTOCOLS as TRANSFER_PROTOCOLS


def add_evaluate_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="Score a model on evaluation suites (STS: SentEval 'all' protocol, Spearman x100).",
        description="Score a sentence encoder. MODEL is a csekit model folder, any Hugging Face encoder folder "
        "(sentence-transformers folders included), 'all-MiniLM-L6-v2', or a Hub id (downloaded through the Hugging "
        "Face cache; HF_HUB_OFFLINE=1 uses the cache only).",
    )
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument("--tasks", default="sts", help=f"Comma-separated suites: {', '.join(SUITES)}.")
    parser.add_argument(
        "--pooler",
        default=None,
        help=f"{', '.join(POOLER_TYPES)} (cls: the encoder's pooler output; layers: the model's pooling_layers). "
        "Default: the csekit model's own, the sentence-transformers pooling of an ST folder, else cls (as SimCSE's "
        "evaluation.py).",
    )
    add_encoding(parser, batch_size=128)
    add_device(parser)
    add_data_dir(parser)
    add_output(parser, "the results")
    add_suite_options(parser, TRANSFER_PROTOCOLS)
    parser.set_defaults(handler=run_evaluate)


def run_evaluate(args) -> int:
    from ..loading import resolve_device
    from .encoders import load_embedder
    from .suites import SUITE_TITLES, evaluate_suites, format_table

    suites = [suite.strip() for suite in args.tasks.split(",") if suite.strip()]
    unknown = [suite for suite in suites if suite not in SUITES]
    if unknown or not suites:
        raise DataError(f"unknown task suite(s) {', '.join(unknown) or '(none)'}; choose from "
                        f"{', '.join(SUITES)}")
    resolve_device(args.device)  # a bad --device fails before any data is read
    output = check_output_file(args.output) if args.output else None  # a bad --output fails before any work
    data_dir = resolve_data_dir(args.data_dir)
    evaluator = STSEvaluator(data_dir, STS_TASKS, split="test") if "sts" in suites else None
    embed, info = load_embedder(args.model, args.pooler, args.max_length, args.batch_size, args.device)
    record = dict(info)
    if evaluator is not None:
        record["sts"] = evaluator(embed)
        print(format_sts_table({args.model: record["sts"]}, title="STS (Spearman x100, SentEval 'all')"))
    record.update(
        evaluate_suites(
            suites, data_dir, embed, args.transfer_max_train, args.clustering_max_examples, args.clustering_runs,
            args.transfer_protocol, args.transfer_jobs,
        )
    )
    for suite in ("transfer", "clustering", "geometry"):
        if suite in record:
            digits = 4 if suite == "geometry" else 2
            print("\n" + format_table({args.model: record[suite]}, SUITE_TITLES[suite], digits))
    if output:
        write_json(output, record)
    return 0


__all__ = ["add_evaluate_parser", "run_evaluate"]
