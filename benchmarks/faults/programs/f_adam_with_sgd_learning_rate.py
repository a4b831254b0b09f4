"""Fault: a CNN trained with Adam at learning_rate=0.1 (an SGD-sized rate)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("Adam(learning_rate=0.1): an SGD habit, 100x the usual Adam rate",
                  expect={"MSD111"}, accept={"MSD202", "MSD203", "MSD204", "MSD211"}, arch="cnn",
                  data="images", category="learning-rate")

X, Y = kit.images(512, seed=0, noise=1.0)
XE, YE = kit.images(256, seed=1, noise=1.0)


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), nn.Adam(net.trainable_params(), learning_rate=0.1),
                   kit.dataset(X, Y), 2, callbacks, eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] < 0.6, outcome.metrics
