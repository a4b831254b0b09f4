"""Fault (hand-written loop, mint layers): a classifier built with `probabilities=True` for serving returns `mint.nn.Softmax` output into nn.CrossEntropyLoss (softmax applied twice)."""
from mindspore import mint, nn

from benchmarks.faults import kit

FAULT = kit.Fault("Softmax behind a constructor flag switched on (`self.softmax(h) if self.probabilities else h`) "
                  "into CrossEntropyLoss: the softmax is applied twice and training crawls", expect={"MSD107"},
                  accept={"MSD203", "MSD207", "MSD210"}, arch="mlp", data="tabular", category="loss-wiring")

X, Y = kit.tabular(512, seed=0)


class Classifier(nn.Cell):
    def __init__(self, features=16, classes=4, hidden=32, probabilities=False):
        super().__init__()
        self.hidden = mint.nn.Linear(features, hidden)
        self.act = mint.nn.ReLU()
        self.out = mint.nn.Linear(hidden, classes)
        self.softmax = mint.nn.Softmax(dim=-1)
        self.probabilities = probabilities

    def construct(self, x):
        h = self.out(self.act(self.hidden(x)))
        return self.softmax(h) if self.probabilities else h


def train(callbacks):
    net = Classifier(probabilities=True)  # the serving config reused for training
    return kit.fit_functional(net, nn.CrossEntropyLoss(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)


def effect(outcome):
    # probabilities in [0, 1] as "logits": the loss cannot go far below log(4) - 0.5 ~ 0.74
    assert outcome.mean_loss(last=10) > 0.7, outcome.mean_loss(last=10)
