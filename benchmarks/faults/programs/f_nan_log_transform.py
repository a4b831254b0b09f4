"""Fault: skewed tabular features log-transformed in a .map() although some raw values are 0 (missing), giving -inf."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("np.log applied to raw features that hold zeros (missing values coded as 0): -inf inputs",
                  expect={"MSD301"}, accept={"MSD201", "MSD206"}, arch="mlp", data="tabular", category="data",
                  fast=True)

Z, Y = kit.tabular(1024, seed=0, noise=0.8)
RAW = np.exp(Z)                                            # positive, skewed (amounts, counts)
RAW[kit.rng(3).random(RAW.shape) < 0.02] = 0.0             # ~2 % missing, exported as 0


def train(callbacks):
    ds = mds.NumpySlicesDataset({"x": RAW, "label": Y}, shuffle=True)
    ds = ds.map(lambda x: np.log(x).astype(np.float32), "x").batch(32, drop_remainder=True)
    net = kit.MLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), ds, 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses[-5:]
