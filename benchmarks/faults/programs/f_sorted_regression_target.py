"""Fault: a regression table exported ORDER BY target and loaded with shuffle=False."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("regression rows sorted by target and never shuffled", expect={"MSD305"},
                  accept={"MSD202", "MSD203", "MSD204"}, arch="mlp", data="regression", category="data", fast=True)

X, Y = kit.regression(1024, seed=0)
ORDER = np.argsort(Y[:, 0])
XE, YE = kit.regression(256, seed=1)


def _ds(x, y):
    return mds.NumpySlicesDataset({"x": x, "target": y}, shuffle=False).batch(32)


def train(callbacks):
    net = kit.MLP(features=8, classes=1, hidden=32)
    return kit.fit(net, nn.MSELoss(), kit.adam(net, 3e-3), _ds(X[ORDER], Y[ORDER]), 2, callbacks,
                   eval_ds=_ds(XE, YE), metric="mae")


def effect(outcome):
    # the shuffled twin reaches MAE ≈ 0.1; predicting the mean gives ≈ 0.6
    assert outcome.metrics["mae"] > 0.35, outcome.metrics
