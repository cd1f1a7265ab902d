"""The alignment/uniformity figure of a model card (Wang & Isola, 2020), drawn from one evaluation run.

Alignment and uniformity use the definitions (and the STS-B train sentences and positive pairs) of
`csekit.evaluation.geometry`, so the numbers on the figure equal ``csekit evaluate --tasks geometry``.

    numbers = alignment_uniformity_figure(embed, data_dir, "model/alignment_uniformity.png")
    # {"alignment": .., "uniformity": .., "sentences": .., "positive_pairs": ..}

By default the figure is drawn on a seeded sample of ``MAX_SENTENCES`` sentences (half of them the two sides of
sampled positive pairs), so a card takes seconds, not minutes; ``max_sentences=None`` uses all of STS-B train, and
then the numbers equal ``csekit evaluate --tasks geometry``.
"""

import io
from typing import Callable, Optional

import numpy as np

from ..atomic import write_bytes

FIGURE_FILE = "alignment_uniformity.png"
CURVE_FILE = "training_curve.png"
SAMPLED_PAIRS = 20000
MAX_SENTENCES = 1000


def write_png(figure, path) -> None:
    """``figure`` as a PNG at ``path``, written atomically."""
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=110)
    write_bytes(path, png.getvalue())


def sample_rows(sentences: list, positive_rows: np.ndarray, max_sentences: Optional[int], seed: int) -> tuple:
    """``(sentence indices, positive rows re-indexed to them)``: at most ``max_sentences`` sentences, up to half of
    them from seeded positive pairs and the rest seeded random sentences."""
    if max_sentences is None or len(sentences) <= max_sentences:
        return np.arange(len(sentences)), positive_rows
    generator = np.random.default_rng(seed)
    pairs = positive_rows[generator.permutation(len(positive_rows))[: max_sentences // 4]]
    chosen = list(dict.fromkeys(pairs.ravel().tolist()))
    taken = set(chosen)
    for index in generator.permutation(len(sentences)):
        if len(chosen) >= max_sentences:
            break
        if int(index) not in taken:
            chosen.append(int(index))
            taken.add(int(index))
    position = {index: row for row, index in enumerate(chosen)}
    return np.asarray(chosen), np.asarray([[position[a], position[b]] for a, b in pairs.tolist()])


def alignment_uniformity_figure(embed: Callable[[list], np.ndarray], data_dir, path, seed: int = 0,
                                max_sentences: Optional[int] = MAX_SENTENCES) -> dict:
    """Encode STS-B train sentences (a sample, see the module docstring), write a two-panel PNG to ``path`` and
    return its numbers.

    Left: squared distances of the positive pairs (their mean is the alignment). Right: squared distances of
    ``SAMPLED_PAIRS`` random pairs of distinct sentences (a seeded sample; uniformity itself uses all pairs).

    Args:
        embed: ``list[str] -> (n, d)`` array.
        data_dir: the data folder.
        path: where the PNG goes (written atomically).
    Returns:
        ``{"alignment", "uniformity"}`` rounded to 4 digits as in `GeometryEvaluator`, with the
        ``"sentences"`` and ``"positive_pairs"`` they were computed on.
    """
    from matplotlib.figure import Figure  # here: the card's text needs no matplotlib; no pyplot: nothing global

    from ..evaluation.geometry import GeometryEvaluator, alignment, uniformity

    evaluator = GeometryEvaluator(data_dir, isoscore_sentences=[])  # IsoScore is not drawn: skip its corpus
    chosen, rows = sample_rows(evaluator.sentences, evaluator.positive_rows, max_sentences, seed)
    vectors = np.asarray(embed([evaluator.sentences[i] for i in chosen]), dtype=np.float64)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    numbers = {
        "alignment": round(alignment(vectors[rows[:, 0]], vectors[rows[:, 1]]), 4),
        "uniformity": round(uniformity(vectors), 4),
        "sentences": len(chosen), "positive_pairs": len(rows), "sampled": len(chosen) < len(evaluator.sentences),
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
    write_png(figure, path)
    return numbers


def training_curve_figure(curve: list, path) -> None:
    """Training loss and dev STS (Spearman x100) per logged step, from ``eval_results.json`` ``training_curve``
    (``[{"step", "loss"?, "dev"?}, ...]``), as a PNG written to ``path``: one panel per quantity that was logged
    (a run without dev evaluation gets the loss panel alone, never an empty one)."""
    from matplotlib.figure import Figure

    panels = []
    for key, title, color in (("loss", "training loss", "#4c72b0"), ("dev", "dev STS (Spearman x100)", "#55a868")):
        points = [(entry["step"], entry[key]) for entry in curve if entry.get(key) is not None]
        if points:
            panels.append((key, title, color, points))
    if not panels:
        raise ValueError("training_curve holds no logged loss or dev score to draw")
    figure = Figure(figsize=(4.5 * len(panels), 3.2))
    for axis, (key, title, color, points) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels):
        axis.plot(*zip(*points), marker="." if len(points) < 50 else None, color=color)
        axis.set_title(title)
        axis.set_xlabel("step")
        if key == "loss" and all(value > 0 for _, value in points):
            axis.set_yscale("log")  # a contrastive loss falls over orders of magnitude on a sentence-tuned backbone
    figure.tight_layout()
    write_png(figure, path)


__all__ = [
    "CURVE_FILE", "FIGURE_FILE", "MAX_SENTENCES", "alignment_uniformity_figure", "sample_rows", "training_curve_figure",
]
