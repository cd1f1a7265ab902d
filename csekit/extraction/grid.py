"""The extraction grid: every (model x layers x template x aggregation x post-processing) cell scored on every
dataset of the chosen suites, with one encoding pass per (model, dataset, template, layers).

    units = evaluation_units(["sts", "clustering"], data_dir)
    rows = run_grid(["re", "all-MiniLM-L6-v2"], ["last"], ["none"], ["avg", "idf-w"], ["none", "whiten"], units,
                    Extractor(load_reference(None, data_dir), HiddenStateCache()), data_dir)
"""

from typing import Optional, Sequence

import numpy as np

from ..errors import DataError
from ..evaluation.clustering import ClusteringEvaluator
from ..evaluation.geometry import GeometryEvaluator
from ..evaluation.sts import SPLIT_FILES, STS_TASKS, STSEvaluator, load_sts_task
from ..evaluation.suites import SUITES
from ..evaluation.transfer import TransferEvaluator
from .extractor import ExtractionSetting, Extractor, load_source, resolve_layers
from .postprocessing import parse_postprocessing
from .prompts import resolve_template
from .settings import STS_FIT_SETS


def sts_fit_sentences(data_dir, task: str, fit_set: str) -> Optional[list]:
    """The fit set of one STS task, or ``None`` for "the scored sentences themselves".

    ``test`` (default): both sentences of every scored test pair, duplicates kept, for every task. This is what the
    paper ran, judged by its printed numbers: with it the RE column of Tables A2-A7 (avg, zscore, quantile-u, whiten,
    idf) is reproduced to the printed digit on STS-B and SICK-R too, while fitting on train+dev+test misses STS-B by up
    to 1.4. RE, seed 42, STS-B test (test / all-splits / paper): avg + zscore 54.56 / 53.23 / 54.6, + whiten 68.09 /
    69.15 / 68.1, + quantile-u 52.39 / 51.86 / 52.4; SICK-R + whiten 53.31 / 53.45 / 53.3 (benchmarks/RESULTS.md).
    ``all-splits``: for STS-B and SICK-R, the sentences of every train, dev and test pair (what SentEval's
    ``prepare`` receives for these tasks, and what the issue asked for); STS12-16 have only a test split either way.
    """
    if fit_set not in STS_FIT_SETS:
        raise DataError(f"unknown STS fit set {fit_set!r}; choose from {', '.join(STS_FIT_SETS)}")
    if fit_set == "test" or task not in SPLIT_FILES:
        return None
    return [s for split in ("train", "dev", "test") for pairs in [load_sts_task(data_dir, task, split)]
            for s in pairs.sentences1 + pairs.sentences2]


def evaluation_units(suites: Sequence[str], data_dir, transfer_max_train=None, clustering_max_examples=None,
                     clustering_runs: int = 10, sts_tasks: Optional[Sequence[str]] = None,
                     transfer_protocol: str = "senteval", sts_fit_set: str = "test", transfer_jobs: int = 1) -> list:
    """``(suite, name, score(embed))`` per dataset: each unit embeds one dataset, so target-fitted post-processing and
    idf^T see exactly that dataset's texts (one STS task, one transfer task, one clustering dataset); for STS the
    fit set is chosen by ``sts_fit_set`` (`sts_fit_sentences`)."""
    unknown = [suite for suite in suites if suite not in SUITES]
    if unknown or not suites:
        raise DataError(f"unknown task suite(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SUITES)}")
    units = []
    for suite in suites:
        if suite == "sts":
            unknown_tasks = [task for task in sts_tasks or () if task not in STS_TASKS]
            if unknown_tasks:
                raise DataError(f"unknown STS task(s) {', '.join(unknown_tasks)}; choose from {', '.join(STS_TASKS)}")
            for task in sts_tasks or STS_TASKS:
                evaluator = STSEvaluator(data_dir, [task])
                fit = sts_fit_sentences(data_dir, task, sts_fit_set)

                def score(embed, e=evaluator, t=task, fit=fit):
                    return e(embed if fit is None else lambda texts: embed(texts, fit))[t]

                units.append((suite, task, score))
        elif suite == "transfer":
            evaluator = TransferEvaluator(data_dir, max_train=transfer_max_train, protocol=transfer_protocol,
                                          n_jobs=transfer_jobs)
            units += [(suite, n, lambda embed, e=evaluator, n=n: e.evaluate_task(n, embed)) for n in evaluator.tasks]
        elif suite == "clustering":
            evaluator = ClusteringEvaluator(data_dir, max_examples=clustering_max_examples, runs=clustering_runs)
            units += [
                (suite, n, lambda embed, e=evaluator, n=n: e.evaluate_dataset(n, embed)) for n in evaluator.datasets
            ]
        else:
            units.append((suite, "geometry", GeometryEvaluator(data_dir)))
    return units


def run_grid(
    models: Sequence[str], layers: Sequence[str], templates: Sequence[str], aggregations: Sequence[str],
    postprocessings: Sequence[str], units: list, extractor: Extractor, data_dir, seed: int = 42, avg_corpus=None,
    device: Optional[str] = None,
) -> list:
    """Score every cell; returns one row per cell: ``{"model", "layers", "template", "aggregation",
    "postprocessing", <suite>: {dataset: score, "avg": mean}}`` (geometry: its metrics).

    Loop order keeps one dataset's token states in memory at a time: model, template, layers, dataset, then the
    aggregation x post-processing cells, which all reuse the cached states.
    """
    chains = [parse_postprocessing(spec) for spec in postprocessings]
    for template in templates:
        resolve_template(template)
    rows, averaged_sources = [], {}
    for model in models:
        source = load_source(model, data_dir, avg_corpus, seed, averaged_sources, device)
        for template in templates:
            # the [MASK] representation exists only inside a template
            cell_aggregations = [a for a in aggregations if a != "mask" or resolve_template(template) is not None]
            for layer_spec in layers if source.uses_layers else ["-"]:
                settings = {}
                for aggregation in cell_aggregations:
                    for chain in chains:
                        setting = ExtractionSetting(layer_spec, template, aggregation, chain)
                        setting.validate()
                        if source.uses_layers:
                            resolve_layers(layer_spec, source.num_hidden_layers)
                        settings[(aggregation, str(chain))] = setting
                cells = {key: {"model": model, "layers": layer_spec, "template": template, "aggregation": key[0],
                               "postprocessing": key[1]} for key in settings}
                for suite, name, score in units:
                    for key, setting in settings.items():
                        value = score(extractor.embedder(source, setting))
                        if suite == "geometry":
                            cells[key]["geometry"] = value
                        else:
                            cells[key].setdefault(suite, {})[name] = value
                    extractor.cache.release(keep_fingerprints=[extractor.reference_fingerprint])
                for cell in cells.values():
                    for suite, scores in cell.items():
                        if suite in ("sts", "transfer", "clustering"):
                            scores["avg"] = round(float(np.mean(list(scores.values()))), 2)
                rows += list(cells.values())
    return rows


__all__ = ["STS_FIT_SETS", "evaluation_units", "run_grid", "sts_fit_sentences"]
