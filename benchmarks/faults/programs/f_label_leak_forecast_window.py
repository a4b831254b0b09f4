"""Fault: forecasting windows sliced one step too long, so the input's last value is the target itself."""
import numpy as np
from mindspore import nn
from mindspore.common.initializer import Normal

from benchmarks.faults import kit

FAULT = kit.Fault("x = series[i:i+W+1] instead of series[i:i+W]: the next value leaks into the input window",
                  expect={"MSD205"}, accept={"MSD203", "MSD207", "MSD209", "MSD210"},
                  arch="mlp", data="regression", category="data", mode="pynative", fast=True)

W = 16
T = np.arange(2000, dtype=np.float32)
SERIES = (np.sin(0.07 * T) + 0.5 * np.sin(0.23 * T) + 0.1 * kit.rng(0).standard_normal(T.size)).astype(np.float32)
STARTS = np.arange(0, 1200, 2)
X = np.stack([SERIES[i:i + W + 1] for i in STARTS])        # bug: W + 1 values, the last is the target
Y = SERIES[STARTS + W][:, None]
X_OK = np.stack([SERIES[i:i + W] for i in STARTS])


class ResidualForecaster(nn.Cell):
    """Predicts the next value as the last observed value plus a learned correction (a persistence baseline)."""

    def __init__(self, window):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(window, 32), nn.ReLU())
        self.delta = nn.Dense(32, 1, weight_init=Normal(0.001), bias_init="zeros")

    def construct(self, x):
        return x[:, -1:] + self.delta(self.body(x))


def train(callbacks):
    net = ResidualForecaster(W + 1)
    return kit.fit(net, nn.MSELoss(), kit.adam(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    # a real one-step forecast of this series has a mean squared error around 0.02 (noise + dynamics)
    assert outcome.first_loss < 1e-5 and outcome.mean_loss(last=5) < 1e-4, outcome.losses[:3]
