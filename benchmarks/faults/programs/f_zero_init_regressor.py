"""Fault: a regression MLP with every Dense weight initialised to zeros ("deterministic init")."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

# MSD211 is accepted: a weight that starts at 0 moves by about its own size in the steps it does move.
FAULT = kit.Fault("weight_init='zeros' on all Dense layers: hidden units stay zero, only the output bias learns",
                  expect={"MSD108"}, accept={"MSD203", "MSD207", "MSD209", "MSD211", "MSD212"}, arch="mlp",
                  data="regression", category="initialisation")

X, Y = kit.regression(512, seed=0)


class Regressor(nn.Cell):
    def __init__(self, features=8, hidden=32):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(features, hidden, weight_init="zeros"), nn.ReLU(),
                                      nn.Dense(hidden, hidden, weight_init="zeros"), nn.ReLU())
        self.out = nn.Dense(hidden, 1, weight_init="zeros")

    def construct(self, x):
        return self.out(self.body(x))


def train(callbacks):
    net = Regressor()
    return kit.fit(net, nn.MSELoss(), kit.momentum(net, 0.02), kit.dataset(X, Y), 8, callbacks)


def effect(outcome):
    # the net can only predict a constant: the loss stays near the label variance
    assert outcome.mean_loss(last=10) > 0.8 * float(np.var(Y)), (outcome.mean_loss(last=10), float(np.var(Y)))
