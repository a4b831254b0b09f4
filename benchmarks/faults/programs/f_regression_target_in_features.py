"""Fault: a regression table's target column is not dropped from the feature columns, so the model reads the answer."""
import mindspore as ms
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("features = the whole table where table[:, :-1] was meant: the target is also the 9th input column",
                  expect={"MSD205"}, arch="mlp", data="regression", category="data")

X, Y = kit.regression(768, seed=0)
TABLE = np.concatenate([X, Y], axis=1)                     # 8 features + the target, as stored
FEATURES = TABLE[:, :]                                     # meant: TABLE[:, :-1]
XT, YT = kit.regression(256, seed=1)


class Regressor(nn.Cell):
    def __init__(self, features=9, hidden=64):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU())
        self.out = nn.Dense(hidden, 1)

    def construct(self, x):
        return self.out(self.body(x))


def train(callbacks):
    net = Regressor()
    outcome = kit.fit(net, nn.MSELoss(), kit.adam(net, 3e-3), kit.dataset(FEATURES, Y, columns=("features", "target")),
                      6, callbacks)
    deployed = np.concatenate([XT, np.zeros_like(YT)], axis=1)  # at prediction time the target is not known
    net.set_train(False)
    outcome.metrics["deployed_mse"] = float(((net(ms.Tensor(deployed)).asnumpy() - YT) ** 2).mean())
    return outcome


def effect(outcome):
    # the training loss goes below the noise floor (0.01) the data allows; without the target the model is useless
    assert outcome.mean_loss(last=10) < 0.005 and outcome.metrics["deployed_mse"] > 0.1, (
        outcome.mean_loss(last=10), outcome.metrics)
