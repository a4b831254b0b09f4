"""Healthy: an MLP that the user first checks with mindspore_doctor.sanity, then trains with Adam."""
from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean MLP, sanity-checked before training", expect=(), arch="mlp", data="tabular",
                  category="healthy", sanity=True)

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


def build():
    net = kit.MLP()
    return net, kit.cross_entropy(), kit.adam(net, lr=3e-3)


def dataset():
    return kit.dataset(X, Y)


def train(callbacks):
    net, loss_fn, opt = build()
    return kit.fit(net, loss_fn, opt, dataset(), 4, callbacks, eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
