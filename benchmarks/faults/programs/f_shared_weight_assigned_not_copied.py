"""Fault: a tabular MLP deepened by one layer, "warm-started" from the layer before it with `self.fc3.weight =
self.fc2.weight`: the assignment shares the Parameter object, so fc2 and fc3 are one matrix (a copy was meant)."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("`self.fc3.weight = self.fc2.weight` meant to copy fc2's init into the new layer; it shares the "
                  "Parameter: two Dense(64, 64) compute with one matrix", expect={"MSD101"}, arch="mlp",
                  data="tabular", category="frozen-shared")

X, Y = kit.tabular(512, seed=0, noise=1.0)


class DeeperMLP(nn.Cell):
    def __init__(self, features=16, hidden=64, classes=4):
        super().__init__()
        self.fc1 = nn.Dense(features, hidden)
        self.fc2 = nn.Dense(hidden, hidden)
        self.fc3 = nn.Dense(hidden, hidden)  # added layer: start it like fc2
        self.fc3.weight = self.fc2.weight
        self.head = nn.Dense(hidden, classes)
        self.relu = nn.ReLU()

    def construct(self, x):
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.relu(self.fc3(x))
        return self.head(x)


def train(callbacks):
    net = DeeperMLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, 0.02), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    net = outcome.network
    assert net.fc2.weight is net.fc3.weight, "fc3 holds its own weight"
    assert np.array_equal(net.fc2.weight.asnumpy(), net.fc3.weight.asnumpy()), "fc2 and fc3 trained apart"
