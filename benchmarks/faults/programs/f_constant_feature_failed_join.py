"""Fault: the most informative column comes from a join that failed (key dtype mismatch) and was filled with 0."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("the key feature is constant (failed join filled with 0): its information is lost",
                  expect={"MSD310"}, accept={"MSD203"}, arch="mlp", data="tabular", category="data")


def _table(n, seed):
    r = kit.rng(seed)
    y = (np.arange(n) % 3).astype(np.int32)
    r.shuffle(y)
    x = r.standard_normal((n, 10)).astype(np.float32)
    x[:, 0] += 2.5 * (y - 1)                               # "income": the feature that separates the classes
    x[:, 1:4] += 0.25 * (y[:, None] - 1)
    return x, y


X, Y = _table(1024, 0)
XE, YE = _table(256, 1)


def _joined(x):
    x = x.copy()
    x[:, 0] = 0.0                                          # df.merge(...).fillna(0): every key missed
    return x


def train(callbacks):
    net = kit.MLP(features=10, classes=3)
    ds = mds.NumpySlicesDataset({"x": _joined(X), "label": Y}, shuffle=True).batch(32)
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), ds, 4, callbacks,
                   eval_ds=mds.NumpySlicesDataset({"x": _joined(XE), "label": YE}, shuffle=False).batch(32))


def effect(outcome):
    # with the real column the same MLP reaches > 0.85
    assert outcome.metrics["accuracy"] < 0.7, outcome.metrics
