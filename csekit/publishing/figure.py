"""The alignment/uniformity figure of a model card (Wang & Isola, 2020), drawn from one evaluation run.

Alignment and uniformity use the definitions (and the STS-B train sentences and positive pairs) of
:mod:`csekit.evaluation.geometry`, so the numbers on the figure equal ``csekit evaluate --tasks geometry``.

    numbers = alignment_uniformity_figure(embed, data_dir, "model/alignment_uniformity.png")
    # {"alignment": .., "uniformity": ..}
"""

import io
from typing import Callable

import numpy as np
from matplotlib.figure import Figure  # no pyplot: nothing global (backend, figure registry) is touched

from ..atomic import write_bytes
from ..evaluation.geometry import GeometryEvaluator, alignment, uniformity

FIGURE_FILE = "alignment_uniformity.png"
SAMPLED_PAIRS = 20000


def alignment_uniformity_figure(embed: Callable[[list], np.ndarray], data_dir, path, seed: int = 0) -> dict:
    """Encode the STS-B train sentences, write a two-panel PNG to ``path`` and return its two numbers.

    Left: squared distances of the positive pairs (their mean is the alignment). Right: squared distances of
    ``SAMPLED_PAIRS`` random pairs of distinct sentences (a seeded sample; uniformity itself uses all pairs).

    Args:
        embed: ``list[str] -> (n, d)`` array.
        data_dir: the data folder.
        path: where the PNG goes (written atomically).
    Returns:
        ``{"alignment": float, "uniformity": float}`` rounded to 4 digits, as in :class:`GeometryEvaluator`.
    """
    evaluator = GeometryEvaluator(data_dir, isoscore_sentences=[])  # IsoScore is not drawn: skip its corpus
    vectors = np.asarray(embed(evaluator.sentences), dtype=np.float64)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    rows = evaluator.positive_rows
    numbers = {
        "alignment": round(alignment(vectors[rows[:, 0]], vectors[rows[:, 1]]), 4),
        "uniformity": round(uniformity(vectors), 4),
    }
    positive = ((unit[rows[:, 0]] - unit[rows[:, 1]]) ** 2).sum(1)
    generator = np.random.default_rng(seed)
    first = generator.integers(0, len(unit), SAMPLED_PAIRS)
    second = (first + generator.integers(1, len(unit), SAMPLED_PAIRS)) % len(unit)  # never the same sentence
    random_pairs = ((unit[first] - unit[second]) ** 2).sum(1)

    figure = Figure(figsize=(9, 3.4))
    left, right = figure.subplots(1, 2)
    bins = np.linspace(0.0, 4.0, 41)  # squared distance of unit vectors lies in [0, 4]
    left.hist(positive, bins=bins, color="#4c72b0")
    left.set_title(f"positive pairs: alignment = {numbers['alignment']:.3f}")
    right.hist(random_pairs, bins=bins, color="#dd8452")
    right.set_title(f"random pairs: uniformity = {numbers['uniformity']:.3f}")
    for axis in (left, right):
        axis.set_xlabel("squared L2 distance of normalised embeddings")
    left.set_ylabel("pairs")
    figure.tight_layout()
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    write_bytes(path, png.getvalue())
    return numbers


__all__ = ["FIGURE_FILE", "alignment_uniformity_figure"]
