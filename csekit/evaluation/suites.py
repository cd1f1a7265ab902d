"""The non-STS evaluation suites of ``csekit evaluate`` (transfer, clustering, geometry) and their markdown tables.

Each suite adds one object to the JSON record: ``"transfer": {task: accuracy, "avg": mean of SimCSE's 7}``,
``"clustering": {dataset: accuracy, "avg"}``, ``"geometry": {"alignment", "uniformity", "isoscore"}``.
"""

from typing import Callable, Optional, Sequence

import numpy as np

from .protocol import TRANSFER_PROTOCOLS

SUITE_TITLES = {
    "sts": "STS (Spearman x100, SentEval 'all')",
    "transfer": "Transfer (logistic regression accuracy x100; SICK-R / STS-B: Pearson x100; avg: MR..MRPC)",
    "clustering": "Clustering (k-means accuracy x100, Hungarian, mean of runs)",
    "geometry": "Geometry (alignment/uniformity on STS-B train: lower is better; IsoScore on WikiText-2: 0..1)",
}
SUITES = tuple(SUITE_TITLES)  # what --tasks takes, in csekit evaluate and csekit extract


def evaluate_suites(
    suites: Sequence[str],
    data_dir,
    embed: Callable[[list], np.ndarray],
    transfer_max_train: Optional[int] = None,
    clustering_max_examples: Optional[int] = None,
    clustering_runs: int = 10,
    transfer_protocol: str = "senteval",
    transfer_jobs: int = 1,
    device=None,
    protocol: Optional[dict] = None,
) -> dict:
    """``{suite: results}`` for the transfer / clustering / geometry suites named in ``suites`` (others ignored).

    ``transfer_protocol``: ``senteval``, ``simcse`` or ``fast`` (see
    [`csekit.evaluation.transfer`][csekit.evaluation.transfer]);
    ``transfer_jobs``: folds fitted in parallel in its C search; ``device``: where the ``simcse`` classifier trains.
    ``protocol``: a protocol record ([`csekit.evaluation.protocol`][csekit.evaluation.protocol]) that gets the transfer
    suite's fingerprint."""
    # each suite's module (and the scikit-learn parts it needs) loads when the suite runs, not with the suite names
    from .clustering import ClusteringEvaluator
    from .geometry import GeometryEvaluator
    from .transfer import TransferEvaluator

    record = {}
    if "transfer" in suites:
        evaluator = TransferEvaluator(data_dir, max_train=transfer_max_train, protocol=transfer_protocol,
                                      n_jobs=transfer_jobs, device=device)
        record["transfer"] = evaluator(embed)
        if protocol is not None:
            protocol["transfer"] = evaluator.fingerprint()
    if "clustering" in suites:
        evaluator = ClusteringEvaluator(data_dir, max_examples=clustering_max_examples, runs=clustering_runs)
        record["clustering"] = evaluator(embed)
    if "geometry" in suites:
        record["geometry"] = GeometryEvaluator(data_dir)(embed)
    return record


def format_table(rows: dict, title: Optional[str] = None, digits: int = 2) -> str:
    """Markdown table of ``{row_name: {column: value}}``; columns in first-seen order, ``avg`` last."""
    columns = list(dict.fromkeys(column for row in rows.values() for column in row if column != "avg"))
    if any("avg" in row for row in rows.values()):
        columns.append("avg")
    lines = [] if title is None else [title, ""]
    lines.append("| | " + " | ".join(columns) + " |")
    lines.append("|---|" + "---:|" * len(columns))
    for name, row in rows.items():
        cells = [f"{row[c]:.{digits}f}" if isinstance(row.get(c), (int, float)) else "" for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["SUITE_TITLES", "TRANSFER_PROTOCOLS", "evaluate_suites", "format_table"]
