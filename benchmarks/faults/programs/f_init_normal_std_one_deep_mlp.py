"""Fault: a deep, wide ReLU MLP initialised with `Normal(1.0)` ("unit variance"), ~11x the He std for fan_in=256."""
from mindspore import nn
from mindspore.common.initializer import Normal

from benchmarks.faults import kit

FAULT = kit.Fault("weight_init=Normal(1.0) on 256-wide ReLU layers: activations grow ~11x per layer",
                  expect={"MSD109"}, accept={"MSD201", "MSD202", "MSD204", "MSD206", "MSD208", "MSD211", "MSD212",
                                             "MSD215", "MSD216"},
                  arch="mlp", data="tabular", category="initialisation", fast=True)

X, Y = kit.tabular(1024, seed=0, noise=1.0)


class DeepMLP(nn.Cell):
    def __init__(self, features=16, hidden=256, depth=4, classes=4):
        super().__init__()
        layers = [nn.Dense(features, hidden, weight_init=Normal(1.0)), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Dense(hidden, hidden, weight_init=Normal(1.0)), nn.ReLU()]
        self.body = nn.SequentialCell(layers)
        self.head = nn.Dense(hidden, classes, weight_init=Normal(1.0))

    def construct(self, x):
        return self.head(self.body(x))


def train(callbacks):
    net = DeepMLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, 0.01), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    # the first loss is orders of magnitude above ln(4) = 1.39, and training never gets to a sane loss
    assert outcome.first_loss > 100 and not outcome.mean_loss(last=10) < 1.0, (outcome.first_loss, outcome.losses[-3:])
