"""Fault: house-price regression on raw features (m², year built, metres to centre, rooms) with no standardisation."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("features on scales from 1 to 10^4 fed unstandardised to an MLP regressor", expect={"MSD304"},
                  accept={"MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD208", "MSD211", "MSD216"},
                  arch="mlp", data="regression", category="data")

SCALE = np.array([40.0, 15.0, 3000.0, 1.2, 20.0, 0.1, 800.0, 2.0], np.float32)
OFFSET = np.array([110.0, 1985.0, 6000.0, 3.0, 50.0, 0.5, 2500.0, 4.0], np.float32)
Z, Y = kit.regression(1024, seed=0)
ZE, YE = kit.regression(256, seed=1)


def _ds(z, y, shuffle):
    return mds.NumpySlicesDataset({"x": z * SCALE + OFFSET, "price": y}, shuffle=shuffle).batch(32)


def train(callbacks):
    net = kit.MLP(features=8, classes=1, hidden=32)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    return kit.fit(net, nn.MSELoss(), opt, _ds(Z, Y, True), 4, callbacks, eval_ds=_ds(ZE, YE, False), metric="mae")


def effect(outcome):
    # the standardised twin reaches MAE ≈ 0.1; predicting the mean gives ≈ 0.6
    assert outcome.nonfinite_step is not None or outcome.metrics["mae"] > 0.4, outcome.metrics
