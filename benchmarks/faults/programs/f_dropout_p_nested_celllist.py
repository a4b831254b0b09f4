"""Fault: an MLP's hidden blocks, built in a CellList, each end in `nn.Dropout(p=0.75)` (a keep probability written as p)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nn.Dropout(p=0.75) inside every block of a CellList: 75 % of each block's activations dropped",
                  expect={"MSD104"}, accept={"MSD203"}, arch="mlp", data="tabular", category="mode",
                  deterministic=False)  # CPU Dropout

X, Y = kit.tabular(1024, seed=0, noise=1.0)
XE, YE = kit.tabular(512, seed=1, noise=1.0)


class Block(nn.Cell):
    def __init__(self, width, keep):
        super().__init__()
        self.ff = nn.SequentialCell(nn.Dense(width, width), nn.ReLU(), nn.Dropout(p=keep))

    def construct(self, x):
        return self.ff(x)


class BlockMLP(nn.Cell):
    def __init__(self, features=16, width=64, classes=4, blocks=2, keep=0.75):
        super().__init__()
        self.stem = nn.Dense(features, width)
        self.blocks = nn.CellList([Block(width, keep) for _ in range(blocks)])
        self.head = nn.Dense(width, classes)

    def construct(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def train(callbacks):
    net = BlockMLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, 0.02), kit.dataset(X, Y), 3, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the training loss (2 x 75 % dropped, rescaled 4x) stays far above the eval loss (dropout off)
    assert outcome.mean_loss(last=10) > 1.5 * outcome.metrics["loss"], (outcome.mean_loss(last=10), outcome.metrics)
