"""Healthy: ResNetTiny (BatchNorm) with Adam, run in PyNative mode."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean residual net in PyNative mode", expect=(), arch="residual", data="images",
                  category="healthy", mode="pynative")

X, Y = kit.images(512, size=8, seed=0, noise=0.8)
XE, YE = kit.images(256, size=8, seed=1, noise=0.8)


def train(callbacks):
    net = kit.ResNetTiny()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net, lr=3e-3), kit.dataset(X, Y), 3, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
