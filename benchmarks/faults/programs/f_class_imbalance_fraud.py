"""Fault: fraud detection with 1 fraud per 25 transactions, trained with plain unweighted cross-entropy."""
import mindspore as ms
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("25:1 class imbalance, no class weights or re-sampling: the rare class is ignored",
                  expect={"MSD302"}, accept={"MSD307"}, arch="mlp", data="tabular", category="data", fast=True)


def _transactions(n_ok, n_fraud, seed):
    r = kit.rng(seed)
    y = np.r_[np.zeros(n_ok), np.ones(n_fraud)].astype(np.int32)
    r.shuffle(y)
    x = r.standard_normal((len(y), 12)).astype(np.float32)
    x[:, :3] += 0.9 * y[:, None]                           # fraud shifts a few features, with overlap
    return x, y


X, Y = _transactions(1300, 52, 0)
XE, YE = _transactions(200, 200, 1)                        # balanced audit sample


def train(callbacks):
    net = kit.MLP(features=12, classes=2, hidden=32)
    ds = mds.NumpySlicesDataset({"x": X, "label": Y}, shuffle=True).batch(32)
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.02), ds, 3, callbacks)
    pred = net(ms.Tensor(XE)).asnumpy().argmax(-1)
    outcome.metrics["fraud_recall"] = float((pred[YE == 1] == 1).mean())
    return outcome


def effect(outcome):
    # a balanced training set gives fraud recall ≈ 0.8
    assert outcome.metrics["fraud_recall"] < 0.3, outcome.metrics
