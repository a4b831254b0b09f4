"""Fault: a hand-written cross-entropy loss cell takes `ops.log` of `ops.softmax` of temperature-sharpened logits: a probability underflows to 0 and log(0) = -inf."""
import math

from mindspore import nn, ops

from benchmarks.faults import kit

# MSD202/208/211: the sharpened logits make the first steps huge before the loss goes non-finite.
FAULT = kit.Fault("loss = -log(softmax(logits / 0.01))[y] written by hand instead of log_softmax: inf once a "
                  "probability underflows", expect={"MSD201", "MSD206"}, accept={"MSD202", "MSD208", "MSD211"},
                  arch="cnn", data="images", category="nan", fast=True)

X, Y = kit.images(256, seed=0, noise=1.0)


class SharpCrossEntropy(nn.Cell):
    def __init__(self, classes=4, temperature=0.01):
        super().__init__()
        self.classes, self.temperature = classes, temperature

    def construct(self, logits, labels):
        probs = ops.softmax(logits / self.temperature, axis=-1)
        picked = (probs * ops.one_hot(labels, self.classes, 1.0, 0.0)).sum(axis=-1)
        return -ops.log(picked).mean()


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, SharpCrossEntropy(), kit.momentum(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, (outcome.losses[:5], math.log(4))
