"""Fault: `nn.Dropout(keep_prob=0.1)` written with the PyTorch meaning (p = probability to drop)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("Dropout(keep_prob=0.1) meant as p=0.1: 90 % of activations dropped", expect={"MSD104"},
                  accept={"MSD203"}, arch="mlp", data="tabular", category="mode", fast=True,
                  deterministic=False)  # CPU Dropout

X, Y = kit.tabular(1024, seed=0, noise=1.0)
XE, YE = kit.tabular(512, seed=1, noise=1.0)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 64)
        self.relu = nn.ReLU()
        self.dropout = nn.Dropout(keep_prob=0.1)
        self.fc2 = nn.Dense(64, 4)

    def construct(self, x):
        return self.fc2(self.dropout(self.relu(self.fc1(x))))


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # training loss is far noisier and higher than eval loss: most of the hidden layer is dropped while training
    assert outcome.mean_loss(last=10) > 1.5 * outcome.metrics["loss"], (outcome.mean_loss(last=10), outcome.metrics)
