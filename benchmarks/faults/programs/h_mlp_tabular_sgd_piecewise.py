"""Healthy: plain SGD with a piecewise-constant lr (0.2 -> 0.05 -> 0.01) and weight decay on an MLP."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: SGD with a step lr schedule and weight decay", expect=(), arch="mlp", data="tabular",
                  category="healthy")

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


def train(callbacks):
    net = kit.MLP()
    lr = nn.piecewise_constant_lr([64, 128, 160], [0.2, 0.05, 0.01])
    opt = nn.SGD(net.trainable_params(), learning_rate=lr, weight_decay=5e-4)
    return kit.fit(net, kit.cross_entropy(), opt, kit.dataset(X, Y), 5, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
