"""``csekit extract``: run a training-free extraction grid end to end and write JSON + markdown.

    csekit extract --models re,all-MiniLM-L6-v2 --layers last,first_last --templates none,T4 \\
        --aggregations avg,idf-w,idf-t,no-biases,mask \\
        --postprocessing none,zscore,quantile-u,whiten^W,abtt-2+normalize \\
        --tasks sts,clustering --output outputs/extract/grid.json
"""

import time

from ..atomic import write_json, write_text
from ..data import read_reference_corpus, resolve_data_dir, resolve_data_file
from ..errors import DataError
from ..evaluation.sts import STS_TASKS
from ..evaluation.suites import SUITE_TITLES, SUITES, TRANSFER_PROTOCOLS, format_table
from ..options import add_data_dir, add_device, add_encoding, add_output, add_suite_options
from ..preflight import check_output_dir, check_output_file
from .settings import AGGREGATIONS, LAYER_PRESETS, STEP_NAMES, STS_FIT_SETS, TEMPLATES


def _list(value: str) -> list:
    return [item.strip() for item in value.split(",") if item.strip()]


def add_extract_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "extract",
        help="Training-free extraction grid: models x layers x templates x aggregations x post-processing.",
        description="Score every combination of the given extraction settings on the chosen suites (Stankevicius & "
        "Lukosevicius 2024). Token states of each (model, dataset, template, layers) are computed once and reused "
        "by every aggregation x post-processing cell. Comma-separated lists everywhere.",
    )
    parser.add_argument(
        "--models", default="all-MiniLM-L6-v2",
        help="Model specs: a csekit/HF model folder, all-MiniLM-L6-v2, 'random-bert' (bert-base-uncased architecture, "
        "seeded random weights), 're' (random N(0,0.1^2) 768-d token embeddings, bert-base-uncased tokenizer), "
        "'avg:MODEL' (token states averaged over the --avg-corpus contexts), 'MODEL+avg:W' (sentence embeddings "
        "(1-W)*MODEL + W*avg:MODEL, W may be negative).",
    )
    parser.add_argument(
        "--layers", default="last",
        help=f"Layer specs: {', '.join(LAYER_PRESETS)} or '+'-joined indices, e.g. 0+1+2+last (-1 static token "
        "embeddings, 0 embedding output, i block i; write --layers=-1+last when a spec starts with '-'). "
        "Ignored by 're'.",
    )
    parser.add_argument(
        "--templates", default="none",
        help=f"Prompt templates: none, {', '.join(TEMPLATES)} (paper Table 1), or a custom text with one [X] and "
        "any [MASK] slots.",
    )
    parser.add_argument(
        "--aggregations", default="avg",
        help=f"Token aggregations: {', '.join(AGGREGATIONS)}. avg: mean over the text's tokens ([CLS]/[SEP] "
        "excluded, paper eq. 3); idf-w: idf of the reference corpus; idf-t: idf of the target dataset; no-biases: "
        "drop the 33 most frequent (reference corpus), punctuation and subword tokens; mask: mean of the template's "
        "[MASK] states (skipped for template none). With a template, its words and [MASK] are weighted like any "
        "token: 1 under avg; under idf-t / idf-w their idf in the task's raw sentences / the reference corpus (idf "
        "tables are never counted on templated texts; a token absent from the corpus, as [MASK] always is, gets the "
        "unseen-token idf log N); no-biases drops them when frequent, punctuation or subword ([MASK] is kept).",
    )
    parser.add_argument(
        "--average-special-tokens", action="store_true",
        help="Also average the tokenizer's [CLS]/[SEP] (<s>/</s>) states, as SimCSE's avg pooler and "
        "sentence-transformers' mean pooling do. Changes only avg (idf gives them 0, no-biases drops them).",
    )
    parser.add_argument(
        "--postprocessing", default="none",
        help=f"Post-processing chains: none or steps {', '.join(STEP_NAMES)} joined by '+' (applied left to "
        "right); a step ending in ^W is fitted on the reference corpus instead of the target dataset.",
    )
    parser.add_argument("--tasks", default="sts", help=f"Comma-separated suites: {', '.join(SUITES)}.")
    parser.add_argument(
        "--sts-tasks", default=None, help=f"STS tasks to score (default all: {', '.join(STS_TASKS)}), for quick runs."
    )
    parser.add_argument(
        "--sts-fit-set", choices=STS_FIT_SETS, default="test",
        help="What target-fitted post-processing and idf-t learn from on STS: test (default; both sentences of every "
        "test pair, duplicates kept: what reproduces the paper's tables) or all-splits (STS-B and SICK-R: every "
        "train, dev and test pair, as SentEval's prepare receives them). Scoring is always on test.",
    )
    parser.add_argument(
        "--reference", default=None,
        help="Reference corpus for idf-w, biases and ^W fitting (default: wiki/wikitext-2-raw/wiki.test.raw in the "
        "data folder; .raw files are split into sentences, other files are one sentence per line).",
    )
    parser.add_argument(
        "--avg-corpus", default=None,
        help="Comma-separated corpora whose contexts the avg: models average (default: WikiText-2 test + the first "
        "11,914 wiki1m sentences).",
    )
    parser.add_argument(
        "--cache-dir", default=None,
        help="Also keep token states on disk here, reused across runs: safetensors files keyed by the model's weights, "
        "tokenizer, texts, template, layers and (avg:) averaging corpus; an invalid file is rebuilt.",
    )
    parser.add_argument("--no-cache", action="store_true", help="Re-encode for every cell (for timing the cache).")
    add_encoding(parser, batch_size=64)
    add_device(parser, "Transformers run (token states are cached on the CPU)")
    parser.add_argument("--seed", type=int, default=42, help="Seed of the random models (re, random-bert).")
    add_suite_options(parser, TRANSFER_PROTOCOLS)
    add_data_dir(parser)
    add_output(parser, "all rows (and markdown next to it as .md)")
    parser.set_defaults(handler=run_extract)


def _row_name(row: dict) -> str:
    return " / ".join(str(row[key]) for key in ("model", "layers", "template", "aggregation", "postprocessing"))


def format_grid(rows: list) -> str:
    """One markdown table per suite, one line per cell."""
    tables = []
    for suite in SUITES:
        table = {_row_name(row): row[suite] for row in rows if suite in row}
        if table:
            title = f"{SUITE_TITLES[suite]}; rows: model / layers / template / aggregation / post-processing"
            tables.append(format_table(table, title, digits=4 if suite == "geometry" else 2))
    return "\n\n".join(tables)


def run_extract(args) -> int:
    from ..loading import resolve_device
    from .extractor import Extractor, HiddenStateCache, load_reference
    from .grid import evaluation_units, run_grid

    models = [spec.split(":")[-1].split("+")[0] for spec in _list(args.models)]  # the folders of the specs
    output = check_output_file(args.output, inputs=models) if args.output else None  # before any work
    if args.cache_dir and not args.no_cache:
        check_output_dir(args.cache_dir, "--cache-dir")
    resolve_device(args.device)  # a bad --device fails before any data is read
    data_dir = resolve_data_dir(args.data_dir)
    suites = _list(args.tasks)
    units = evaluation_units(
        suites, data_dir, args.transfer_max_train, args.clustering_max_examples, args.clustering_runs,
        _list(args.sts_tasks) if args.sts_tasks else None, args.transfer_protocol, sts_fit_set=args.sts_fit_set,
        transfer_jobs=args.transfer_jobs,
    )
    avg_corpus = None
    if args.avg_corpus:
        paths = [resolve_data_file(path, data_dir) for path in _list(args.avg_corpus)]
        avg_corpus = [sentence for path in paths for sentence in read_reference_corpus(path)]
    names = ("models", "layers", "templates", "aggregations", "postprocessing")
    lists = {name: _list(getattr(args, name)) for name in names}
    empty = [name for name, values in lists.items() if not values]
    if empty:
        raise DataError(f"--{empty[0]} is empty")
    unknown = [name for name in lists["aggregations"] if name not in AGGREGATIONS]
    if unknown:
        raise DataError(f"unknown aggregation(s) {', '.join(unknown)}; choose from {', '.join(AGGREGATIONS)}")
    cache = HiddenStateCache(args.cache_dir, enabled=not args.no_cache)
    extractor = Extractor(
        load_reference(args.reference, data_dir), cache, args.max_length, args.batch_size, args.average_special_tokens
    )
    start = time.perf_counter()
    rows = run_grid(
        lists["models"], lists["layers"], lists["templates"], lists["aggregations"], lists["postprocessing"], units,
        extractor, data_dir, args.seed, avg_corpus, args.device,
    )
    seconds = time.perf_counter() - start
    markdown = format_grid(rows)
    print(markdown)
    print(f"\n{len(rows)} cells, {cache.encodings} encoding pass(es), {seconds:.1f} s")
    if output:
        record = {"settings": {k: v for k, v in vars(args).items() if k != "handler"}, "rows": rows,
                  "encodings": cache.encodings, "seconds": round(seconds, 1)}
        write_json(output, record)
        write_text(output.with_suffix(".md"), markdown + "\n")
    return 0


__all__ = ["add_extract_parser", "format_grid", "run_extract"]
