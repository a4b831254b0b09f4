"""Fault: a residual MLP of `mint.nn.Linear` layers, every hidden layer "initialised like the first" with
`layer.weight = self.layers[0].weight` in a loop: all four layers hold one matrix (copies were meant).
Trained with a hand-written loop."""
import numpy as np
from mindspore import mint, nn

from benchmarks.faults import kit

FAULT = kit.Fault("`for layer in self.layers[1:]: layer.weight = self.layers[0].weight` shares one Parameter among "
                  "four mint.nn.Linear(32, 32) where a copy of the first init was meant", expect={"MSD101"},
                  arch="mlp", data="tabular", category="frozen-shared")

X, Y = kit.tabular(512, seed=1, noise=1.0)


class ResidualMLP(nn.Cell):
    def __init__(self, features=16, hidden=32, classes=4, depth=4):
        super().__init__()
        self.stem = mint.nn.Linear(features, hidden)
        self.layers = nn.CellList([mint.nn.Linear(hidden, hidden) for _ in range(depth)])
        for layer in self.layers[1:]:  # same starting point for every block
            layer.weight = self.layers[0].weight
        self.head = mint.nn.Linear(hidden, classes)

    def construct(self, x):
        h = mint.nn.functional.relu(self.stem(x))
        for layer in self.layers:
            h = h + mint.nn.functional.relu(layer(h))
        return self.head(h)


def train(callbacks):
    net = ResidualMLP()
    return kit.fit_functional(net, kit.cross_entropy(), kit.adam(net, 3e-3), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    layers = outcome.network.layers
    weights = [layer.weight.asnumpy() for layer in layers]
    assert all(np.array_equal(weights[0], w) for w in weights[1:]), "the layers trained apart"
    assert len({id(layer.weight) for layer in layers}) == 1, "each layer holds its own weight"
