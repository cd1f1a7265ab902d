"""``csekit evaluate``: score any sentence encoder on the STS, transfer, clustering and geometry suites.

    csekit evaluate MODEL --tasks sts [--pooler P] [--batch-size N] [--max-length L] [--device D]
                          [--data-dir DIR] [--output results.json]
    csekit evaluate MODEL --tasks transfer,clustering [--transfer-protocol senteval|fast] [--transfer-jobs N]
"""

from ..atomic import output_file, write_json
from ..data import DATA_DIR_HELP, resolve_data_dir
from ..errors import DataError
from .sts import STS_TASKS, STSEvaluator, format_sts_table
from .transfer import PROTOCOLS as TRANSFER_PROTOCOLS

EVALUATION_SUITES = ("sts", "transfer", "clustering", "geometry")


def add_evaluate_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="Score a model on evaluation suites (STS: SentEval 'all' protocol, Spearman x100).",
        description="Score a sentence encoder. MODEL is a csekit model folder, any Hugging Face encoder folder "
        "(sentence-transformers folders included), 'all-MiniLM-L6-v2', or a Hub id (downloaded through the Hugging "
        "Face cache; HF_HUB_OFFLINE=1 uses the cache only).",
    )
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument("--tasks", default="sts", help=f"Comma-separated suites: {', '.join(EVALUATION_SUITES)}.")
    parser.add_argument(
        "--pooler",
        default=None,
        help="cls (encoder pooler output), cls_before_pooler, avg, avg_first_last, avg_top2. Default: the csekit "
        "model's own, the sentence-transformers pooling of an ST folder, else cls (as SimCSE's evaluation.py).",
    )
    parser.add_argument("--batch-size", type=int, default=128, help="Sentences per forward pass.")
    parser.add_argument(
        "--device", default="auto", help="Where the model runs: auto (a CUDA GPU when there is one, else cpu), cpu, "
        "cuda or cuda:N.",
    )
    parser.add_argument("--max-length", type=int, default=None, help="Truncation length (default: model maximum).")
    parser.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    parser.add_argument("--output", default=None, help="Write results as JSON here.")
    parser.add_argument(
        "--transfer-max-train", type=int, default=None,
        help="transfer: cap training examples per task (seeded stratified subsample; whole task for CV tasks).",
    )
    parser.add_argument(
        "--transfer-protocol", choices=TRANSFER_PROTOCOLS, default="senteval",
        help="transfer: 'senteval' = SentEval's scikit-learn protocol (raw features; C by inner 10-fold CV, 10-fold "
        "CV on train or the dev split; 11 tasks with SICK-R and STS-B); 'fast' = the earlier StandardScaler + C=1 "
        "shortcut on 9 tasks (quick runs; z-scoring is a no-op there).",
    )
    parser.add_argument(
        "--transfer-jobs", type=int, default=1, help="transfer: cross-validation folds fitted in parallel (joblib)."
    )
    parser.add_argument(
        "--clustering-max-examples", type=int, default=None,
        help="clustering: cap texts per dataset (seeded subsample).",
    )
    parser.add_argument("--clustering-runs", type=int, default=10,
                        help="clustering: k-means runs averaged per dataset.")
    parser.set_defaults(handler=run_evaluate)


def run_evaluate(args) -> int:
    from ..loading import resolve_device
    from .encoders import load_embedder
    from .suites import SUITE_TITLES, evaluate_suites, format_table

    suites = [suite.strip() for suite in args.tasks.split(",") if suite.strip()]
    unknown = [suite for suite in suites if suite not in EVALUATION_SUITES]
    if unknown or not suites:
        raise DataError(f"unknown task suite(s) {', '.join(unknown) or '(none)'}; choose from "
                        f"{', '.join(EVALUATION_SUITES)}")
    if args.batch_size < 1:
        raise DataError(f"--batch-size must be >= 1, got {args.batch_size}")
    for flag in ("transfer_max_train", "transfer_jobs", "clustering_max_examples", "clustering_runs"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise DataError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    resolve_device(args.device)  # a bad --device fails before any data is read
    if args.max_length is not None and args.max_length < 1:  # 0 would silently mean the model maximum
        raise DataError(f"--max-length must be >= 1, got {args.max_length}")
    output = output_file(args.output) if args.output else None  # a bad --output fails before any work
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


__all__ = ["EVALUATION_SUITES", "add_evaluate_parser", "run_evaluate"]
