"""Fault: house prices regressed in raw dollars (mean ≈ 300k) with MSE and Adam(1e-3); the target is never scaled."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("regression target in dollars (1e5 scale) with default-sized outputs and lr: cannot fit",
                  expect={"MSD403"}, accept={"MSD203", "MSD215", "MSD402", "MSD404"}, arch="mlp",
                  data="regression", category="data", sanity=True)

X, T = kit.regression(1024, seed=0)
PRICE = (300_000 + 80_000 * T).astype(np.float32)          # meant (PRICE - mean) / std, or log(PRICE)


def dataset():
    return mds.NumpySlicesDataset({"x": X, "price": PRICE}, shuffle=True).batch(32, drop_remainder=True)


def build():
    net = kit.MLP(features=8, classes=1, hidden=64)
    return net, nn.MSELoss(), kit.adam(net, 1e-3)


def train(callbacks):
    net, loss, opt = build()
    return kit.fit(net, loss, opt, dataset(), 3, callbacks)


def effect(outcome):
    # still worse than predicting the mean price (MSE = var) after 96 steps; scaled targets reach ~2 % of var
    assert outcome.mean_loss(last=10) > np.var(PRICE), (outcome.mean_loss(last=10), float(np.var(PRICE)))
