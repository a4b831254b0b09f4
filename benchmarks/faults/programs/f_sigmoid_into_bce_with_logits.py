"""Fault: a binary MLP ends in nn.Sigmoid and is trained with BCEWithLogitsLoss (sigmoid applied twice)."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("Sigmoid output fed to BCEWithLogitsLoss: probabilities squashed again, class 0 loss >= ln 2",
                  expect={"MSD107"}, accept={"MSD203"}, arch="mlp", data="tabular", category="loss-wiring",
                  fast=True)

X, labels = kit.tabular(1024, classes=2, seed=0, noise=1.0)
Y = labels.astype(np.float32).reshape(-1, 1)


class Net(nn.Cell):
    def __init__(self, features=16, hidden=64):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU())
        self.head = nn.Dense(hidden, 1)
        self.sigmoid = nn.Sigmoid()

    def construct(self, x):
        return self.sigmoid(self.head(self.body(x)))


def train(callbacks):
    net = Net()
    return kit.fit(net, nn.BCEWithLogitsLoss(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)


def effect(outcome):
    # sigmoid(p) >= 0.5 for p in [0, 1]: the loss cannot fall below ~0.5 however well the net separates the classes
    assert outcome.mean_loss(last=10) > 0.45, outcome.mean_loss(last=10)
