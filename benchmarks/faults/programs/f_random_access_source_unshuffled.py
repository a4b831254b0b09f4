"""Fault: a random-access dataset class reads rows class by class from sorted files, and the GeneratorDataset is built with shuffle=False."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("GeneratorDataset(SortedRows(), shuffle=False) over a source sorted by label: every batch holds "
                  "one class", expect={"MSD305"}, accept={"MSD202", "MSD203", "MSD204"}, arch="mlp", data="tabular",
                  category="data", fast=True)

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


class SortedRows:
    """Rows stored as class_0.npy ... class_3.npy, concatenated in that order."""

    def __init__(self):
        order = np.argsort(Y, kind="stable")
        self.x, self.y = X[order], Y[order]

    def __getitem__(self, index):
        return self.x[index], self.y[index]

    def __len__(self):
        return len(self.y)


def train(callbacks):
    ds = mds.GeneratorDataset(SortedRows(), ["features", "label"], shuffle=False).batch(32, drop_remainder=True)
    net = kit.MLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), ds, 2, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False, columns=("features", "label")))


def effect(outcome):
    # the shuffle=True twin reaches 0.88; here the last class seen wins
    assert outcome.metrics["accuracy"] < 0.6, outcome.metrics
