"""Fault: a wide MLP trained 12 epochs on 256 noisily annotated images, no early stopping: it memorises the noise."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("trained far past the best epoch on a small, noisily labelled set (no early stopping)",
                  expect={"MSD401"}, accept={"MSD307"}, arch="mlp", data="images", category="evaluation")

X, Y = kit.images(256, seed=0, noise=1.5)
_r = kit.rng(2)
Y = np.where(_r.random(256) < 0.3, _r.integers(0, 4, 256), Y).astype(np.int32)   # 30 % careless annotations
XE, YE = kit.images(256, seed=1, noise=1.5)


def _ds(x, y, shuffle):
    return mds.NumpySlicesDataset({"image": x, "label": y}, shuffle=shuffle).batch(32)


def doctor_options():
    return {"eval_dataset": _ds(XE, YE, False)}


def train(callbacks):
    net = nn.SequentialCell(nn.Flatten(), kit.MLP(features=256, hidden=256))
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 3e-3), _ds(X, Y, True), 12, callbacks,
                      eval_ds=_ds(XE, YE, False))
    outcome.metrics["train_accuracy"] = kit.accuracy(net, X, Y)
    return outcome


def effect(outcome):
    # it reproduces the ~22 % wrong training labels, and eval accuracy fell from 1.0 after epoch 1
    assert outcome.metrics["train_accuracy"] > 0.95 and outcome.metrics["accuracy"] < 0.97, outcome.metrics
