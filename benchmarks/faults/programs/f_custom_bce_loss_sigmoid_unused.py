"""Fault: a hand-written binary cross-entropy loss cell defines `self.sigmoid` but never applies it: it takes the log of the raw logits."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

# MSD110 is accepted: the unused `self.sigmoid` of the loss cell is that very fault, seen from the graph;
# MSD201/206: the log of a negative logit is NaN from the first step.
FAULT = kit.Fault("custom BCE loss: log(logits + eps) where log(sigmoid(logits) + eps) was meant",
                  expect={"MSD107"}, accept={"MSD110", "MSD201", "MSD206"}, arch="mlp", data="tabular",
                  category="loss-wiring")

X, labels = kit.tabular(1024, classes=2, seed=0, noise=1.0)
Y = labels.astype(np.float32).reshape(-1, 1)


class StableBCE(nn.Cell):
    """BCE with an epsilon inside the logs "for stability"."""

    def __init__(self, eps=1e-6):
        super().__init__()
        self.sigmoid = nn.Sigmoid()
        self.eps = eps

    def construct(self, logits, target):
        p = logits                                          # meant: self.sigmoid(logits)
        return -(target * ops.log(p + self.eps) + (1.0 - target) * ops.log(1.0 - p + self.eps)).mean()


def train(callbacks):
    net = kit.MLP(classes=1)
    outcome = kit.fit(net, StableBCE(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)
    return outcome


def effect(outcome):
    # any logit outside (0, 1) makes a log argument negative: NaN on the first step
    assert outcome.nonfinite_step == 1, outcome.losses[:3]
