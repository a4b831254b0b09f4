"""Healthy: the plain MLP tabular classifier, run in PyNative mode."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean MLP in PyNative mode", expect=(), arch="mlp", data="tabular", category="healthy",
                  mode="pynative")

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


def train(callbacks):
    net = kit.MLP()
    return kit.fit_functional(net, kit.cross_entropy(), kit.adam(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
