"""Fault: a hand-written projection layer keeps its matrix as a raw Parameter initialised with `initializer('zeros', ...)`."""
import numpy as np
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import initializer

from benchmarks.faults import kit

FAULT = kit.Fault("Parameter(initializer('zeros', (16, 64))) for a hidden projection followed by ReLU: its output "
                  "and its gradient are zero, it never learns", expect={"MSD108"},
                  accept={"MSD203", "MSD207", "MSD209", "MSD212"}, arch="mlp", data="tabular",
                  category="initialisation", fast=True)

X, Y = kit.tabular(512, seed=0)


class Projection(nn.Cell):
    def __init__(self, features, hidden):
        super().__init__()
        self.w = Parameter(initializer("zeros", (features, hidden)), name="w")
        self.b = Parameter(initializer("zeros", (hidden,)), name="b")

    def construct(self, x):
        return ops.matmul(x, self.w) + self.b


class Net(nn.Cell):
    def __init__(self, features=16, hidden=64, classes=4):
        super().__init__()
        self.proj = Projection(features, hidden)
        self.relu = nn.ReLU()
        self.head = nn.Dense(hidden, classes)

    def construct(self, x):
        return self.head(self.relu(self.proj(x)))


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    # ReLU(0) = 0 with zero derivative: the projection stays exactly zero and the loss stays at ln(4)
    assert not np.any(outcome.network.proj.w.asnumpy()), "the projection moved"
    assert outcome.mean_loss(last=10) > 1.3, outcome.mean_loss(last=10)
