"""Wall time of an extraction grid with and without the hidden-state cache, measured in one process.

The grid is ``aggregations x post-processings`` on one model and dataset set; with the cache the token states of
each (model, dataset, template, layers) are computed once, without it once per cell. The two runs are interleaved
(cached, uncached, cached, ...) so machine load affects both alike, and their scores are checked to be identical.

    python benchmarks/extraction_cache.py --model all-MiniLM-L6-v2 --tasks STSBenchmark,SICKRelatedness --repeats 2
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from csekit.data import resolve_data_dir
from csekit.evaluation.sts import STSEvaluator
from csekit.extraction.extractor import ExtractionSetting, Extractor, HiddenStateCache, load_reference, load_source
from csekit.extraction.postprocessing import parse_postprocessing


def run_grid_once(source, reference, evaluators, aggregations, postprocessings, use_cache: bool, batch_size: int):
    cache = HiddenStateCache(enabled=use_cache)
    extractor = Extractor(reference, cache, batch_size=batch_size)
    start = time.perf_counter()
    scores = {}
    for task, evaluator in evaluators.items():
        for aggregation in aggregations:
            for spec in postprocessings:
                setting = ExtractionSetting("last", "none", aggregation, parse_postprocessing(spec))
                scores[(task, aggregation, spec)] = evaluator(extractor.embedder(source, setting))[task]
        cache.release(keep_fingerprints=[extractor.reference_fingerprint])
    return time.perf_counter() - start, cache.encodings, scores


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="Model spec (see csekit extract --help).")
    parser.add_argument("--tasks", default="STSBenchmark,SICKRelatedness", help="STS test tasks (comma-separated).")
    parser.add_argument("--aggregations", default="avg,idf-w,idf-t,no-biases", help="Aggregations of the grid.")
    parser.add_argument(
        "--postprocessing", default="none,zscore,whiten,abtt-2+normalize", help="Post-processing chains."
    )
    parser.add_argument("--repeats", type=int, default=2, help="Interleaved (cached, uncached) pairs.")
    parser.add_argument("--batch-size", type=int, default=64, help="Texts per forward pass.")
    parser.add_argument("--output", default=None, help="Write the timings as JSON here.")
    args = parser.parse_args()
    data_dir = resolve_data_dir()
    source = load_source(args.model, data_dir)
    reference = load_reference(None, data_dir)
    tasks = args.tasks.split(",")
    evaluators = {task: STSEvaluator(data_dir, [task]) for task in tasks}
    aggregations, postprocessings = args.aggregations.split(","), args.postprocessing.split(",")
    cells = len(tasks) * len(aggregations) * len(postprocessings)
    timings = {"cached": [], "uncached": []}
    encodings, reference_scores = {}, None
    for _ in range(args.repeats):
        for mode in ("cached", "uncached"):
            seconds, encodings[mode], scores = run_grid_once(
                source, reference, evaluators, aggregations, postprocessings, mode == "cached", args.batch_size
            )
            timings[mode].append(seconds)
            if reference_scores is None:
                reference_scores = scores
            assert scores == reference_scores, "cached and uncached grids disagree"
    record = {
        "model": args.model, "tasks": tasks, "cells": cells, "encoding_passes": encodings,
        "seconds": {mode: [round(s, 1) for s in values] for mode, values in timings.items()},
        "median_seconds": {mode: round(float(np.median(values)), 1) for mode, values in timings.items()},
    }
    record["speedup"] = round(record["median_seconds"]["uncached"] / record["median_seconds"]["cached"], 2)
    print(json.dumps(record, indent=2))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
