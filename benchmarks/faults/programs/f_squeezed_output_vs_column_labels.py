"""Fault: a regressor squeezes its output to (N,) while the labels are (N, 1): MSELoss broadcasts to (N, N)."""
import mindspore as ms
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("output (N,) vs labels (N, 1): MSELoss compares every prediction with every label",
                  expect={"MSD114"}, accept={"MSD203"}, arch="mlp", data="regression", category="loss-wiring")

X, Y = kit.regression(512, seed=0)
XE, YE = kit.regression(256, seed=1)


class Regressor(nn.Cell):
    def __init__(self, features=8, hidden=64):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU())
        self.out = nn.Dense(hidden, 1)

    def construct(self, x):
        return self.out(self.body(x)).squeeze(-1)


def train(callbacks):
    net = Regressor()
    outcome = kit.fit(net, nn.MSELoss(), kit.adam(net, 3e-3), kit.dataset(X, Y), 6, callbacks)
    net.set_train(False)
    prediction = net(ms.Tensor(XE)).asnumpy()
    outcome.metrics["mse"] = float(np.mean((prediction - YE[:, 0]) ** 2))
    return outcome


def effect(outcome):
    # the net learns the label mean: eval MSE stays near the label variance
    assert outcome.metrics["mse"] > 0.8 * float(np.var(YE)), (outcome.metrics, float(np.var(YE)))
