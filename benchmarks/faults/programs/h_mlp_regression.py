"""Healthy: an MLP regressor (MSELoss) on a smooth noisy target, Adam(1e-3), judged by MAE."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean regression", expect=(), arch="mlp", data="regression", category="healthy",
                  fast=True)

X, Y = kit.regression(1024, seed=0)
XE, YE = kit.regression(256, seed=1)


def train(callbacks):
    net = kit.MLP(features=8, classes=1)
    return kit.fit(net, nn.MSELoss(), kit.adam(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False), metric="mae")


def effect(outcome):
    baseline = float(np.abs(YE - Y.mean()).mean())  # predict the training mean
    assert outcome.metrics["mae"] < 0.5 * baseline, (outcome.metrics, baseline)
