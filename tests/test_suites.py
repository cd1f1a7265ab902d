"""Transfer, clustering and geometry suites: metrics against direct formulas, data loading, CLI wiring."""

import json
import zlib

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from csekit.cli import main
from csekit.errors import DataError
from csekit.evaluation.clustering import (
    ClusteringEvaluator,
    cluster_accuracy_runs,
    clustering_accuracy,
    load_clustering_dataset,
)
from csekit.evaluation.geometry import alignment, isoscore, uniformity
from csekit.evaluation.transfer import (
    TransferEvaluator,
    TransferTask,
    encode_relatedness,
    load_transfer_task,
    relatedness_pearson,
    restrict_task,
    score_task,
)


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


def test_kmeans_uses_ten_initialisations_per_run():
    """25 separated blobs: one k-means++ start per seed leaves some blobs merged (mean 98.04), the paper's code base
    (scikit-learn's old default n_init=10, best inertia of 10 starts) recovers all of them under seeds 0..9."""
    rng = np.random.default_rng(0)
    centres = np.array([(i, j) for i in range(5) for j in range(5)], dtype=float) * 4
    labels = np.repeat(np.arange(25), 10)
    vectors = centres[labels] + rng.normal(scale=0.5, size=(len(labels), 2))
    assert cluster_accuracy_runs(vectors, labels, runs=10) == 100.0


def test_clustering_data_and_subsample(data_dir):
    texts, labels = load_clustering_dataset(data_dir / "clustering", "biomedical")  # no newline after the last row
    assert len(texts) == 40 and len(set(labels)) == 4
    texts, labels = load_clustering_dataset(data_dir / "clustering", "stackoverflow", max_examples=30)
    assert len(texts) == 30 and all(text and "\t" not in text for text in texts)  # its trailing TAB is dropped
    with pytest.raises(DataError, match="no such file"):
        ClusteringEvaluator(data_dir, ["nope"])


def test_transfer_cross_validation_and_pairs():
    rng = np.random.default_rng(0)
    labels = np.repeat([0, 1], 50)
    vectors = rng.normal(size=(100, 4)) + labels[:, None] * 4
    task = TransferTask("toy", [str(i) for i in range(100)], (np.arange(100), labels))
    assert score_task(task, vectors, protocol="fast") == 100.0
    # pairs: label 1 when both texts are identical vectors; features |u-v|, u*v separate them
    pairs = np.stack([np.arange(100), np.where(labels == 1, np.arange(100), (np.arange(100) + 1) % 100)], axis=1)
    pair_task = TransferTask("pairs", task.texts, (pairs[:80], labels[:80]), (pairs[80:], labels[80:]))
    assert score_task(pair_task, vectors) >= 90.0


# SentEval's sklearn protocol written out from facebookresearch/SentEval senteval/tools/validation.py (cold fits,
# no warm starts, no shared helpers): the references the transfer module must reproduce.
SENTEVAL_SPLIT_GRID = [2.0**t for t in range(-2, 4)]


def _lr(c, x, y):
    return LogisticRegression(C=c, random_state=1111, max_iter=10_000).fit(x, y)


def _senteval_inner_kfold(x, y):  # InnerKFoldClassifier.run, L57-107
    tests = []
    for train, test in StratifiedKFold(10, shuffle=True, random_state=1111).split(x, y):
        xt, yt = x[train], y[train]
        scores = []
        for c in SENTEVAL_SPLIT_GRID:
            folds = StratifiedKFold(10, shuffle=True, random_state=1111).split(xt, yt)
            scores.append(round(100 * np.mean([_lr(c, xt[a], yt[a]).score(xt[b], yt[b]) for a, b in folds]), 2))
        best = SENTEVAL_SPLIT_GRID[int(np.argmax(scores))]
        tests.append(round(100 * _lr(best, xt, yt).score(x[test], y[test]), 2))
    return round(float(np.mean(tests)), 2)


def _senteval_kfold(x, y, x_test, y_test):  # KFoldClassifier.run, L126-181
    grid = [2.0**t for t in range(-1, 6)]
    folds = list(StratifiedKFold(10, shuffle=True, random_state=1111).split(x, y))
    scores = [round(100 * np.mean([_lr(c, x[a], y[a]).score(x[b], y[b]) for a, b in folds]), 2) for c in grid]
    return round(100 * _lr(grid[int(np.argmax(scores))], x, y).score(x_test, y_test), 2)


def _senteval_split(x, y, x_dev, y_dev, x_test, y_test):  # SplitClassifier.run, L202-246
    scores = [round(100 * _lr(c, x, y).score(x_dev, y_dev), 2) for c in SENTEVAL_SPLIT_GRID]
    return round(100 * _lr(SENTEVAL_SPLIT_GRID[int(np.argmax(scores))], x, y).score(x_test, y_test), 2)


def _small_scale_problem(n, seed=0, d=8):
    """Linearly separable up to noise, features at 0.05 scale (like unit-norm embeddings): C matters a lot, C=1 is
    not the best and at C=0.25 the model predicts the majority class."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = (x @ rng.normal(size=d) + rng.normal(size=n) > 0).astype(int)
    return 0.05 * x, y


def test_senteval_protocol_no_split_is_nested_cv_on_raw_features():
    """MR/CR/SUBJ/MPQA: C from 2^-2..2^3 by inner 10-fold CV on raw features, mean of rounded outer-fold scores."""
    x, y = _small_scale_problem(80, d=4)
    task = TransferTask("toy", [str(i) for i in range(80)], (np.arange(80), y))
    reference = _senteval_inner_kfold(x, y)
    assert score_task(task, x) == reference
    # the inner search matters here: the same folds at C=1 alone give another score, scaling another again
    assert reference != score_task(task, x, protocol="fast")


def test_senteval_protocol_train_test_cross_validates_on_train():
    """TREC/MRPC: C from 2^-1..2^5 by 10-fold CV on train, refit on train, score test."""
    x, y = _small_scale_problem(260, seed=1)
    task = TransferTask("toy", [str(i) for i in range(260)], (np.arange(160), y[:160]), (np.arange(160, 260), y[160:]))
    reference = _senteval_kfold(x[:160], y[:160], x[160:], y[160:])
    assert score_task(task, x) == reference
    with parallel_config(backend="threading"):  # folds fitted in parallel (threads: no worker start-up in tests)
        assert score_task(task, x, n_jobs=2) == reference


def test_senteval_protocol_uses_the_dev_split():
    """SST-2/SST-5/SICK-E: C by dev accuracy. A dev split whose labels are flipped picks another C and so changes
    the test score; the fast protocol ignores dev."""
    x, y = _small_scale_problem(260)
    rows = np.arange(260)
    train, dev, test = (rows[:100], y[:100]), (rows[100:160], y[100:160]), (rows[160:], y[160:])
    flipped = (rows[100:160], 1 - y[100:160])
    task = TransferTask("toy", [str(i) for i in rows], train, test, dev)
    other = TransferTask("toy", task.texts, train, test, flipped)
    assert score_task(task, x) == _senteval_split(x[:100], y[:100], x[100:160], y[100:160], x[160:], y[160:])
    assert score_task(other, x) == _senteval_split(x[:100], y[:100], x[100:160], 1 - y[100:160], x[160:], y[160:])
    assert score_task(other, x) != score_task(task, x)
    assert score_task(other, x, protocol="fast") == score_task(task, x, protocol="fast")


def test_senteval_task_views(real_data_dir):
    """SentEval's samples: blank lines kept (CR 3,775, MPQA 10,606 as the paper's Table 3), dev splits, sorted by
    (tokens, label); pairs by (tokens A, tokens B, label)."""
    downstream = real_data_dir / "senteval" / "downstream"
    cr = load_transfer_task(downstream, "CR")
    assert len(cr.train[1]) == 3775 and cr.texts[cr.train[0][0]] == ""
    lengths = [len(cr.texts[row].split()) for row in cr.train[0]]
    assert lengths == sorted(lengths)
    assert len(load_transfer_task(downstream, "MPQA").train[1]) == 10606
    assert len(load_transfer_task(downstream, "SST2").dev[1]) == 872
    sick = load_transfer_task(downstream, "SICKEntailment")
    assert len(sick.dev[1]) == 500 and len(sick.test[1]) == 4927
    keys = [(len(sick.texts[a].split()), len(sick.texts[b].split()), label) for (a, b), label in zip(*sick.train)]
    assert keys == sorted(keys)
    fast = load_transfer_task(downstream, "CR", protocol="fast")
    assert len(fast.train[1]) == 3771 and fast.dev is None


def _hashed_embed(texts):
    """A deterministic stand-in encoder: 16-d hashed word counts."""
    vectors = np.zeros((len(texts), 16))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            vectors[i, zlib.crc32(word.encode()) % 16] += 1.0
    return vectors


def test_fast_protocol_keeps_its_numbers(real_data_dir):
    """--transfer-protocol fast (the scikit-learn path without SentEval's samples) on the real tasks: its scores."""
    tasks = ["CR", "MPQA", "TREC", "SICKEntailment", "SST5", "MRPC"]
    results = TransferEvaluator(real_data_dir, tasks=tasks, protocol="fast")(_hashed_embed)
    assert results == {"CR": 64.36, "MPQA": 68.77, "TREC": 48.4, "SICKEntailment": 71.32, "SST5": 27.56,
                       "MRPC": 69.28}  # no "avg": these are not SimCSE's 7 tasks


def test_relatedness_tasks_soft_labels_and_regressor(data_dir):
    """SICK-R / STS-B as 5-class classification (paper L640: 3.6 -> class 3 with 0.4, class 4 with 0.6)."""
    assert encode_relatedness(np.array([3.6]))[0].tolist() == pytest.approx([0, 0, 0.4, 0.6, 0])
    assert encode_relatedness(np.array([1.0, 5.0])).tolist() == [[1, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 6))
    scores = np.clip(3 + x[:, 0] - 0.5 * x[:, 1], 1, 5)
    assert relatedness_pearson(x[:400], scores[:400], x[400:500], scores[400:500], x[500:], scores[500:]) > 90
    downstream = data_dir / "senteval" / "downstream"
    sick = load_transfer_task(downstream, "SICKRelatedness")  # the synthetic folder's sizes
    assert [len(split[1]) for split in (sick.train, sick.dev, sick.test)] == [60, 30, 40]
    stsb = load_transfer_task(downstream, "STSBenchmark")
    assert [len(split[1]) for split in (stsb.train, stsb.dev, stsb.test)] == [80, 40, 40]


def test_transfer_loading_and_restrict(data_dir):
    downstream = data_dir / "senteval" / "downstream"
    mr = load_transfer_task(downstream, "MR")  # the synthetic folder's sizes
    assert len(mr.train[1]) == 80 and set(mr.train[1]) == {0, 1}
    trec = load_transfer_task(downstream, "TREC")  # latin-1, as the real file
    assert len(trec.train[1]) == 60 and len(trec.test[1]) == 30 and len(set(trec.train[1])) == 6
    assert any("\u00e4" in text for text in trec.texts)
    small = restrict_task(trec, 24)
    assert len(small.train[1]) == 24 and len(small.texts) <= 24 + 30
    assert [small.texts[i] for i in small.test[0]] == [trec.texts[i] for i in trec.test[0]]
    mrpc = load_transfer_task(downstream, "MRPC")  # the byte-order-marked header is skipped
    assert mrpc.train[0].shape == (40, 2) and mrpc.test[0].shape == (20, 2)


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


def test_evaluate_cli_transfer_protocols(tmp_path, monkeypatch, data_dir):
    """`csekit evaluate --tasks transfer`: SentEval's protocol on 11 tasks by default, `--transfer-protocol fast` the
    earlier 9; the extraction grid takes the same flag."""
    import csekit.evaluation.encoders as encoders
    from csekit.extraction.grid import evaluation_units

    monkeypatch.setattr(encoders, "load_embedder", lambda *args: (_hashed_embed, {"model": "fake"}))
    output = tmp_path / "fast.json"
    flags = ["--tasks", "transfer", "--transfer-max-train", "40", "--transfer-protocol", "fast"]
    assert main(["evaluate", "fake", *flags, "--output", str(output)]) == 0
    nine = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "SST5", "SICKEntailment"]
    assert list(json.loads(output.read_text())["transfer"]) == nine + ["avg"]
    assert list(TransferEvaluator(data_dir, max_train=1000).tasks) == nine + ["SICKRelatedness", "STSBenchmark"]
    with pytest.raises(DataError, match="too few training examples"):  # 40 of 60 TREC lines: under 10 per class
        TransferEvaluator(data_dir, tasks=["TREC"], max_train=40)
    assert main(["evaluate", "fake", "--tasks", "transfer", "--transfer-max-train", "40"]) == 2
    units = evaluation_units(["transfer"], data_dir, 40, transfer_protocol="fast")
    assert len(units) == 9 and units[0][2].__defaults__[0].protocol == "fast"


def test_evaluate_cli_clustering_json(tmp_path, monkeypatch, data_dir):
    """`csekit evaluate --tasks clustering` writes the suite object into the JSON record (tiny subsample)."""
    import csekit.evaluation.encoders as encoders

    def fake_loader(name, pooler, max_length, batch_size, device, truncate_dim=None, backend="torch"):
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
