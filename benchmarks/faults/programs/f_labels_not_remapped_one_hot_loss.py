"""Fault: 4 classes kept out of 10 without remapping their ids; a custom loss one-hot encodes them to the network's 4 outputs."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("labels {0, 3, 5, 9} for a 4-output net; ops.one_hot(label, 4) turns ids 5 and 9 into all-zero "
                  "rows, so half the samples carry no loss", expect={"MSD306"}, accept={"MSD203"}, arch="mlp",
                  data="tabular", category="data")

KEPT = np.array([0, 3, 5, 9], np.int32)                    # classes kept out of the original 10
X, Y4 = kit.tabular(768, seed=0, noise=1.0)
Y = KEPT[Y4]                                               # meant: Y4 (remapped to 0..3)


class OneHotCrossEntropy(nn.Cell):
    def __init__(self, classes=4):
        super().__init__()
        self.classes = classes

    def construct(self, logits, labels):
        target = ops.one_hot(labels, self.classes, 1.0, 0.0)
        return -(target * ops.log_softmax(logits, axis=-1)).sum(axis=-1).mean()


def train(callbacks):
    net = kit.MLP()
    outcome = kit.fit(net, OneHotCrossEntropy(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)
    outcome.metrics["accuracy"] = kit.accuracy(net, X, Y4)
    return outcome


def effect(outcome):
    # classes 5 and 9 are never learned: at most the samples of the two other classes are right
    assert outcome.metrics["accuracy"] < 0.6, outcome.metrics
