"""Fault: a CNN trained with plain SGD at learning_rate=1e-5, an Adam-style value far too small for SGD."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("SGD(learning_rate=1e-5) where 0.05 was meant", expect={"MSD203", "MSD210"},
                  accept={"MSD111"}, arch="cnn", data="images", category="learning-rate")

X, Y = kit.images(512, seed=0)


def train(callbacks):
    net = kit.CNN()
    return kit.fit_functional(net, kit.cross_entropy(), nn.SGD(net.trainable_params(), learning_rate=1e-5),
                   kit.dataset(X, Y), 10, callbacks)


def effect(outcome):
    # the loss stays at its starting level; with lr=0.05 it falls by more than half in the first epoch
    assert outcome.mean_loss(last=20) > 0.95 * outcome.mean_loss(first=20), outcome.losses[::16]
