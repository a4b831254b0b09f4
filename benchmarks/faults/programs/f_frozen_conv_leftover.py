"""Fault: a CNN whose conv layers were left frozen (`requires_grad = False`) from an earlier fine-tuning experiment."""
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("conv1/conv2 left at requires_grad=False: the feature extractor never trains",
                  expect={"MSD102"}, arch="cnn", data="images", category="frozen-shared", fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)


def train(callbacks):
    net = kit.CNN()
    for param in net.conv1.get_parameters():
        param.requires_grad = False
    for param in net.conv2.get_parameters():
        param.requires_grad = False
    initial = net.conv1.weight.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 2, callbacks)
    outcome.extra["conv1_initial"] = initial
    return outcome


def effect(outcome):
    assert np.array_equal(outcome.network.conv1.weight.asnumpy(), outcome.extra["conv1_initial"]), "conv1 trained"
