"""Fault (PyNative): a CNN's conv layers start with bias -4 ("sparse feature maps"), so every ReLU after them is dead."""
from mindspore import nn
from mindspore.common.initializer import Constant

from benchmarks.faults import kit

FAULT = kit.Fault("nn.Conv2d(..., has_bias=True, bias_init=Constant(-4.0)) before ReLU on standardised images",
                  expect={"MSD212"}, accept={"MSD203", "MSD207", "MSD209"}, arch="cnn", data="images",
                  category="initialisation", mode="pynative")

X, Y = kit.images(512, seed=0, noise=1.0)
XE, YE = kit.images(128, seed=1, noise=1.0)


class SparseCNN(nn.Cell):
    def __init__(self, classes=4, width=8):
        super().__init__()
        self.features = nn.SequentialCell(
            nn.Conv2d(1, width, 3, pad_mode="same", has_bias=True, bias_init=Constant(-4.0)), nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(width, 2 * width, 3, pad_mode="same", has_bias=True, bias_init=Constant(-4.0)), nn.ReLU(),
            nn.MaxPool2d(2, 2), nn.Flatten())
        self.fc = nn.Dense(2 * width * 16, classes)

    def construct(self, x):
        return self.fc(self.features(x))


def train(callbacks):
    net = SparseCNN()
    return kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the same CNN with zero conv biases reaches > 0.9
    assert outcome.metrics["accuracy"] < 0.5, outcome.metrics
