"""Fault: missing sensor readings exported as the sentinel -9999 and fed to a regressor as if they were values."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("missing readings encoded as -9999 (2 % of one feature) left in the training inputs",
                  expect={"MSD303"}, accept={"MSD202", "MSD203", "MSD204", "MSD304"}, arch="mlp", data="regression",
                  category="data", fast=True)

X, Y = kit.regression(1024, seed=0)
XE, YE = kit.regression(256, seed=1)


def _exported(x, seed):
    x = x.copy()
    x[kit.rng(seed).random(len(x)) < 0.02, 2] = -9999.0  # the logger's "no reading" value
    return x


def train(callbacks):
    net = kit.MLP(features=8, classes=1)
    return kit.fit(net, nn.MSELoss(), kit.adam(net), kit.dataset(_exported(X, 3), Y), 4, callbacks,
                   eval_ds=kit.dataset(_exported(XE, 4), YE, shuffle=False), metric="mae")


def effect(outcome):
    # the same MLP on the clean column is far better than predicting the mean (h_mlp_regression); here the rows
    # with a missing reading get wild predictions, and the eval MSE is worse than the mean's
    baseline_mse = float(((YE - Y.mean()) ** 2).mean())
    assert outcome.metrics["loss"] > baseline_mse, (outcome.metrics, baseline_mse)
