"""A token classifier from nn.TransformerEncoder (pre-norm, dropout, GELU), AdamW with warm-up + cosine decay."""
import numpy as np
import mindspore as ms
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: a 2-layer pre-norm TransformerEncoder classifying short token sequences", expect=(),
                  arch="transformer", data="tokens (synthetic)", category="healthy",
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindspore.nn"
COVERS = ("nn.TransformerEncoder", "LayerNorm", "Dropout", "nn.Embedding", "AdamW + warm-up", "eval split")

STEPS, VOCAB = 8, 32
X, Y = kit.tokens(1280, steps=STEPS, vocab=VOCAB, seed=0)
XE, YE = kit.tokens(256, steps=STEPS, vocab=VOCAB, seed=1)
EPOCHS, BATCH = 5, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


class TokenClassifier(nn.Cell):
    def __init__(self, d_model: int = 64, heads: int = 4, layers: int = 2, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.position = ms.Parameter(ms.Tensor(np.random.default_rng(3).normal(0, 0.02, (1, STEPS, d_model)),
                                               ms.float32), name="position")
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.1,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm((d_model,)))
        self.head = nn.Dense(d_model, classes)

    def construct(self, tokens):
        h = self.encoder(self.embed(tokens) + self.position)
        return self.head(h.mean(axis=1))


def recipe() -> corpus.Recipe:
    net = TokenClassifier()
    per_epoch = DATA.steps_per_epoch
    lr = nn.warmup_lr(1e-3, per_epoch, per_epoch, 1) + nn.cosine_decay_lr(1e-5, 1e-3, EPOCHS * per_epoch, per_epoch,
                                                                          EPOCHS)[per_epoch:]
    decay = [p for p in net.trainable_params() if p.ndim > 1 and "position" not in p.name]
    rest = [p for p in net.trainable_params() if not (p.ndim > 1 and "position" not in p.name)]
    opt = nn.AdamWeightDecay([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                             learning_rate=lr)
    return corpus.recipe(net, nn.CrossEntropyLoss(label_smoothing=0.1), opt)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.9, outcome.metrics
