"""Fault: Momentum with learning_rate=5.0 (a decimal point off) on a CNN."""
from benchmarks.faults import kit

FAULT = kit.Fault("learning_rate=5.0 where 0.05 was meant", expect={"MSD111"},
                  accept={"MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD208", "MSD211", "MSD212", "MSD216"},
                  arch="cnn", data="images", category="learning-rate", fast=True)

X, Y = kit.images(512, seed=0)


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=5.0), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None or outcome.mean_loss(last=5) > outcome.first_loss, outcome.losses[-5:]
