"""Healthy: images stored NHWC (as exported from a TF/PIL pipeline), transposed to NCHW inside the network."""
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: NHWC input transposed to NCHW correctly", expect=(), arch="cnn", data="images",
                  category="healthy")

X, Y = kit.images(1024, seed=0, noise=2.0)
XE, YE = kit.images(256, seed=1, noise=2.0)
X, XE = X.transpose(0, 2, 3, 1), XE.transpose(0, 2, 3, 1)  # the files hold NHWC


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.cnn = kit.CNN()

    def construct(self, x):
        return self.cnn(ops.transpose(x, (0, 3, 1, 2)))


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
