"""Healthy: the CNN trained with Momentum on a cosine-decay learning-rate schedule (0.05 -> 0.001)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: Momentum with a cosine lr schedule", expect=(), arch="cnn", data="images",
                  category="healthy")

X, Y = kit.images(1024, seed=0, noise=2.0)
XE, YE = kit.images(256, seed=1, noise=2.0)
EPOCHS, BATCH = 4, 32


def train(callbacks):
    net = kit.CNN()
    steps_per_epoch = len(X) // BATCH
    lr = nn.cosine_decay_lr(0.001, 0.05, EPOCHS * steps_per_epoch, steps_per_epoch, EPOCHS)
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)
    return kit.fit(net, kit.cross_entropy(), opt, kit.dataset(X, Y, BATCH), EPOCHS, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
