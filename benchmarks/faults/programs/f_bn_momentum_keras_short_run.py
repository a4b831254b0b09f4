"""Fault: BatchNorm1d(momentum=0.99) ported from Keras as the input-normalising first layer of a 48-step run."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("Keras-style BatchNorm momentum=0.99 on raw features for 3 epochs: moving statistics far from "
                  "the data, eval-mode outputs differ from train-mode ones", expect={"MSD405"},
                  accept={"MSD304", "MSD404"}, arch="mlp", data="tabular", category="mode")

SCALE = np.array([30, 2, 500, 1, 8, 0.5, 120, 3, 40, 1, 10, 2], np.float32)
OFFSET = np.array([600, 50, 20000, 10, 300, 5, 4000, 100, 1000, 30, 500, 80], np.float32)
Z, Y = kit.tabular(512, features=12, seed=0, noise=0.8)
ZE, YE = kit.tabular(256, features=12, seed=1, noise=0.8)


class Net(nn.Cell):
    """BatchNorm first, as the Keras recipe does instead of a separate standardisation step."""

    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(12, momentum=0.99)      # Keras default; too slow to settle in 48 steps
        self.body = kit.MLP(features=12, classes=4, hidden=64)

    def construct(self, x):
        return self.body(self.norm(x))


def _ds(z, y, shuffle):
    return mds.NumpySlicesDataset({"x": z * SCALE + OFFSET, "label": y}, shuffle=shuffle).batch(32,
                                                                                             drop_remainder=True)


def doctor_options():
    return {"eval_dataset": _ds(ZE, YE, False)}


def train(callbacks):
    net = Net()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), _ds(Z, Y, True), 3, callbacks,
                      eval_ds=_ds(ZE, YE, False))
    outcome.metrics["train_mode_accuracy"] = kit.accuracy(net, ZE * SCALE + OFFSET, YE, train_mode=True)
    return outcome


def effect(outcome):
    # the same network is right in train mode and wrong in eval mode
    assert outcome.metrics["train_mode_accuracy"] > 0.85 and outcome.metrics["accuracy"] < 0.5, outcome.metrics
