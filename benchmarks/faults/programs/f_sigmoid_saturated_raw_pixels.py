"""Fault: 0-255 pixel values fed (not divided by 255) into a flatten + Dense + Sigmoid image classifier."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("raw uint8-range pixels into a sigmoid MLP: the hidden sigmoids saturate", expect={"MSD213"},
                  accept={"MSD203", "MSD207", "MSD209", "MSD304"}, arch="mlp", data="images",
                  category="vanishing-exploding", fast=True)

X, Y = kit.images(512, seed=0)
XE, YE = kit.images(256, seed=1)
PIXELS, PIXELS_EVAL = (np.clip(a * 64 + 128, 0, 255).round().astype(np.float32) for a in (X, XE))


class PixelMLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(256, 64)
        self.sigmoid = nn.Sigmoid()
        self.head = nn.Dense(64, 4)

    def construct(self, x):
        return self.head(self.sigmoid(self.fc(self.flatten(x))))


def train(callbacks):
    net = PixelMLP()
    return kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(PIXELS, Y), 7, callbacks,
                   eval_ds=kit.dataset(PIXELS_EVAL, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] < 0.6, outcome.metrics
