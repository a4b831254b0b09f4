"""Fault: an `ops.stop_gradient` left in construct from a linear-probe experiment: the conv backbone gets no gradient."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("features = ops.stop_gradient(self.backbone(x)) left in: the backbone never trains although the "
                  "optimizer holds it", expect={"MSD209"}, accept={"MSD203", "MSD207", "MSD210"}, arch="cnn",
                  data="images", category="frozen-shared", fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)


class ProbeCNN(nn.Cell):
    def __init__(self, classes=4, width=8):
        super().__init__()
        self.backbone = nn.SequentialCell(nn.Conv2d(1, width, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
                                          nn.Conv2d(width, width, 3, pad_mode="same"), nn.ReLU(),
                                          nn.MaxPool2d(4, 4), nn.Flatten())
        self.head = nn.Dense(width * 4, classes)

    def construct(self, x):
        features = ops.stop_gradient(self.backbone(x))     # linear-probe leftover
        return self.head(features)


def train(callbacks):
    net = ProbeCNN()
    initial = net.backbone[0].weight.asnumpy().copy()
    outcome = kit.fit_functional(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks)
    outcome.extra["backbone_initial"] = initial
    return outcome


def effect(outcome):
    assert np.array_equal(outcome.network.backbone[0].weight.asnumpy(), outcome.extra["backbone_initial"]), "trained"
