"""Fault (PyNative): a hand-written softplus cell, log(1 + exp(x)), on unscaled sensor readings: exp overflows and the gradient is inf/inf."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

# MSD304: the raw readings (hundreds) are what drives the pre-activations past exp's float32 range.
FAULT = kit.Fault("custom Softplus cell computing ops.log(1 + ops.exp(x)): x > 88 overflows, the gradient is NaN",
                  expect={"MSD201", "MSD206"}, accept={"MSD202", "MSD208", "MSD211", "MSD304"}, arch="mlp",
                  data="regression", category="nan", mode="pynative", fast=True)

Z, Y = kit.regression(256, seed=0)
X = (200.0 + 60.0 * Z).astype(np.float32)                 # raw readings, not standardised


class NaiveSoftplus(nn.Cell):
    def construct(self, x):
        return ops.log(1.0 + ops.exp(x))


class Net(nn.Cell):
    def __init__(self, features=8, hidden=32):
        super().__init__()
        self.fc1 = nn.Dense(features, hidden)
        self.act = NaiveSoftplus()
        self.fc2 = nn.Dense(hidden, 1)

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


def train(callbacks):
    net = Net()
    return kit.fit(net, nn.MSELoss(), kit.adam(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None and outcome.nonfinite_step <= 3, outcome.losses[:5]
