"""Fault: the network cell is re-run after the optimizer was built: the optimizer updates the old CNN's parameters."""
from benchmarks.faults import kit

FAULT = kit.Fault("net = CNN() re-created after building the optimizer, which still holds the first instance",
                  expect={"MSD103"}, accept={"MSD203", "MSD207", "MSD209"}, arch="cnn", data="images", category="optimizer",
                  fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)


def train(callbacks):
    net = kit.CNN()
    optimizer = kit.momentum(net)
    net = kit.CNN()  # notebook cell re-run: a fresh network, the optimizer still points at the old one
    return kit.fit(net, kit.cross_entropy(), optimizer, kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=10) > 0.95 * outcome.mean_loss(first=10), (outcome.losses[:3], outcome.losses[-3:])
