"""Fault: a residual net defines its blocks but `construct` forgets to call them (stem -> pool -> head)."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("self.blocks built but never called in construct: the residual blocks get no gradient",
                  expect={"MSD110"}, accept={"MSD207", "MSD209"}, arch="residual", data="images",
                  category="frozen-shared")

X, Y = kit.images(512, seed=0, noise=1.0)


class ResNet(nn.Cell):
    def __init__(self, classes=4, width=8, blocks=2):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(1, width, 3, pad_mode="same", has_bias=False),
                                      nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.SequentialCell([kit.ResidualBlock(width) for _ in range(blocks)])
        self.pool = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(width, classes)

    def construct(self, x):
        x = self.stem(x)
        return self.fc(self.pool(x, (2, 3)))


def train(callbacks):
    net = ResNet()
    initial = net.blocks[0].conv1.weight.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 2, callbacks)
    outcome.extra["block_initial"] = initial
    return outcome


def effect(outcome):
    now = outcome.network.blocks[0].conv1.weight.asnumpy()
    assert np.array_equal(now, outcome.extra["block_initial"]), "the residual blocks trained"
