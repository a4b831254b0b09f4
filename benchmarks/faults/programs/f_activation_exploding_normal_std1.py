"""Fault: PyTorch's `nn.init.normal_` habit ported as Normal(sigma=1.0) on every Dense of a 4-layer ReLU regressor."""
from mindspore import nn
from mindspore.common.initializer import Normal

from benchmarks.faults import kit

FAULT = kit.Fault("weight_init=Normal(1.0) (std 1, ~6x the He scale for width 64) in every layer",
                  expect={"MSD216"}, accept={"MSD109", "MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD208",
                                             "MSD211", "MSD212"},
                  arch="mlp", data="regression", category="initialisation", fast=True)

X, Y = kit.regression(512, seed=0)


class Regressor(nn.Cell):
    def __init__(self, features=8, hidden=64, depth=4):
        super().__init__()
        layers, width = [], features
        for _ in range(depth):
            layers += [nn.Dense(width, hidden, weight_init=Normal(1.0)), nn.ReLU()]
            width = hidden
        self.body = nn.SequentialCell(layers)
        self.head = nn.Dense(width, 1, weight_init=Normal(1.0))

    def construct(self, x):
        return self.head(self.body(x))


def train(callbacks):
    net = Regressor()
    return kit.fit_functional(net, nn.MSELoss(), kit.adam(net), kit.dataset(X, Y), 4, callbacks)


def effect(outcome):
    # targets are in [-1, 1]; the exploded outputs make the loss enormous and it never gets near the twin's 0.05
    assert outcome.first_loss > 1e4 and outcome.mean_loss(last=20) > 1.0, (outcome.first_loss, outcome.mean_loss(last=20))
