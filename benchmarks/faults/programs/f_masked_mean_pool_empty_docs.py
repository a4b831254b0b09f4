"""Fault: a fastText-style classifier's masked mean pooling divides by the count of non-pad tokens; empty documents make it 0/0 = NaN."""
import mindspore as ms
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("pooled = sum(emb * mask) / mask.sum(): no epsilon, and some documents are all padding",
                  expect={"MSD106"}, accept={"MSD201", "MSD206"}, arch="mlp", data="tokens", category="nan",
                  fast=True)


def _tokens(n, seed):
    x, y = kit.tokens(n, seed=seed)
    x = x + 1  # id 0 is padding
    x[kit.rng(seed + 10).random(n) < 0.03] = 0  # documents that were empty after cleaning
    return x, y


X, Y = _tokens(512, 0)


class FastText(nn.Cell):
    def __init__(self, vocab=65, dim=32, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.fc = nn.Dense(dim, classes)

    def construct(self, ids):
        mask = ops.cast(ids != 0, ms.float32).expand_dims(-1)
        count = mask.sum(axis=1)
        pooled = (self.embed(ids) * mask).sum(axis=1) / count
        return self.fc(pooled)


def train(callbacks):
    net = FastText()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses[-3:]
