"""Fault: the user shuffles the input array and the target array separately, so targets no longer match inputs."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("x and y shuffled with two separate rng.shuffle calls: targets detached from inputs",
                  expect={"MSD404", "MSD402"}, accept={"MSD203"}, arch="lstm", data="sequences", category="data")


def _signals(n, seed):
    """Sensor windows and the oscillation frequency to regress (1..4, standardised)."""
    x, c = kit.sequences(n, seed=seed)
    return x, ((c - 1.5) / 1.118).astype(np.float32)[:, None]


X, Y = _signals(768, 0)
XE, YE = _signals(256, 1)
R = kit.rng(11)
R.shuffle(X)                                               # meant: perm = R.permutation(n); X, Y = X[perm], Y[perm]
R.shuffle(Y)


def _ds(x, y, shuffle):
    return mds.NumpySlicesDataset({"window": x, "freq": y}, shuffle=shuffle).batch(32, drop_remainder=True)


def doctor_options():
    return {"eval_dataset": _ds(XE, YE, False)}


def train(callbacks):
    net = kit.LSTMClassifier(classes=1)
    return kit.fit(net, nn.MSELoss(), kit.adam(net, 3e-3), _ds(X, Y, True), 3, callbacks,
                   eval_ds=_ds(XE, YE, False), metric="mae")


def effect(outcome):
    # correctly paired data gives MAE ≈ 0.1; the mean predictor ≈ 0.9
    assert outcome.metrics["mae"] > 0.8, outcome.metrics
