"""Healthy: a one-layer Transformer encoder on short token sequences, Adam(1e-3)."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean token classifier", expect=(), arch="transformer", data="tokens",
                  category="healthy")

STEPS = 4
X, Y = kit.tokens(1024, steps=STEPS, seed=0)
XE, YE = kit.tokens(256, steps=STEPS, seed=1)


def train(callbacks):
    net = kit.TransformerClassifier(steps=STEPS)
    return kit.fit_functional(net, kit.cross_entropy(), kit.adam(net, lr=1e-3), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
