"""Healthy: an MLP with nn.Dropout(p=0.2) (the MindSpore 2.x argument, written right), with a Doctor eval set."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: Dropout(p=0.2) used correctly", expect=(), arch="mlp", data="tabular",
                  category="healthy", fast=True,
                  deterministic=False)  # CPU Dropout

X, Y = kit.tabular(2048, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 64)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(p=0.2)
        self.fc2 = nn.Dense(64, 4)

    def construct(self, x):
        return self.fc2(self.dropout(self.relu(self.fc1(x))))


def doctor_options():
    return {"eval_dataset": kit.dataset(XE, YE, shuffle=False)}


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
