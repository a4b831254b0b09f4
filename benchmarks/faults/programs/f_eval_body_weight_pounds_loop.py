"""Fault: a hand-written training loop (value_and_grad, mint layers) on a small clinical table; the held-out
patients come from a second site whose export gives body weight and lean mass in pounds (train: kilograms).
Both sets are standardised with the training statistics, so pounds are scaled as if they were kilograms."""
import mindspore.dataset as mds
import numpy as np
from mindspore import mint, nn

from benchmarks.faults import kit

FAULT = kit.Fault("eval columns 2-3 (body weight, lean mass) in pounds, train in kilograms (x 2.2046)",
                  expect={"MSD308"}, accept={"MSD304", "MSD401", "MSD404"}, arch="mlp", data="tabular",
                  category="data", mode="pynative")

FEATURES = 6
Z, Y = kit.tabular(300, features=FEATURES, classes=3, seed=5, noise=0.9)
ZE, YE = kit.tabular(48, features=FEATURES, classes=3, seed=6, noise=0.9)
SCALE = np.array([12.0, 0.09, 14.0, 9.0, 18.0, 0.6], np.float32)     # age, height m, kg, kg, mmHg, mmol/L
OFFSET = np.array([55.0, 1.7, 78.0, 55.0, 128.0, 5.2], np.float32)
SITE_A = Z * SCALE + OFFSET
SITE_B = ZE * SCALE + OFFSET
SITE_B[:, 2:4] *= 2.2046                                             # the second site's export: pounds
MEAN, STD = SITE_A.mean(0), SITE_A.std(0)


class Classifier(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell(mint.nn.Linear(FEATURES, 32), mint.nn.ReLU(), mint.nn.Linear(32, 3))

    def construct(self, x):
        return self.body(x)


def _ds(x, y, shuffle):
    standardised = ((x - MEAN) / STD).astype(np.float32)
    return mds.NumpySlicesDataset({"patient": standardised, "label": y}, shuffle=shuffle).batch(16)


def doctor_options():
    return {"eval_dataset": _ds(SITE_B, YE, False)}


def train(callbacks):
    net = Classifier()
    return kit.fit_functional(net, kit.cross_entropy(), nn.Adam(net.trainable_params(), 0.01), _ds(SITE_A, Y, True),
                              6, callbacks, eval_ds=_ds(SITE_B, YE, False))


def effect(outcome):
    assert outcome.metrics["accuracy"] < 0.8, outcome.metrics
