"""Healthy: a CNN that the user first checks with mindspore_doctor.sanity, then trains with Adam."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean CNN, sanity-checked before training", expect=(), arch="cnn", data="images",
                  category="healthy", sanity=True)

X, Y = kit.images(1024, seed=0, noise=2.0)
XE, YE = kit.images(256, seed=1, noise=2.0)


def build():
    net = kit.CNN()
    return net, kit.cross_entropy(), kit.adam(net, lr=2e-3)


def dataset():
    return kit.dataset(X, Y)


def train(callbacks):
    net, loss_fn, opt = build()
    return kit.fit(net, loss_fn, opt, dataset(), 4, callbacks, eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
