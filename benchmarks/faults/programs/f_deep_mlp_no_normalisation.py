"""Fault: a 12-layer ReLU MLP with no normalisation or skip connections, default init: early layers get no gradient."""
from benchmarks.faults import kit

FAULT = kit.Fault("12 plain Dense+ReLU layers, no BatchNorm/LayerNorm/residuals", expect={"MSD207"},
                  accept={"MSD203", "MSD209", "MSD210", "MSD212"}, arch="mlp", data="tabular", category="vanishing-exploding")

X, Y = kit.tabular(512, features=32, seed=0, noise=1.0)
XE, YE = kit.tabular(256, features=32, seed=1, noise=1.0)


def train(callbacks):
    net = kit.MLP(features=32, hidden=64, depth=12)
    return kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net, lr=0.01), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] < 0.5, outcome.metrics
