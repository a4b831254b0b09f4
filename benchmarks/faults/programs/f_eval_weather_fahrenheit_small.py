"""Fault: a small weather-station table (240 train / 60 eval days) is standardised with the training statistics,
but the eval export has its two air-temperature columns in °F; the temperatures vary widely over the year
(std ~25 °C around 0 °C), so the eval columns move by only ~1.3 train stds, with a 1.8x wider spread: too
little for a mean-shift test on 60 samples, plain for one that checks location and scale together."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("eval air-temperature columns 0-1 exported in Fahrenheit (F = 1.8 C + 32), train and scaler in Celsius",
                  expect={"MSD308"}, accept={"MSD401", "MSD404"}, arch="mlp", data="tabular", category="data")

FEATURES = 8


def _days(n, seed):
    """The weather class is read from the two air temperatures; the other six columns add little."""
    temperatures, y = kit.tabular(n, features=2, seed=seed, noise=0.4)
    others = kit.rng(seed + 10).standard_normal((n, FEATURES - 2)).astype(np.float32)
    return np.concatenate([temperatures, others], 1), y


Z, Y = _days(240, 3)
ZE, YE = _days(60, 4)
UNITS_SCALE = np.array([25.0, 24.0, 8.0, 30.0, 1.0, 0.2, 12.0, 5.0], np.float32)   # °C, °C, %, hPa-1000, ...
UNITS_OFFSET = np.array([-1.0, 0.0, 70.0, 13.0, 3.0, 0.5, 40.0, 10.0], np.float32)
RECORDED = Z * UNITS_SCALE + UNITS_OFFSET
RECORDED_EVAL = ZE * UNITS_SCALE + UNITS_OFFSET
RECORDED_EVAL[:, :2] = RECORDED_EVAL[:, :2] * 1.8 + 32                             # the eval export: °F
MEAN, STD = RECORDED.mean(0), RECORDED.std(0)


def _standardise(x):
    return ((x - MEAN) / STD).astype(np.float32)


def _ds(x, y, shuffle):
    return mds.NumpySlicesDataset({"reading": x, "label": y}, shuffle=shuffle).map(_standardise, "reading").batch(20)


def doctor_options():
    return {"eval_dataset": _ds(RECORDED_EVAL, YE, False)}


def train(callbacks):
    net = kit.MLP(features=FEATURES)
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, 0.02), _ds(RECORDED, Y, True), 4, callbacks,
                   eval_ds=_ds(RECORDED_EVAL, YE, False))


def effect(outcome):
    # the same eval days in °C are classified far better
    assert outcome.metrics["accuracy"] < 0.8, outcome.metrics
