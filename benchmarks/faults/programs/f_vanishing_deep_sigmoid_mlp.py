"""Fault: a 10-layer sigmoid MLP on tabular data: the gradient vanishes before it reaches the first layers."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("ten Dense+Sigmoid layers without residuals or normalisation", expect={"MSD207"},
                  accept={"MSD203", "MSD209", "MSD210"}, arch="mlp", data="tabular", category="vanishing-exploding")

X, Y = kit.tabular(512, seed=0)
XE, YE = kit.tabular(256, seed=1)


def train(callbacks):
    net = kit.MLP(hidden=32, depth=10, activation=nn.Sigmoid)
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the 2-layer ReLU twin reaches > 90 %; this one stays near chance (25 %)
    assert outcome.metrics["accuracy"] < 0.5, outcome.metrics
