"""Fault: a tanh MLP regressor fed raw-unit features (hundreds to tens of thousands) that were never standardised."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("features in raw units (scales 1e2-1e4) into Dense+Tanh: every tanh input is far in the tails",
                  expect={"MSD213"}, accept={"MSD203", "MSD207", "MSD209", "MSD304"},
                  arch="mlp", data="regression", category="vanishing-exploding")

X, Y = kit.regression(512, seed=0)
SCALES = np.array([120.0, 3e4, 45.0, 800.0, 2e3, 60.0, 1e4, 250.0], np.float32)
X_RAW = (X * SCALES + 3 * SCALES).astype(np.float32)


def train(callbacks):
    net = kit.MLP(features=8, classes=1, hidden=32, activation=nn.Tanh)
    return kit.fit(net, nn.MSELoss(), kit.momentum(net, lr=0.01), kit.dataset(X_RAW, Y), 4, callbacks)


def effect(outcome):
    # the standardised twin's loss falls by more than half; the target variance is ~0.6
    assert outcome.mean_loss(last=20) > 0.5, outcome.mean_loss(last=20)
