"""``csekit evaluate``: score any sentence encoder on the STS, transfer, clustering and geometry suites.

    csekit evaluate MODEL --tasks sts [--pooler P] [--batch-size N] [--max-length L] [--device D]
                          [--data-dir DIR] [--output results.json]
    csekit evaluate MODEL --tasks transfer,clustering [--transfer-protocol senteval|simcse|fast] [--transfer-jobs N]
    csekit evaluate MODEL --mteb STSBenchmark.v2 STS12 [--output r.json]   # the mteb package, mteb's data
"""

import json
from pathlib import Path
from typing import Optional

from ..atomic import write_json
from ..data import resolve_data_dir
from ..errors import DataError
from ..modeling.pooler_types import POOLER_TYPES
from ..options import add_data_dir, add_device, add_encoding, add_output, add_suite_options, positive_int
from ..preflight import check_output_file
from .protocol import protocol_record
from .sts import AGGREGATIONS, STS_TASKS, STSEvaluator, format_sts_table
from .suites import SUITES, TRANSFER_PROTOCOLS


def add_evaluate_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="Score a model on evaluation suites (STS: SentEval 'all' protocol, Spearman x100).",
        description="Score a sentence encoder. MODEL is a csekit model folder, any Hugging Face encoder folder "
        "(sentence-transformers folders included), 'all-MiniLM-L6-v2', or a Hub id (downloaded through the Hugging "
        "Face cache; HF_HUB_OFFLINE=1 uses the cache only).",
    )
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument("--tasks", default=None,
                        help=f"Comma-separated suites: {', '.join(SUITES)} (default: sts, none with --mteb).")
    parser.add_argument("--mteb", nargs="+", metavar="TASK", default=None,
                        help="MTEB tasks run by the mteb package (pip install 'csekit[mteb]'), e.g. STSBenchmark.v2 "
                        "STS12; task data through the Hugging Face datasets cache (HF_HUB_OFFLINE=1: cached only), "
                        "read before any other suite runs.")
    parser.add_argument("--mteb-prompts", metavar="FILE", default=None,
                        help="A JSON object of instructions for --mteb, keyed as mteb keys a model's prompts: a task "
                        "name, a task type, query / document, or <task or type>-<query|document> (mteb picks the most "
                        "specific). Each replaces the model's default prompt where it applies. Default: the prompts "
                        "of the folder's config_sentence_transformers.json that mteb reads.")
    parser.add_argument("--mteb-results", metavar="DIR", default=None,
                        help="Where mteb's results files go, laid out as mteb's results repository "
                        "(DIR/results/<model>/<revision>/<task>.json + model_meta.json). Default: the folder of "
                        "--output.")
    parser.add_argument(
        "--pooler",
        default=None,
        help=f"{', '.join(POOLER_TYPES)} (cls: the encoder's pooler output; layers: the model's pooling_layers). "
        "Default: the csekit model's own, the sentence-transformers pooling of an ST folder, else cls (as SimCSE's "
        "evaluation.py).",
    )
    add_encoding(parser, batch_size=128)
    parser.add_argument("--backend", choices=("torch", "onnx"), default="torch",
                        help="onnx: MODEL is a folder written by `csekit export-onnx`, scored through onnxruntime "
                        "as it is served (pip install 'csekit[onnx]').")
    parser.add_argument("--truncate-dim", type=positive_int, default=None, metavar="D",
                        help="Score the first D coordinates of every vector (a Matryoshka size, see the model's "
                        "matryoshka_dims); default: all of them.")
    add_device(parser)
    add_data_dir(parser)
    add_output(parser, "the results")
    parser.add_argument("--sts-aggregation", choices=AGGREGATIONS, default="all",
                        help="STS12-16 in the table and as 'sts' in the JSON: 'all' (SimCSE's, over the concatenated "
                        "sub-datasets), 'mean' or 'wmean' (SentEval's per-sub-dataset means); the JSON keeps all "
                        "three under 'sts_aggregations'.")
    add_suite_options(parser, TRANSFER_PROTOCOLS)
    parser.set_defaults(handler=run_evaluate)


def requested_suites(args) -> list:
    """The suites of ``--tasks`` (default ``sts``, or none with ``--mteb`` alone); an unknown one is a
    [`DataError`][csekit.evaluation.cli.DataError] naming the choices."""
    tasks = args.tasks if args.tasks is not None else ("" if args.mteb else "sts")
    suites = [suite.strip() for suite in tasks.split(",") if suite.strip()]
    unknown = [suite for suite in suites if suite not in SUITES]
    if unknown or not (suites or args.mteb):
        raise DataError(f"unknown task suite(s) {', '.join(unknown) or '(none)'}; choose from "
                        f"{', '.join(SUITES)}")
    return suites


def score_sts(args, evaluator: STSEvaluator, embed, record: dict) -> None:
    """The STS scores under every SentEval aggregation into ``record``, and their table (the chosen one first)."""
    record["sts_aggregations"] = evaluator.evaluate(embed)
    record["sts"] = record["sts_aggregations"][args.sts_aggregation]
    rows = {f"{args.model} ({aggregation})" if aggregation != args.sts_aggregation else args.model: scores
            for aggregation, scores in sorted(record["sts_aggregations"].items(),
                                              key=lambda item: item[0] != args.sts_aggregation)}
    print(format_sts_table(rows, title=f"STS (Spearman x100, SentEval '{args.sts_aggregation}'; the other "
                                       "aggregations below it)"))


def score_suites(args, suites: list, data_dir, embed, device, protocol: dict, record: dict) -> None:
    """Transfer, clustering and geometry into ``record``, and a table for each."""
    from .suites import SUITE_TITLES, evaluate_suites, format_table

    record.update(evaluate_suites(
        suites, data_dir, embed, args.transfer_max_train, args.clustering_max_examples, args.clustering_runs,
        args.transfer_protocol, args.transfer_jobs, device=device, protocol=protocol,
    ))
    for suite in ("transfer", "clustering", "geometry"):
        if suite in record:
            digits = 4 if suite == "geometry" else 2
            print("\n" + format_table({args.model: record[suite]}, SUITE_TITLES[suite], digits))


def score_mteb(args, embed, mteb_tasks, protocol: dict, record: dict) -> None:
    """The MTEB tasks through the mteb package into ``record``, and their table."""
    from ..loading import resolve_model_path
    from .mteb_suite import evaluate_mteb, model_meta, mteb_prompts, write_mteb_results
    from .suites import format_table

    path = resolve_model_path(args.model, any_pipeline=True)
    meta = model_meta(args.model, path)
    prompts = args.mteb_prompts if args.mteb_prompts is not None else mteb_prompts(path)  # (given: checked)
    record["mteb"], protocol["mteb"], result = evaluate_mteb(embed, meta, mteb_tasks, prompts)
    print("\n" + format_table({args.model: record["mteb"]}, f"MTEB {protocol['mteb']['version']} (main score x100, "
                               "mteb's task names and datasets)"))
    folder = args.mteb_results or (str(Path(args.output).parent) if args.output else None)
    if folder is None:
        print("mteb's results files were not written: give --output FILE or --mteb-results DIR")
    else:
        files = write_mteb_results(result, meta, folder)
        protocol["mteb"]["results_files"] = [str(Path(path).relative_to(folder)) for path in files]
        print(f"mteb's results files: {files[0].parent} (model_meta.json and {len(files)} task file(s))")


# what `csekit evaluate` adds to a model folder's own record: the suites' scores, and their protocol entries
SUITE_KEYS = ("sts", "sts_aggregations", "transfer", "clustering", "geometry", "mteb")


def folder_record_target(args) -> Optional[Path]:
    """The model folder's own ``eval_results.json`` when this evaluation adds to it: ``--output`` names it, or
    ``--mteb`` without ``--output`` on a csekit folder that has one. Those scores must describe the folder's model as
    it is served, so a pooler, length, size or backend of the command's choosing is refused there in one line."""
    from ..loading import RESULTS_FILE

    folder = Path(args.model).expanduser()
    own = folder / RESULTS_FILE
    if args.output:
        if not folder.is_dir() or Path(args.output).expanduser().resolve() != own.resolve():
            return None
    elif not (args.mteb and folder.is_dir() and own.is_file()):
        return None
    aggregation = args.sts_aggregation if args.sts_aggregation != "all" and "sts" in requested_suites(args) else None
    changed = [flag for flag, value in (("--pooler", args.pooler), ("--max-length", args.max_length),
                                        ("--truncate-dim", args.truncate_dim),
                                        ("--sts-aggregation", aggregation)) if value is not None]
    changed += ["--backend onnx"] if args.backend != "torch" else []
    if changed:
        raise DataError(f"{own}: the folder's record holds its model's own scores, and {', '.join(changed)} scores "
                        "something else; write these results to another --output")
    return own


def add_to_folder_record(path: Path, record: dict) -> dict:
    """``record``'s suites merged into the record at ``path`` (written atomically): the suites scored now replace
    their namesakes, with their protocol entries; the rest (training curve, batch, base scores, figure numbers) is
    kept as it was."""
    from ..loading import LOCAL_PATHS
    from ..publishing.model_card import read_json

    merged = read_json(path) if path.is_file() else {}
    kept_mteb = merged.get("mteb") if isinstance(merged.get("mteb"), dict) else {}
    merged.update({key: record[key] for key in SUITE_KEYS if key in record})
    protocol = merged.setdefault("protocol", {})
    kept_protocol = protocol.get("mteb") if isinstance(protocol.get("mteb"), dict) else {}
    protocol.update({key: value for key, value in record.get("protocol", {}).items()
                     if key in SUITE_KEYS or key not in protocol})
    if "mteb" in record:  # another --mteb run adds its tasks to the earlier ones (a task scored again is replaced)
        merged["mteb"] = {**kept_mteb, **record["mteb"]}
        files = [*kept_protocol.get("results_files", []), *protocol["mteb"].get("results_files", [])]
        tasks = {**kept_protocol.get("tasks", {}), **protocol["mteb"].get("tasks", {})}
        protocol["mteb"] = {**kept_protocol, **protocol["mteb"], "tasks": tasks,
                            **({"results_files": list(dict.fromkeys(files))} if files else {})}
    for key in ("model", "pooler"):
        merged.setdefault(key, record.get(key))
    kept_paths = merged.get(LOCAL_PATHS) if isinstance(merged.get(LOCAL_PATHS), list) else []
    merged[LOCAL_PATHS] = sorted({*map(str, kept_paths), *record.get(LOCAL_PATHS, [])})
    write_json(path, merged)
    return merged


def run_evaluate(args) -> int:
    """``csekit evaluate``: every input checked before any work (suites, device, output file, MTEB task names, data),
    then the model loaded once and scored suite by suite; the record is written (atomically) at the end."""
    from ..loading import LOCAL_PATHS, local_paths, resolve_device
    from .encoders import load_embedder
    from .mteb_suite import load_mteb_tasks

    suites = requested_suites(args)
    if args.mteb_results and not args.mteb:
        raise DataError("--mteb-results says where mteb's results files go: it needs --mteb TASK [TASK ...]")
    if args.mteb_prompts and not args.mteb:
        raise DataError("--mteb-prompts gives instructions for MTEB tasks: it needs --mteb TASK [TASK ...]")
    if args.mteb_prompts:  # read and checked by mteb's rules before any work
        from .mteb_suite import mteb_prompts

        try:
            given = json.loads(Path(args.mteb_prompts).read_text(encoding="utf-8"))
        except OSError as error:
            raise DataError(f"--mteb-prompts {args.mteb_prompts}: cannot read it ({error.strerror})") from None
        except ValueError as error:
            raise DataError(f"--mteb-prompts {args.mteb_prompts}: not valid JSON ({error})") from None
        args.mteb_prompts = mteb_prompts(None, given)
    device = resolve_device(args.device)  # a bad --device fails before any data is read
    into_folder = folder_record_target(args)
    if into_folder is not None:
        args.output = str(into_folder)
    output = check_output_file(args.output, inputs=[args.model]) if args.output else None  # before any work
    mteb_tasks = load_mteb_tasks(args.mteb) if args.mteb else None  # an unknown task name fails before any work
    data_dir = resolve_data_dir(args.data_dir) if suites else None
    evaluator = (STSEvaluator(data_dir, STS_TASKS, split="test", aggregation=args.sts_aggregation)
                 if "sts" in suites else None)
    embed, info = load_embedder(args.model, args.pooler, args.max_length, args.batch_size, args.device,
                                args.truncate_dim, args.backend)
    record = dict(info)
    protocol = protocol_record(info.get("pooler"), evaluator)
    if evaluator is not None:
        score_sts(args, evaluator, embed, record)
    score_suites(args, suites, data_dir, embed, device, protocol, record)
    record["protocol"] = protocol
    if args.mteb:
        score_mteb(args, embed, mteb_tasks, protocol, record)
    record[LOCAL_PATHS] = local_paths(record)  # shown by base name in a card and an upload
    if into_folder is not None:
        add_to_folder_record(into_folder, record)
        print(f"added to {into_folder}: {', '.join(key for key in SUITE_KEYS if key in record)}")
        if (into_folder.parent / "README.md").is_file():  # the card shows the record: it follows
            from ..publishing.model_card import write_model_card

            print(f"card updated: {write_model_card(into_folder.parent, figure='never')}")
    elif output:
        write_json(output, record)
    return 0


__all__ = ["add_evaluate_parser", "run_evaluate"]
