"""Fault (PyNative): the classifier head is swapped for a new number of classes after the optimizer was built."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

# MSD102: the new head is trainable but not held by the optimizer; MSD203/209: it never moves, the loss stays flat.
FAULT = kit.Fault("net.fc = nn.Dense(8, 6) after opt = nn.Momentum(net.trainable_params(), ...): the optimizer "
                  "updates the discarded head, the new one never trains",
                  expect={"MSD103"}, accept={"MSD102", "MSD203", "MSD207", "MSD209"}, arch="residual", data="images",
                  category="optimizer", mode="pynative")

X, Y = kit.images(256, classes=6, seed=0, noise=1.0)


def train(callbacks):
    net = kit.ResNetTiny(classes=4)
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    net.fc = nn.Dense(8, 6)                                 # the dataset has 6 classes, not 4
    initial = net.fc.weight.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), optimizer, kit.dataset(X, Y), 2, callbacks)
    outcome.extra["head_initial"] = initial
    return outcome


def effect(outcome):
    assert np.array_equal(outcome.network.fc.weight.asnumpy(), outcome.extra["head_initial"]), "the new head trained"
