"""Healthy: a 4-hidden-layer Tanh MLP (default Dense init) on tabular clusters, Momentum(0.02)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a deeper Tanh MLP", expect=(), arch="mlp", data="tabular", category="healthy")

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


def train(callbacks):
    net = kit.MLP(depth=4, activation=nn.Tanh)
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.02), kit.dataset(X, Y), 5, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
