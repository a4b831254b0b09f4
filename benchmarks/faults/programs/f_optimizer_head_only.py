"""Fault: the optimizer is built from `net.fc.trainable_params()` only, so the LSTM of the classifier never updates."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("optimizer given net.fc.trainable_params() instead of net.trainable_params(): LSTM never updated",
                  expect={"MSD102"}, arch="lstm", data="sequences", category="frozen-shared")

X, Y = kit.sequences(512, seed=0, noise=1.0)


def train(callbacks):
    net = kit.LSTMClassifier()
    optimizer = nn.Adam(net.fc.trainable_params(), learning_rate=3e-3)
    initial = net.lstm.trainable_params()[0].asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), optimizer, kit.dataset(X, Y), 2, callbacks)
    outcome.extra["lstm_initial"] = initial
    return outcome


def effect(outcome):
    now = outcome.network.lstm.trainable_params()[0].asnumpy()
    assert np.array_equal(now, outcome.extra["lstm_initial"]), "the LSTM weights changed"
