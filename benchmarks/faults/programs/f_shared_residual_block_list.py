"""Fault: `nn.SequentialCell([ResidualBlock(8)] * 3)` repeats ONE block object, so the three blocks share weights."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("[ResidualBlock(8)] * 3 builds one block registered three times (shared weights)",
                  expect={"MSD101"}, arch="residual", data="images", category="frozen-shared", fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)


class ResNet(nn.Cell):
    def __init__(self, classes=4, width=8, blocks=3):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(1, width, 3, pad_mode="same", has_bias=False),
                                      nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.SequentialCell([kit.ResidualBlock(width)] * blocks)
        self.pool = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(width, classes)

    def construct(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(self.pool(x, (2, 3)))


def train(callbacks):
    net = ResNet()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    blocks = outcome.network.blocks
    first, last = blocks[0].conv1.weight.asnumpy(), blocks[2].conv1.weight.asnumpy()
    assert np.array_equal(first, last), "blocks 0 and 2 have different weights: they are not shared"
