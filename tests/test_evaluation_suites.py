"""Transfer, clustering and geometry suites: metrics against direct formulas, data loading, CLI wiring."""

import json

import numpy as np
import pytest

from csekit.cli import main
from csekit.evaluation.clustering import ClusteringEvaluator, cluster_accuracy_runs, clustering_accuracy, load_clustering_dataset
from csekit.errors import DataError
from csekit.evaluation.geometry import alignment, isoscore, uniformity
from csekit.evaluation.transfer import TransferTask, load_transfer_task, restrict_task, score_task


def test_hungarian_accuracy_hand_example():
    labels = ["a", "a", "b", "b", "c", "c"]
    clusters = [1, 1, 0, 0, 0, 2]  # best map: 1->a, 0->b, 2->c: 5 of 6 right
    assert clustering_accuracy(labels, clusters) == pytest.approx(5 / 6)
    assert clustering_accuracy(labels, [2, 2, 0, 0, 1, 1]) == 1.0  # permuted ids are a perfect clustering


def test_kmeans_separates_blobs():
    rng = np.random.default_rng(0)
    centres = np.eye(3) * 20
    vectors = np.concatenate([centre + rng.normal(size=(30, 3)) for centre in centres])
    labels = np.repeat(["x", "y", "z"], 30)
    assert cluster_accuracy_runs(vectors, labels, runs=3) == 100.0


def test_clustering_data_and_subsample(data_dir):
    texts, labels = load_clustering_dataset(data_dir / "clustering", "agnews")
    assert len(texts) == 8000 and len(set(labels)) == 4
    texts, labels = load_clustering_dataset(data_dir / "clustering", "stackoverflow", max_examples=50)
    assert len(texts) == 50 and all(text and "\t" not in text for text in texts)
    with pytest.raises(DataError, match="no such file"):
        ClusteringEvaluator(data_dir, ["nope"])


def test_transfer_cross_validation_and_pairs():
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 50)
    vectors = rng.normal(size=(100, 4)) + labels[:, None] * 4
    task = TransferTask("toy", [str(i) for i in range(100)], (np.arange(100), labels))
    assert score_task(task, vectors) == 100.0
    # pairs: label 1 when both texts are identical vectors; features |u-v|, u*v separate them
    pairs = np.stack([np.arange(100), np.where(labels == 1, np.arange(100), (np.arange(100) + 1) % 100)], axis=1)
    pair_task = TransferTask("pairs", task.texts, (pairs[:80], labels[:80]), (pairs[80:], labels[80:]))
    assert score_task(pair_task, vectors) >= 90.0


def test_transfer_loading_and_restrict(data_dir):
    downstream = data_dir / "senteval" / "downstream"
    mr = load_transfer_task(downstream, "MR")
    assert len(mr.train[1]) == 10662 and set(mr.train[1]) == {0, 1}
    trec = load_transfer_task(downstream, "TREC")
    assert len(trec.train[1]) == 5452 and len(trec.test[1]) == 500 and len(set(trec.train[1])) == 6
    small = restrict_task(trec, 100)
    assert len(small.train[1]) == 100 and len(small.texts) <= 600
    assert [small.texts[i] for i in small.test[0]] == [trec.texts[i] for i in trec.test[0]]
    mrpc = load_transfer_task(downstream, "MRPC")
    assert mrpc.train[0].shape == (4076, 2) and mrpc.test[0].shape == (1725, 2)


def test_alignment_and_uniformity_match_formulas():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 5)), rng.normal(size=(40, 5))
    unit = lambda v: v / np.linalg.norm(v, axis=1, keepdims=True)  # noqa: E731
    assert alignment(x, y) == pytest.approx((np.linalg.norm(unit(x) - unit(y), axis=1) ** 2).mean())
    u = unit(x)
    squared = ((u[:, None] - u[None]) ** 2).sum(-1)[np.triu_indices(40, k=1)]
    assert uniformity(x, chunk=7) == pytest.approx(np.log(np.exp(-2 * squared).mean()))


def test_isoscore_extremes():
    rng = np.random.default_rng(0)
    assert isoscore(rng.normal(size=(20000, 8))) > 0.99
    assert isoscore(rng.normal(size=(500, 1)) @ np.ones((1, 8))) == pytest.approx(0.0, abs=1e-9)
    # k of n dimensions used equally -> (k - 1) / (n - 1): points +-e_i in 4 of 8 dimensions
    points = np.concatenate([np.eye(8)[:4], -np.eye(8)[:4]])
    assert isoscore(points) == pytest.approx(3 / 7)


def test_evaluate_cli_clustering_json(tmp_path, monkeypatch, data_dir):
    """`csekit evaluate --tasks clustering` writes the suite object into the JSON record (tiny subsample)."""
    import csekit.evaluation.encoders as encoders

    def fake_loader(name, pooler, max_length, batch_size, device):
        def embed(texts):
            return np.asarray([[len(t), t.count(" ")] for t in texts], dtype=float)

        return embed, {"model": name, "pooler": "avg"}

    monkeypatch.setattr(encoders, "load_embedder", fake_loader)
    output = tmp_path / "r.json"
    flags = ["--tasks", "clustering", "--clustering-max-examples", "40", "--clustering-runs", "2"]
    code = main(["evaluate", "fake", *flags, "--output", str(output)])
    assert code == 0
    record = json.loads(output.read_text())
    assert set(record["clustering"]) == {"agnews", "biomedical", "googlenews_TS", "searchsnippets", "stackoverflow",
                                         "tweet", "avg"}
    assert main(["evaluate", "fake", "--tasks", "clustering", "--clustering-runs", "0"]) == 2
