"""Embedding-space geometry: alignment and uniformity (Wang & Isola 2020) and IsoScore (Rudman et al. 2022).

* alignment ``E ||f(x) - f(y)||²`` over positive pairs = STS-B train pairs scored 5.0;
* uniformity ``log E exp(-2 ||f(x) - f(y)||²)`` over all pairs of distinct sentences of the STS-B train pairs;
  both on L2-normalised embeddings (as Wang & Isola and SimCSE), lower is better;
* IsoScore (0 = one dimension used, 1 = isotropic) of the WikiText-2 sentences (>= 10 characters), as the
  extraction paper computes it.

    results = GeometryEvaluator(data_dir)(embed)   # {"alignment": .., "uniformity": .., "isoscore": ..}
"""

from typing import Callable, Optional

import numpy as np

from ..data import read_reference_corpus, resolve_data_file
from .sts import load_sts_task

ISOSCORE_CORPUS = "wiki/wikitext-2-raw/wiki.test.raw"


def _unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def alignment(x: np.ndarray, y: np.ndarray) -> float:
    """Mean squared L2 distance between L2-normalised positive pairs ``(n, d)`` x ``(n, d)``."""
    return float((np.linalg.norm(_unit(x) - _unit(y), axis=1) ** 2).mean())


def uniformity(x: np.ndarray, t: float = 2.0, chunk: int = 2048) -> float:
    """``log mean_{i<j} exp(-t ||x_i - x_j||²)`` over L2-normalised rows, computed in row chunks (no n² matrix)."""
    x = _unit(np.asarray(x, dtype=np.float64))
    n = len(x)
    if n < 2:
        raise ValueError("uniformity needs at least two vectors")
    total = 0.0
    for start in range(0, n, chunk):
        block = x[start : start + chunk]
        squared = np.maximum(2.0 - 2.0 * block @ x.T, 0.0)  # unit vectors: ||a - b||² = 2 - 2 a.b
        upper = np.arange(n)[None, :] > np.arange(start, start + len(block))[:, None]
        total += np.exp(-t * squared)[upper].sum()
    return float(np.log(total / (n * (n - 1) / 2)))


def isoscore(x: np.ndarray) -> float:
    """IsoScore (Rudman et al. 2022, Algorithm 1) of points ``(n, d)``.

    PCA-reorient the points, take the variance of each principal direction, scale that vector to norm ``sqrt(d)``,
    measure its distance ``delta`` to the all-ones vector (isotropy), and map it to ``[0, 1]``.
    """
    x = np.asarray(x, dtype=np.float64)
    dimension = x.shape[1]
    from sklearn.decomposition import PCA  # here: a model card's figure imports this module and needs no sklearn

    variances = PCA(n_components=min(x.shape), svd_solver="full").fit_transform(x).var(axis=0)
    variances = np.pad(variances, (0, dimension - len(variances)))
    normalized = np.sqrt(dimension) * variances / np.linalg.norm(variances)
    delta = np.linalg.norm(normalized - 1) / np.sqrt(2 * (dimension - np.sqrt(dimension)))
    phi = (dimension - delta**2 * (dimension - np.sqrt(dimension))) ** 2 / dimension**2
    return float((dimension * phi - 1) / (dimension - 1))


class GeometryEvaluator:
    """Alignment, uniformity (STS-B train) and IsoScore (WikiText-2 sentences); ``embed`` is called twice.

    Args:
        data_dir: the data folder.
        isoscore_sentences: texts for IsoScore; default the WikiText-2 test sentences.
    """

    def __init__(self, data_dir, isoscore_sentences: Optional[list] = None):
        pairs = load_sts_task(data_dir, "STSBenchmark", "train")
        self.sentences = list(dict.fromkeys(pairs.sentences1 + pairs.sentences2))
        index = {s: i for i, s in enumerate(self.sentences)}
        positive = pairs.scores == 5.0
        self.positive_rows = np.asarray(
            [(index[a], index[b]) for a, b, keep in zip(pairs.sentences1, pairs.sentences2, positive) if keep]
        )
        if isoscore_sentences is None:
            isoscore_sentences = read_reference_corpus(resolve_data_file(ISOSCORE_CORPUS, str(data_dir)))
        self.isoscore_sentences = isoscore_sentences

    def __call__(self, embed: Callable[[list], np.ndarray]) -> dict:
        vectors = np.asarray(embed(self.sentences), dtype=np.float64)
        rows = self.positive_rows
        return {
            "alignment": round(alignment(vectors[rows[:, 0]], vectors[rows[:, 1]]), 4),
            "uniformity": round(uniformity(vectors), 4),
            "isoscore": round(isoscore(np.asarray(embed(self.isoscore_sentences), dtype=np.float64)), 4),
        }


__all__ = ["GeometryEvaluator", "alignment", "isoscore", "uniformity"]
