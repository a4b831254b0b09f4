"""Fault: an 8-layer tanh MLP initialised with Normal(0.01): the signal and the gradient shrink 10x per layer."""
from mindspore import nn
from mindspore.common.initializer import Normal

from benchmarks.faults import kit

FAULT = kit.Fault("weight_init=Normal(0.01) in a deep tanh net (Glorot std would be 0.18)", expect={"MSD109", "MSD207"},
                  accept={"MSD203", "MSD209", "MSD210"}, arch="mlp", data="sequences", category="initialisation")

X, Y = kit.sequences(512, seed=0)
XE, YE = kit.sequences(256, seed=1)


class DeepTanh(nn.Cell):
    def __init__(self, features=12 * 8, hidden=64, depth=8, classes=4):
        super().__init__()
        layers = [nn.Flatten()]
        width = features
        for _ in range(depth):
            layers += [nn.Dense(width, hidden, weight_init=Normal(0.01)), nn.Tanh()]
            width = hidden
        layers.append(nn.Dense(width, classes, weight_init=Normal(0.01)))
        self.net = nn.SequentialCell(layers)

    def construct(self, x):
        return self.net(x)


def train(callbacks):
    net = DeepTanh()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] < 0.5, outcome.metrics
