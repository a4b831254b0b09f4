"""Healthy: a 2-layer ReLU MLP on standardised tabular clusters, Momentum(0.05)."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean tabular classifier", expect=(), arch="mlp", data="tabular",
                  category="healthy", fast=True)

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


def train(callbacks):
    net = kit.MLP()
    return kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
