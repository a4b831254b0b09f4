"""Healthy: ResNetTiny (BatchNorm) with Momentum + weight decay, evaluated each epoch by the Doctor on a held-out set."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a clean residual net with BatchNorm and a held-out eval set", expect=(), arch="residual",
                  data="images", category="healthy")

X, Y = kit.images(512, size=8, seed=0, noise=0.7)
XE, YE = kit.images(256, size=8, seed=1, noise=0.7)


def doctor_options():
    return {"eval_dataset": kit.dataset(XE, YE, shuffle=False)}


def train(callbacks):
    net = kit.ResNetTiny()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9, weight_decay=1e-4)
    return kit.fit(net, kit.cross_entropy(), opt, kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
