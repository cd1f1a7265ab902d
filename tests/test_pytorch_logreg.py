"""``--transfer-protocol simcse`` equals SentEval's PyTorch path as SimCSE's ``evaluation.py --mode test`` runs it.

The reference below is SentEval's own code (facebookresearch/SentEval @5d6dc11, ``senteval/tools/classifier.py``
``PyTorchClassifier`` + ``MLP`` with ``nhid=0``, ``senteval/tools/validation.py`` with ``usepytorch=True``) transcribed
for the CPU: its global ``np.random.seed`` / ``torch.manual_seed`` calls, its ``while`` loop, its ``copy.deepcopy``
of the best model, its rounding. It shares no code with csekit. Three small cached-vector tasks cover the three
schemes: no split (CR-like, inner 10-fold), train/test (TREC-like, 6 classes) and train/dev/test (SST-2-like).
"""

import copy

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from torch import nn

from csekit.evaluation.transfer import SklearnClassifier, TransferEvaluator, TransferTask, score_task

SIMCSE_TEST_CLASSIFIER = {"nhid": 0, "optim": "adam", "batch_size": 64, "tenacity": 5, "epoch_size": 4}
REGS = [10**t for t in range(-5, -1)]


class SentEvalMLP:  # PyTorchClassifier.__init__ + MLP.__init__ (nhid=0), on the CPU
    def __init__(self, params, inputdim, nclasses, l2reg=0.0, batch_size=64, seed=1111):
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.batch_size = params.get("batch_size", batch_size)
        self.tenacity, self.epoch_size, self.max_epoch = params["tenacity"], params["epoch_size"], 200
        self.model = nn.Sequential(nn.Linear(inputdim, nclasses))
        self.loss_fn = nn.CrossEntropyLoss()
        self.loss_fn.size_average = False
        self.optimizer = torch.optim.Adam(self.model.parameters())
        self.optimizer.param_groups[0]["weight_decay"] = l2reg

    def prepare_split(self, X, y, validation_data=None, validation_split=None):
        if validation_data is not None:
            trainX, trainy, (devX, devy) = X, y, validation_data
        else:
            permutation = np.random.permutation(len(X))
            trainidx = permutation[int(validation_split * len(X)):]
            devidx = permutation[0:int(validation_split * len(X))]
            trainX, trainy, devX, devy = X[trainidx], y[trainidx], X[devidx], y[devidx]
        return (torch.from_numpy(trainX).to(dtype=torch.float32), torch.from_numpy(trainy).to(dtype=torch.int64),
                torch.from_numpy(devX).to(dtype=torch.float32), torch.from_numpy(devy).to(dtype=torch.int64))

    def fit(self, X, y, validation_data=None, validation_split=None, early_stop=True):
        self.nepoch, bestaccuracy, stop_train, early_stop_count = 0, -1, False, 0
        trainX, trainy, devX, devy = self.prepare_split(X, y, validation_data, validation_split)
        while not stop_train and self.nepoch <= self.max_epoch:
            self.trainepoch(trainX, trainy, epoch_size=self.epoch_size)
            accuracy = self.score(devX, devy)
            if accuracy > bestaccuracy:
                bestaccuracy = accuracy
                bestmodel = copy.deepcopy(self.model)
            elif early_stop:
                if early_stop_count >= self.tenacity:
                    stop_train = True
                early_stop_count += 1
        self.model = bestmodel
        return bestaccuracy

    def trainepoch(self, X, y, epoch_size=1):
        self.model.train()
        for _ in range(self.nepoch, self.nepoch + epoch_size):
            permutation = np.random.permutation(len(X))
            for i in range(0, len(X), self.batch_size):
                idx = torch.from_numpy(permutation[i:i + self.batch_size]).long()
                loss = self.loss_fn(self.model(X[idx]), y[idx])
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        self.nepoch += epoch_size

    def score(self, devX, devy):
        self.model.eval()
        devX, devy = torch.FloatTensor(devX), torch.LongTensor(devy)
        correct = 0
        with torch.no_grad():
            for i in range(0, len(devX), self.batch_size):
                pred = self.model(devX[i:i + self.batch_size]).data.max(1)[1]
                correct += pred.long().eq(devy[i:i + self.batch_size].long()).sum().item()
        return 1.0 * correct / len(devX)


def mlp(nclasses, dim, reg):
    return SentEvalMLP(SIMCSE_TEST_CLASSIFIER, inputdim=dim, nclasses=nclasses, l2reg=reg, seed=1111)


def senteval_inner_kfold(X, y, nclasses):  # InnerKFoldClassifier.run, usepytorch
    skf = StratifiedKFold(n_splits=10, shuffle=True, random_state=1111)
    innerskf = StratifiedKFold(n_splits=10, shuffle=True, random_state=1111)
    testresults = []
    for train_idx, test_idx in skf.split(X, y):
        X_train, X_test, y_train, y_test = X[train_idx], X[test_idx], y[train_idx], y[test_idx]
        scores = []
        for reg in REGS:
            regscores = []
            for inner_train_idx, inner_test_idx in innerskf.split(X_train, y_train):
                clf = mlp(nclasses, X.shape[1], reg)
                clf.fit(X_train[inner_train_idx], y_train[inner_train_idx],
                        validation_data=(X_train[inner_test_idx], y_train[inner_test_idx]))
                regscores.append(clf.score(X_train[inner_test_idx], y_train[inner_test_idx]))
            scores.append(round(100 * np.mean(regscores), 2))
        clf = mlp(nclasses, X.shape[1], REGS[np.argmax(scores)])
        clf.fit(X_train, y_train, validation_split=0.05)
        testresults.append(round(100 * clf.score(X_test, y_test), 2))
    return round(np.mean(testresults), 2)


def senteval_kfold(train, test, nclasses):  # KFoldClassifier.run, usepytorch
    skf = StratifiedKFold(n_splits=10, shuffle=True, random_state=1111)
    scores = []
    for reg in REGS:
        scanscores = []
        for train_idx, test_idx in skf.split(train["X"], train["y"]):
            clf = mlp(nclasses, train["X"].shape[1], reg)
            clf.fit(train["X"][train_idx], train["y"][train_idx],
                    validation_data=(train["X"][test_idx], train["y"][test_idx]))
            scanscores.append(clf.score(train["X"][test_idx], train["y"][test_idx]))
        scores.append(round(100 * np.mean(scanscores), 2))
    clf = mlp(nclasses, train["X"].shape[1], REGS[np.argmax(scores)])
    clf.fit(train["X"], train["y"], validation_split=0.05)
    return round(100 * clf.score(test["X"], test["y"]), 2)


def senteval_split(X, y, nclasses):  # SplitClassifier.run, usepytorch
    scores = []
    for reg in REGS:
        clf = mlp(nclasses, X["train"].shape[1], reg)
        clf.fit(X["train"], y["train"], validation_data=(X["valid"], y["valid"]))
        scores.append(round(100 * clf.score(X["valid"], y["valid"]), 2))
    clf = mlp(nclasses, X["train"].shape[1], REGS[np.argmax(scores)])
    clf.fit(X["train"], y["train"], validation_data=(X["valid"], y["valid"]))
    return round(100 * clf.score(X["test"], y["test"]), 2)


def cached_vectors(n, classes, seed, dim=12):
    """Unit-scale "embeddings" with a class signal and noise, cached as SentEval's batcher would return them."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    x = rng.normal(size=(n, dim)) + 0.8 * rng.normal(size=(classes, dim))[y]
    return x.astype(np.float32), y


def test_no_split_task_equals_senteval_pytorch_inner_kfold():
    x, y = cached_vectors(60, 2, seed=0)  # 60 rows: every inner training set fits in one batch of 64
    task = TransferTask("CR", [str(i) for i in range(60)], (np.arange(60), y))
    assert score_task(task, x, protocol="simcse") == senteval_inner_kfold(x, y, 2)


def test_train_test_task_equals_senteval_pytorch_kfold():
    x, y = cached_vectors(260, 6, seed=1)
    task = TransferTask("TREC", [str(i) for i in range(260)], (np.arange(200), y[:200]), (np.arange(200, 260), y[200:]))
    reference = senteval_kfold({"X": x[:200], "y": y[:200]}, {"X": x[200:], "y": y[200:]}, 6)
    assert score_task(task, x, protocol="simcse") == reference


def test_train_dev_test_task_equals_senteval_pytorch_split():
    x, y = cached_vectors(400, 2, seed=2)
    rows = np.arange(400)
    task = TransferTask("SST2", [str(i) for i in rows], (rows[:240], y[:240]), (rows[320:], y[320:]),
                        (rows[240:320], y[240:320]))
    reference = senteval_split({"train": x[:240], "valid": x[240:320], "test": x[320:]},
                               {"train": y[:240], "valid": y[240:320], "test": y[320:]}, 2)
    assert score_task(task, x, protocol="simcse") == reference


def test_simcse_protocol_leaves_the_callers_random_state_alone():
    x, y = cached_vectors(260, 6, seed=1)
    task = TransferTask("TREC", [str(i) for i in range(260)], (np.arange(200), y[:200]), (np.arange(200, 260), y[200:]))
    np.random.seed(5)
    torch.manual_seed(5)
    score_task(task, x, protocol="simcse")
    after = np.random.random(), torch.rand(1).item()
    np.random.seed(5)
    torch.manual_seed(5)
    assert after == (np.random.random(), torch.rand(1).item())


def test_simcse_protocol_scores_simcses_seven_tasks_and_averages_them(data_dir):
    evaluator = TransferEvaluator(data_dir, protocol="simcse", max_train=200)
    assert tuple(evaluator.tasks) == ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")


def test_transfer_average_is_simcses_seven_tasks_only(data_dir, monkeypatch):
    """Avg. is the papers' mean of MR..MRPC; SST-5, SICK-E, SICK-R and STS-B keep their own columns."""
    evaluator = TransferEvaluator(data_dir, max_train=200)
    assert {"SST5", "SICKEntailment", "SICKRelatedness", "STSBenchmark"} <= set(evaluator.tasks)
    scores = {name: float(10 * index) for index, name in enumerate(evaluator.tasks)}
    monkeypatch.setattr(TransferEvaluator, "evaluate_task", lambda self, name, embed: scores[name])
    results = evaluator(None)
    assert results["avg"] == round(np.mean([scores[name] for name in
                                            ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")]), 2)
    partial = TransferEvaluator(data_dir, tasks=("MR", "SST5"), max_train=200)
    assert "avg" not in partial(None)  # no average over a set that is not the papers'


def test_sklearn_final_model_is_refitted_from_scratch_at_the_chosen_c():
    """SentEval refits ``LogisticRegression(C)`` from scratch; the warm-started search path reaches the same optimum
    only to the solver's tolerance, which moved 3 of SST-2's 1,821 test predictions."""
    x, y = cached_vectors(300, 2, seed=3)
    x = x.astype(np.float64) * 0.05
    fresh = LogisticRegression(C=4.0, random_state=1111, max_iter=10_000).fit(x, y)
    final = SklearnClassifier().final(x, y, 4.0)
    np.testing.assert_array_equal(final.coef_, fresh.coef_)
    np.testing.assert_array_equal(final.intercept_, fresh.intercept_)
