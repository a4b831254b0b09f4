"""Fault: a tabular classifier is standardised with the training statistics, but the eval export reports its two temperature columns in °F instead of °C."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

# MSD401: the eval loss, on inputs in the wrong units, sits far above the train loss and stops improving.
FAULT = kit.Fault("eval columns 0-1 in Fahrenheit (F = 1.8 C + 32) while the train set and the scaler use Celsius",
                  expect={"MSD308"}, accept={"MSD304", "MSD401", "MSD404"}, arch="mlp", data="tabular", category="data")

Z, Y = kit.tabular(768, seed=0, noise=1.0)
ZE, YE = kit.tabular(256, seed=1, noise=1.0)
SCALE = np.array([5.0, 3.0] + [1.0] * 14, np.float32)
OFFSET = np.array([20.0, 15.0] + [0.0] * 14, np.float32)
RAW, RAW_EVAL = Z * SCALE + OFFSET, ZE * SCALE + OFFSET    # what the sensors record, °C
RAW_EVAL[:, :2] = RAW_EVAL[:, :2] * 1.8 + 32               # the eval export is in °F
MEAN, STD = RAW.mean(0), RAW.std(0)


def _standardise(x):
    return ((x - MEAN) / STD).astype(np.float32)


def _ds(x, y, shuffle):
    ds = mds.NumpySlicesDataset({"reading": x, "label": y}, shuffle=shuffle)
    return ds.map(_standardise, "reading").batch(32)


def doctor_options():
    return {"eval_dataset": _ds(RAW_EVAL, YE, False)}


def train(callbacks):
    net = kit.MLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, 0.02), _ds(RAW, Y, True), 3, callbacks,
                   eval_ds=_ds(RAW_EVAL, YE, False))


def effect(outcome):
    # the same eval set in °C reaches 1.0
    assert outcome.metrics["accuracy"] < 0.75, outcome.metrics
