"""Fault: an MLP's BatchNorm1d built with `use_batch_statistics=True`, so eval/predict normalises with the batch's own statistics."""
import mindspore as ms
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("BatchNorm1d(use_batch_statistics=True): single-sample predictions are normalised to a constant",
                  expect={"MSD105"}, arch="mlp", data="tabular", category="mode")

X, Y = kit.tabular(1024, seed=0, noise=1.0)
XE, YE = kit.tabular(256, seed=1, noise=1.0)


class Net(nn.Cell):
    def __init__(self, features=16, hidden=64, classes=4):
        super().__init__()
        self.fc1 = nn.Dense(features, hidden)
        self.bn = nn.BatchNorm1d(hidden, use_batch_statistics=True)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, classes)

    def construct(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


def train(callbacks):
    net = Net()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)
    net.set_train(False)
    single = [int(net(ms.Tensor(XE[i:i + 1])).asnumpy().argmax()) for i in range(64)]  # one request at a time
    outcome.metrics["batch_accuracy"] = kit.accuracy(net, XE, YE)
    outcome.metrics["single_accuracy"] = float(np.mean(np.array(single) == YE[:64]))
    return outcome


def effect(outcome):
    m = outcome.metrics
    assert m["batch_accuracy"] > 0.8 and m["single_accuracy"] < 0.5, m
