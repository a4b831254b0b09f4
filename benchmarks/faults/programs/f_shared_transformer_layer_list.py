"""Fault: a hand-written Transformer encoder stacks `nn.CellList([layer] * 2)`: both layers are one object."""
import mindspore as ms
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nn.CellList([layer] * 2) stacks the same TransformerEncoderLayer twice (shared weights)",
                  expect={"MSD101"}, arch="transformer", data="tokens", category="frozen-shared")

X, Y = kit.tokens(448, seed=0)


class Encoder(nn.Cell):
    def __init__(self, vocab=64, classes=4, d_model=32, heads=4, depth=2, steps=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = ms.Parameter(ms.Tensor(kit.rng(5).normal(0, 0.02, (1, steps, d_model)).astype(np.float32)),
                                     name="position")
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True)
        self.layers = nn.CellList([layer] * depth)
        self.fc = nn.Dense(d_model, classes)

    def construct(self, x):
        h = self.embed(x) + self.position
        for layer in self.layers:
            h = layer(h)
        return self.fc(h.mean(axis=1))


def train(callbacks):
    net = Encoder()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    layers = outcome.network.layers
    a, b = layers[0].dense1.weight.asnumpy(), layers[1].dense1.weight.asnumpy()
    assert np.array_equal(a, b), "layers 0 and 1 have different weights: they are not shared"
