"""Fault: an auxiliary classifier is computed in construct but its output is never returned, so it never reaches the loss."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

# MSD209: the auxiliary head's weights get a zero gradient and never move.
FAULT = kit.Fault("aux = self.aux_head(h) computed, then `return self.head(h)`: the auxiliary head is on no path "
                  "to the loss", expect={"MSD110"}, accept={"MSD207", "MSD209"}, arch="cnn", data="images",
                  category="frozen-shared", fast=True)

X, Y = kit.images(256, seed=0, noise=1.0)


class AuxCNN(nn.Cell):
    def __init__(self, classes=4, width=8):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(1, width, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
                                      nn.Flatten())
        self.aux_head = nn.Dense(width * 64, classes)      # deep supervision, summed into the loss "later"
        self.head = nn.Dense(width * 64, classes)

    def construct(self, x):
        h = self.stem(x)
        aux = self.aux_head(h)  # noqa: F841 - the fault: computed, then dropped
        return self.head(h)


def train(callbacks):
    net = AuxCNN()
    initial = net.aux_head.weight.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 2, callbacks)
    outcome.extra["aux_initial"] = initial
    return outcome


def effect(outcome):
    assert np.array_equal(outcome.network.aux_head.weight.asnumpy(), outcome.extra["aux_initial"]), "aux head trained"
