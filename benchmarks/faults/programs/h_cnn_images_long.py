"""Healthy: a longer run (320 steps) of the CNN with Adam on 2048 noisy images, so every probe rule sees many probes."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean CNN over 320 steps", expect=(), arch="cnn", data="images", category="healthy")

X, Y = kit.images(2048, seed=0, noise=2.0)
XE, YE = kit.images(256, seed=1, noise=2.0)


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net), kit.dataset(X, Y), 5, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
