"""Healthy: the kit's two-block CNN on noisy 16x16 template images, Momentum(0.05)."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean image classifier", expect=(), arch="cnn", data="images",
                  category="healthy", fast=True)

X, Y = kit.images(1024, seed=0, noise=2.0)
XE, YE = kit.images(256, seed=1, noise=2.0)


def train(callbacks):
    net = kit.CNN()
    return kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
