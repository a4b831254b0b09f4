"""Healthy: an LSTM classifier on noisy sinusoid sequences, Adam(5e-3)."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean sequence classifier", expect=(), arch="lstm", data="sequences",
                  category="healthy")

X, Y = kit.sequences(1024, seed=0, noise=2.0)
XE, YE = kit.sequences(256, seed=1, noise=2.0)


def train(callbacks):
    net = kit.LSTMClassifier()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net, lr=5e-3), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
