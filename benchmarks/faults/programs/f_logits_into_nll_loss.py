"""Fault: a Transformer classifier returns raw logits into nn.NLLLoss (log-probabilities expected, LogSoftmax missing)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("NLLLoss on raw logits: the loss is -logit[y], unbounded below (LogSoftmax forgotten)",
                  expect={"MSD107"}, accept={"MSD211", "MSD215", "MSD216"}, arch="transformer", data="tokens",
                  category="loss-wiring")

X, Y = kit.tokens(448, seed=0)


def train(callbacks):
    net = kit.TransformerClassifier()
    return kit.fit(net, nn.NLLLoss(), kit.adam(net), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    # a real negative log-likelihood is >= 0; here it runs off to large negative values
    assert outcome.mean_loss(last=5) < -1.0, outcome.losses[-5:]
