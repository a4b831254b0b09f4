"""Fault: samples read class by class from per-class files through a generator function; shuffle=True is ignored."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("GeneratorDataset over a generator function sorted by class: shuffle=True does nothing",
                  expect={"MSD305"}, accept={"MSD202", "MSD203", "MSD204"}, arch="mlp", data="tabular", category="data",
                  fast=True)

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)
ORDER = np.argsort(Y, kind="stable")                       # files class_0.npy ... class_3.npy, read in turn


def rows():
    for i in ORDER:
        yield X[i], Y[i]


def train(callbacks):
    ds = mds.GeneratorDataset(rows, ["features", "label"], shuffle=True).batch(32, drop_remainder=True)
    net = kit.MLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), ds, 2, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False, columns=("features", "label")))


def effect(outcome):
    # the shuffled twin reaches > 0.9; here the last class seen wins
    assert outcome.metrics["accuracy"] < 0.6, outcome.metrics
