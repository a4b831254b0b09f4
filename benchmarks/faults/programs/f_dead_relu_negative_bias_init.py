"""Fault: hidden ReLU layers initialised with bias -2 "for sparse activations": almost every unit starts dead."""
from mindspore import nn
from mindspore.common.initializer import Constant

from benchmarks.faults import kit

FAULT = kit.Fault("bias_init=Constant(-2.0) before ReLU on standardised inputs", expect={"MSD212"},
                  accept={"MSD203", "MSD207", "MSD209"}, arch="mlp", data="tabular", category="initialisation",
                  fast=True)

X, Y = kit.tabular(512, seed=0)
XE, YE = kit.tabular(256, seed=1)


class SparseMLP(nn.Cell):
    def __init__(self, features=16, hidden=64, classes=4):
        super().__init__()
        self.fc1 = nn.Dense(features, hidden, bias_init=Constant(-2.0))
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Dense(hidden, hidden, bias_init=Constant(-2.0))
        self.relu2 = nn.ReLU()
        self.head = nn.Dense(hidden, classes)

    def construct(self, x):
        return self.head(self.relu2(self.fc2(self.relu1(self.fc1(x)))))


def train(callbacks):
    net = SparseMLP()
    return kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the same net with zero biases reaches > 90 %
    assert outcome.metrics["accuracy"] < 0.5, outcome.metrics
