"""Healthy: 2-rank data-parallel CNN on images: common seed, sharded dataset, averaged gradients."""
from benchmarks.faults import kit
from benchmarks.faults.programs import _dp

FAULT = kit.Fault("nothing: a clean data-parallel image classifier", expect=(), arch="cnn", data="images",
                  category="healthy", launcher="msrun")

X, Y = kit.images(2048, seed=0, noise=2.5)
XE, YE = kit.images(256, seed=1, noise=2.5)


def train(callbacks):
    _dp.setup()
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), _dp.dataset(X, Y, batch=16), 2, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
    assert _dp.rank_spread(_dp.weight_sums(outcome.network)) == 0.0  # the replicas stayed one model
