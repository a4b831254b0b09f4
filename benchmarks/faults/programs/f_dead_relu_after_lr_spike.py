"""Fault: a CNN trained with Momentum(lr=0.8): the first large updates push the conv ReLUs negative for good."""
from benchmarks.faults import kit

FAULT = kit.Fault("learning_rate=0.8 where 0.05 was meant: ReLUs die in the first steps", expect={"MSD212"},
                  accept={"MSD202", "MSD203", "MSD204", "MSD207", "MSD208", "MSD209", "MSD211"},
                  arch="cnn", data="images", category="learning-rate")

X, Y = kit.images(512, seed=0, noise=1.0)
XE, YE = kit.images(256, seed=1, noise=1.0)


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.8), kit.dataset(X, Y), 7, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] < 0.5, outcome.metrics
