"""Fault: semi-supervised loss averaged over the labelled samples of a batch; a batch without labels divides 0 by 0."""
import mindspore as ms
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

# MSD307 is accepted: so few labelled samples per class is what makes a batch without labels likely.
FAULT = kit.Fault("masked mean sum(mask*ce)/sum(mask) with no epsilon; 85 % of labels are -1 (unlabelled)",
                  expect={"MSD201", "MSD206"}, accept={"MSD106", "MSD307"}, arch="lstm", data="sequences",
                  category="nan",
                  mode="pynative")

X, Y = kit.sequences(256, seed=0)
Y = np.where(kit.rng(3).random(len(Y)) < 0.85, -1, Y).astype(np.int32)


class LabelledOnlyLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")

    def construct(self, logits, label):
        mask = (label >= 0).astype(ms.float32)
        per_sample = self.ce(logits, ops.maximum(label, 0))
        return (per_sample * mask).sum() / mask.sum()


def train(callbacks):
    net = kit.LSTMClassifier()
    return kit.fit_functional(net, LabelledOnlyLoss(), kit.adam(net), kit.dataset(X, Y, batch=16), 1, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses
