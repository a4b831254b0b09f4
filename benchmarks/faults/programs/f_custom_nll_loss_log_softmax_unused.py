"""Fault: a label-smoothing NLL loss cell defines `self.log_softmax` but passes the raw logits to its `nn.NLLLoss`."""
from mindspore import nn

from benchmarks.faults import kit

# MSD110: the unused `self.log_softmax` of the loss cell is the fault itself. MSD201/206/211/215/216 as for any
# NLLLoss on raw logits: the loss is -logit[y], the head's weights and logits grow without bound until they overflow.
FAULT = kit.Fault("custom label-smoothing loss: nll(logits) where nll(log_softmax(logits)) was meant",
                  expect={"MSD107"}, accept={"MSD110", "MSD201", "MSD206", "MSD211", "MSD215", "MSD216"},
                  arch="cnn", data="images", category="loss-wiring")

X, Y = kit.images(384, seed=0, noise=1.0)


class SmoothedNLL(nn.Cell):
    def __init__(self, smoothing=0.1):
        super().__init__()
        self.log_softmax = nn.LogSoftmax(axis=-1)
        self.nll = nn.NLLLoss()
        self.smoothing = smoothing

    def construct(self, logits, labels):
        log_probs = logits                                  # meant: self.log_softmax(logits)
        smooth = -log_probs.mean(axis=-1).mean()
        return (1.0 - self.smoothing) * self.nll(log_probs, labels) + self.smoothing * smooth


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, SmoothedNLL(), kit.momentum(net, 0.01), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    # a real negative log-likelihood is >= 0; this one runs off to large negative values
    assert outcome.mean_loss(last=5) < -1.0, outcome.losses[-5:]
