"""Fault: an "MLP" written without activations between its Dense layers (a linear model) on ring-shaped classes."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("Dense->Dense->Dense with no nonlinearity: a linear model cannot separate concentric classes",
                  expect={"MSD402"}, accept={"MSD203", "MSD404"}, arch="mlp", data="tabular",
                  category="evaluation", fast=True)


def _rings(n, seed):
    r = kit.rng(seed)
    y = (np.arange(n) % 2).astype(np.int32)
    r.shuffle(y)
    radius = 1.0 + 1.0 * y + 0.25 * r.standard_normal(n)
    angle = r.uniform(0, 2 * np.pi, n)
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], 1)
    x = np.c_[x, 0.5 * r.standard_normal((n, 4))]          # plus uninformative columns
    return (x / x.std(0)).astype(np.float32), y


X, Y = _rings(1024, 0)
XE, YE = _rings(256, 1)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(6, 64)
        self.fc2 = nn.Dense(64, 64)
        self.fc3 = nn.Dense(64, 2)

    def construct(self, x):
        return self.fc3(self.fc2(self.fc1(x)))


def _ds(x, y, shuffle):
    return mds.NumpySlicesDataset({"x": x, "label": y}, shuffle=shuffle).batch(32)


def doctor_options():
    return {"eval_dataset": _ds(XE, YE, False)}


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.02), _ds(X, Y, True), 4, callbacks,
                   eval_ds=_ds(XE, YE, False))


def effect(outcome):
    # with ReLUs between the layers the same net reaches > 0.9
    assert outcome.metrics["accuracy"] < 0.65, outcome.metrics
