"""Short-text clustering (Stankevičius & Lukoševičius 2024, Section 3.5.1; data of SCCL / Rakib et al.).

Each dataset (``clustering/<name>.tsv``, ``label<TAB>text``) is embedded once, clustered with k-means
(k = number of labels, scikit-learn, k-means++ init) under 10 seeds, and scored by clustering accuracy: the best
one-to-one mapping of clusters to labels (Hungarian algorithm, ``scipy.optimize.linear_sum_assignment``), averaged
over the runs, x100. ``max_examples`` takes a seeded random subsample of a dataset for quick runs.

Each run is ``KMeans(n_clusters=k, n_init=10, random_state=seed)``, seeds 0..9: the paper's code base
(amazon-science/sentence-representations ``DownstreamEval/clustering/clustering_eval.py`` L46, L62-64) leaves
``n_init`` at scikit-learn's default, which was 10 (best inertia of 10 k-means++ starts) until scikit-learn 1.4
made it 1 for k-means++; the paper ran that code in May 2023 (scikit-learn 1.2/1.3).

    evaluator = ClusteringEvaluator(data_dir, ["agnews", "tweet"])
    results = evaluator(embed)      # {"agnews": 61.2, "tweet": 48.0, "avg": 54.6}
"""

from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from tqdm.auto import tqdm

from ..errors import DataError

CLUSTERING_DATASETS = ("agnews", "biomedical", "googlenews_TS", "searchsnippets", "stackoverflow", "tweet")
CLUSTERING_RUNS = 10
KMEANS_INITS = 10  # scikit-learn's n_init default before 1.4, as the paper's code ran it


def clustering_accuracy(labels: Sequence, clusters: Sequence) -> float:
    """Fraction of texts whose cluster maps to their label under the best one-to-one cluster->label assignment."""
    labels = np.unique(np.asarray(labels), return_inverse=True)[1]
    clusters = np.unique(np.asarray(clusters), return_inverse=True)[1]
    if len(labels) != len(clusters):
        raise ValueError(f"{len(labels)} labels but {len(clusters)} cluster ids")
    size = max(labels.max(), clusters.max()) + 1
    counts = np.zeros((size, size), dtype=np.int64)
    np.add.at(counts, (clusters, labels), 1)
    rows, columns = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, columns].sum() / len(labels))


def load_clustering_dataset(clustering_dir: Path, name: str, max_examples: Optional[int] = None, seed: int = 0):
    """``(texts, labels)`` of ``<name>.tsv``; stackoverflow's trailing TAB is ignored."""
    path = Path(clustering_dir) / f"{name}.tsv"
    if not path.is_file():
        raise DataError(f"{path}: no such file (clustering datasets: {', '.join(CLUSTERING_DATASETS)})")
    texts, labels = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.rstrip("\t").split("\t", 1)
        if len(fields) != 2 or not fields[1].strip():
            raise DataError(f"{path}:{number}: expected 'label<TAB>text'")
        labels.append(fields[0])
        texts.append(fields[1].strip())
    if max_examples is not None and len(texts) > max_examples:
        keep = np.sort(np.random.default_rng(seed).choice(len(texts), max_examples, replace=False))
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    return texts, labels


def cluster_accuracy_runs(vectors: np.ndarray, labels: Sequence, runs: int = CLUSTERING_RUNS) -> float:
    """Mean clustering accuracy x100 of ``runs`` k-means runs (seeds 0..runs-1, each the best of ``KMEANS_INITS``
    k-means++ starts), k = number of distinct labels."""
    k = len(set(labels))
    scores = [
        clustering_accuracy(labels, KMeans(n_clusters=k, n_init=KMEANS_INITS, random_state=seed).fit_predict(vectors))
        for seed in range(runs)
    ]
    return float(100 * np.mean(scores))


class ClusteringEvaluator:
    """Clustering accuracy per dataset; ``embed`` is called once per dataset with all its texts."""

    def __init__(
        self, data_dir, datasets: Sequence[str] = CLUSTERING_DATASETS, max_examples: Optional[int] = None,
        runs: int = CLUSTERING_RUNS,
    ):
        if runs < 1:
            raise DataError(f"clustering runs must be >= 1, got {runs}")
        folder = Path(data_dir) / "clustering"
        self.datasets = {name: load_clustering_dataset(folder, name, max_examples) for name in datasets}
        self.runs = runs

    def evaluate_dataset(self, name: str, embed: Callable[[list], np.ndarray]) -> float:
        texts, labels = self.datasets[name]
        vectors = np.asarray(embed(texts), dtype=np.float64)
        return round(cluster_accuracy_runs(vectors, labels, self.runs), 2)

    def __call__(self, embed: Callable[[list], np.ndarray]) -> dict:
        names = tqdm(self.datasets, desc="Clustering", leave=False)
        results = {name: self.evaluate_dataset(name, embed) for name in names}
        results["avg"] = round(float(np.mean(list(results.values()))), 2)
        return results


__all__ = ["CLUSTERING_DATASETS", "ClusteringEvaluator", "cluster_accuracy_runs", "clustering_accuracy"]
