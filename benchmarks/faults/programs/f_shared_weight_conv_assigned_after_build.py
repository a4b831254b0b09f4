"""Fault: after building a CNN, the training script "initialises conv3 like conv2" with
`net.conv3.weight = net.conv2.weight` (outside the class): the two Conv2d(16, 16, 3) share one kernel."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("`net.conv3.weight = net.conv2.weight` in the training script shares the kernel of two "
                  "Conv2d(16, 16, 3) where a copy of the values was meant", expect={"MSD101"}, arch="cnn",
                  data="images", category="frozen-shared")

X, Y = kit.images(512, seed=2)


class ThreeConvNet(nn.Cell):
    def __init__(self, classes=4, width=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, pad_mode="same")
        self.conv2 = nn.Conv2d(width, width, 3, pad_mode="same")
        self.conv3 = nn.Conv2d(width, width, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(width * 4 * 4, classes)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.relu(self.conv3(x))
        return self.fc(self.flatten(x))


def build():
    net = ThreeConvNet()
    net.conv3.weight = net.conv2.weight  # start conv3 from conv2's init
    return net


def train(callbacks):
    net = build()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, 0.02), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    net = outcome.network
    assert np.array_equal(net.conv2.weight.asnumpy(), net.conv3.weight.asnumpy()), "conv2 and conv3 trained apart"
