"""Fault: a CNN ends in nn.Softmax and is trained with SoftmaxCrossEntropyWithLogits (softmax applied twice)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("network returns Softmax probabilities into SoftmaxCrossEntropyWithLogits (double softmax)",
                  expect={"MSD107"}, accept={"MSD203"}, arch="cnn", data="images", category="loss-wiring", fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)


class Net(nn.Cell):
    def __init__(self, classes=4, width=8):
        super().__init__()
        self.features = nn.SequentialCell(
            nn.Conv2d(1, width, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(width, 2 * width, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten())
        self.fc = nn.Dense(2 * width * 16, classes)
        self.softmax = nn.Softmax()

    def construct(self, x):
        return self.softmax(self.fc(self.features(x)))


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)


def effect(outcome):
    # probabilities in [0, 1] as "logits": the loss cannot go below ~0.74 for 4 classes, training crawls
    assert outcome.mean_loss(last=10) > 0.7, outcome.mean_loss(last=10)
