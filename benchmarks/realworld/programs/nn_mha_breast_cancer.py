"""Breast cancer (569 x 30, binary): a feature-token transformer built on nn.MultiheadAttention, one logit,
BCEWithLogitsLoss, AdamW."""
import numpy as np
import mindspore as ms
from mindspore import nn, ops

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: an FT-Transformer-style attention model on the real breast-cancer set, one logit",
                  expect=(), arch="transformer", data="breast_cancer (real, tabular, binary)", category="healthy",
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindspore.nn"
COVERS = ("nn.MultiheadAttention", "LayerNorm", "residual", "binary single logit + BCEWithLogitsLoss", "eval split")

X, Y, XE, YE = corpus.split(*corpus.load("breast_cancer"))
X, XE = corpus.standardize(X, XE)
Y, YE = [a.astype(np.float32).reshape(-1, 1) for a in (Y, YE)]
FEATURES, EPOCHS, BATCH = X.shape[1], 15, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


class FeatureTokenizer(nn.Cell):
    """Each feature becomes a token: value * its own vector + its own bias; a CLS token goes first."""

    def __init__(self, features: int, dim: int):
        super().__init__()
        r = np.random.default_rng(11)
        self.weight = ms.Parameter(ms.Tensor(r.normal(0, dim ** -0.5, (features, dim)), ms.float32), name="weight")
        self.bias = ms.Parameter(ms.Tensor(r.normal(0, dim ** -0.5, (features, dim)), ms.float32), name="bias")
        self.cls = ms.Parameter(ms.Tensor(r.normal(0, dim ** -0.5, (1, 1, dim)), ms.float32), name="cls")

    def construct(self, x):
        tokens = x[:, :, None] * self.weight + self.bias
        cls = ops.broadcast_to(self.cls, (x.shape[0], 1, self.cls.shape[2]))
        return ops.concat((cls, tokens), axis=1)


class AttentionBlock(nn.Cell):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm((dim,))
        self.attention = nn.MultiheadAttention(dim, heads, dropout=0.1, batch_first=True)
        self.norm2 = nn.LayerNorm((dim,))
        self.ffn = nn.SequentialCell(nn.Dense(dim, 2 * dim), nn.GELU(), nn.Dropout(p=0.1), nn.Dense(2 * dim, dim))

    def construct(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h)[0]
        return x + self.ffn(self.norm2(x))


class FTTransformer(nn.Cell):
    def __init__(self, features: int = FEATURES, dim: int = 32, heads: int = 4, blocks: int = 2):
        super().__init__()
        self.tokenizer = FeatureTokenizer(features, dim)
        self.blocks = nn.SequentialCell([AttentionBlock(dim, heads) for _ in range(blocks)])
        self.norm = nn.LayerNorm((dim,))
        self.head = nn.Dense(dim, 1)

    def construct(self, x):
        h = self.blocks(self.tokenizer(x))
        return self.head(self.norm(h[:, 0]))


def recipe() -> corpus.Recipe:
    net = FTTransformer()
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-3, weight_decay=1e-5)
    return corpus.recipe(net, nn.BCEWithLogitsLoss(), opt, metric="loss")


def train(callbacks):
    outcome = corpus.fit(recipe(), DATA, callbacks)
    outcome.network.set_train(False)
    logits = outcome.network(ms.Tensor(XE)).asnumpy()
    outcome.metrics["accuracy"] = float(((logits > 0) == (YE > 0.5)).mean())
    return outcome


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.4 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.92, outcome.metrics
