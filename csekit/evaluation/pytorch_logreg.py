"""SentEval's PyTorch logistic regression, the transfer classifier of the SimCSE lineage (``--transfer-protocol
simcse``).

SimCSE's ``evaluation.py --mode test`` runs SentEval with ``usepytorch=True, kfold=10`` and the classifier
``{'nhid': 0, 'optim': 'adam', 'batch_size': 64, 'tenacity': 5, 'epoch_size': 4}``; WhitenedCSE reports the same
setting. This module is SentEval's ``MLP`` with ``nhid=0`` (facebookresearch/SentEval @5d6dc11
``senteval/tools/classifier.py``), read line by line:

* ``PyTorchClassifier.__init__`` (L26-30) seeds numpy's global generator and torch with 1111, then ``MLP`` builds
  ``nn.Linear(d, classes)`` on the CPU (moved to the GPU afterwards): here a private ``RandomState(seed)`` and a
  forked torch generator, the same numbers without touching the caller's random state.
* ``fit`` (L60-81): ``epoch_size`` passes over shuffled batches of 64 (one ``np.random.permutation`` per pass,
  L86), Adam (lr 1e-3) with ``weight_decay = l2reg``, the batch-mean cross-entropy (``size_average = False`` is set
  after construction and has no effect since torch 1.0); after each ``epoch_size`` passes the validation accuracy
  is measured, the best model is kept, and training stops at the ``tenacity + 1``-th evaluation without a new best
  or past ``max_epoch`` (200) epochs.
* validation data is given (the held-out inner fold, the dev split) or is a ``validation_split`` of 5%: the first
  ``int(0.05 n)`` rows of a permutation drawn right after seeding (``prepare_split``, L40-52).
* features are cast to float32 (L54-57); ``score`` is the accuracy of the argmax in batches of 64.

``validation.py`` pairs it with the L2 grid ``10^-5 .. 10^-2`` (L61, L130, L205) in the three schemes of
[`csekit.evaluation.transfer`][csekit.evaluation.transfer]. On a GPU the result depends on the kernels' summation order
like any float32
training; on the CPU it is bit-for-bit SentEval's.
"""

import copy
from typing import Optional

import numpy as np
import torch
from torch import nn

GRID = tuple(10.0**t for t in range(-5, -1))  # validation.py L61, L130, L205 (usepytorch=True)
SIMCSE_CLASSIFIER = {"batch_size": 64, "tenacity": 5, "epoch_size": 4, "max_epoch": 200}  # evaluation.py --mode test
VALIDATION_SPLIT = 0.05  # validation.py L98, L171: the final fit of the k-fold schemes holds out 5% of train


class PyTorchLogisticRegression:
    """SentEval's ``MLP(nhid=0)`` with SimCSE's test-mode settings. ``fit`` returns the best validation accuracy
    (0..1); ``score`` the accuracy of the kept model."""

    def __init__(self, input_dim: int, num_classes: int, l2reg: float, seed: int = 1111,
                 device: Optional[torch.device] = None, batch_size: int = 64, tenacity: int = 5, epoch_size: int = 4,
                 max_epoch: int = 200):
        self.rng = np.random.RandomState(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = nn.Linear(input_dim, num_classes)
        self.device = torch.device(device or "cpu")
        self.model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), weight_decay=l2reg)
        self.batch_size, self.tenacity, self.epoch_size, self.max_epoch = batch_size, tenacity, epoch_size, max_epoch

    def _tensors(self, x, y):
        return (torch.as_tensor(np.asarray(x), dtype=torch.float32, device=self.device),
                torch.as_tensor(np.asarray(y), dtype=torch.int64, device=self.device))

    def fit(self, x, y, validation_data=None, validation_split: Optional[float] = None) -> float:
        if validation_data is None:
            permutation = self.rng.permutation(len(x))
            held_out = int(validation_split * len(x))
            x, y, validation_data = x[permutation[held_out:]], y[permutation[held_out:]], (
                x[permutation[:held_out]], y[permutation[:held_out]])
        x, y = self._tensors(x, y)
        x_dev, y_dev = self._tensors(*validation_data)
        epochs, best, best_model, misses = 0, -1.0, None, 0
        while epochs <= self.max_epoch:
            self.model.train()
            for _ in range(self.epoch_size):
                permutation = torch.as_tensor(self.rng.permutation(len(x)), device=self.device)
                for start in range(0, len(x), self.batch_size):
                    batch = permutation[start:start + self.batch_size]
                    loss = nn.functional.cross_entropy(self.model(x[batch]), y[batch])
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
            epochs += self.epoch_size
            accuracy = self._accuracy(x_dev, y_dev)
            if accuracy > best:
                best, best_model = accuracy, copy.deepcopy(self.model)
            else:  # SentEval never resets this count
                if misses >= self.tenacity:
                    break
                misses += 1
        self.model = best_model
        return best

    def _accuracy(self, x, y) -> float:
        self.model.eval()
        correct = 0
        with torch.no_grad():
            for start in range(0, len(x), self.batch_size):
                predicted = self.model(x[start:start + self.batch_size]).argmax(1)
                correct += int((predicted == y[start:start + self.batch_size]).sum())
        return correct / len(x)

    def score(self, x, y) -> float:
        return self._accuracy(*self._tensors(x, y))


class PyTorchClassifier:
    """The ``simcse`` protocol's classifier for [`csekit.evaluation.transfer`][csekit.evaluation.transfer]'s validation
    schemes: a fresh
    `PyTorchLogisticRegression` per fit, early-stopped on the fold it is scored on (as SentEval does), and the
    final fit early-stopped on the dev split or on 5% of train."""

    grids = dict.fromkeys(("inner_kfold", "kfold", "split"), GRID)

    def __init__(self, num_classes: int, seed: int = 1111, device: Optional[torch.device] = None):
        self.num_classes, self.seed, self.device = num_classes, seed, device

    def _new(self, x, l2reg):
        return PyTorchLogisticRegression(x.shape[1], self.num_classes, l2reg, self.seed, self.device,
                                         **SIMCSE_CLASSIFIER)

    def grid_accuracies(self, x, y, x_eval, y_eval, grid) -> list:
        accuracies = []
        for l2reg in grid:
            model = self._new(x, l2reg)
            model.fit(x, y, validation_data=(x_eval, y_eval))
            accuracies.append(model.score(x_eval, y_eval))
        return accuracies

    def final(self, x, y, l2reg, dev=None) -> PyTorchLogisticRegression:
        model = self._new(x, l2reg)
        model.fit(x, y, validation_data=dev, validation_split=None if dev is not None else VALIDATION_SPLIT)
        return model


__all__ = ["GRID", "PyTorchClassifier", "PyTorchLogisticRegression", "SIMCSE_CLASSIFIER"]
