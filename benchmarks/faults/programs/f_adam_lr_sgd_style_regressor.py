"""Fault: a 3-layer MLP regressor trained with Adam at learning_rate=0.1, an SGD-style value far too high for Adam."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("Adam(learning_rate=0.1) where 1e-3 was meant", expect={"MSD111", "MSD211"},
                  accept={"MSD202", "MSD203", "MSD204", "MSD208", "MSD212"},
                  arch="mlp", data="regression", category="learning-rate")

X, Y = kit.regression(512, seed=0)
XE, YE = kit.regression(256, seed=1)


def train(callbacks):
    net = kit.MLP(features=8, classes=1, hidden=64, depth=3)
    return kit.fit_functional(net, nn.MSELoss(), kit.adam(net, lr=0.1), kit.dataset(X, Y), 10, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False), metric="mae")


def effect(outcome):
    # the healthy twin (lr=1e-3) ends with an eval MSE of 0.038; this one bounces around more than 1.5x higher
    assert outcome.metrics["loss"] > 0.06, outcome.metrics
