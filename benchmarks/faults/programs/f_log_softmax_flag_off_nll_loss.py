"""Fault: a tabular classifier applies its LogSoftmax only when `log_probs=True`; built with the default (False) and trained with nn.NLLLoss on raw logits."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("LogSoftmax behind a constructor flag left off (`if self.log_probs: x = self.log_softmax(x)`), "
                  "trained with NLLLoss: the loss is -logit[y], unbounded below", expect={"MSD107"},
                  accept={"MSD202", "MSD208", "MSD211", "MSD215", "MSD216"}, arch="mlp", data="tabular",
                  category="loss-wiring")

X, Y = kit.tabular(512, seed=0)


class Classifier(nn.Cell):
    def __init__(self, features=16, classes=4, hidden=32, log_probs=False):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, classes))
        self.log_softmax = nn.LogSoftmax(axis=-1)
        self.log_probs = log_probs

    def construct(self, x):
        x = self.body(x)
        if self.log_probs:
            x = self.log_softmax(x)
        return x


def train(callbacks):
    net = Classifier()
    return kit.fit(net, nn.NLLLoss(), kit.adam(net, lr=5e-3), kit.dataset(X, Y), 3, callbacks)


def effect(outcome):
    # a real negative log-likelihood is >= 0; on raw logits it runs off to large negative values
    assert outcome.mean_loss(last=5) < -1.0, outcome.losses[-5:]
