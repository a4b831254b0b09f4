"""A causal language model (GPT-style) from nn.TransformerEncoder with a causal mask: per-token logits (N, T, V),
token-level cross-entropy, AdamW with warm-up + cosine decay."""
import numpy as np
import mindspore as ms
from mindspore import nn, ops

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: a small causal transformer LM on Markov-chain token sequences", expect=(),
                  arch="transformer-lm", data="tokens (synthetic, per-token targets)", category="healthy")
LIBRARY = "mindspore.nn"
COVERS = ("causal mask", "per-token logits (N, T, V)", "tied embedding/output weights", "LayerNorm", "eval split")

VOCAB, STEPS, EPOCHS, BATCH = 24, 16, 6, 32


def markov(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences from a fixed chain where each token has three likely successors: next-token targets."""
    chain = np.random.default_rng(42)
    successors = np.stack([chain.choice(VOCAB, 3, replace=False) for _ in range(VOCAB)])
    r = np.random.default_rng(seed)
    seq = np.empty((n, STEPS + 1), np.int32)
    seq[:, 0] = r.integers(0, VOCAB, n)
    for t in range(STEPS):
        likely = successors[seq[:, t], r.integers(0, 3, n)]
        seq[:, t + 1] = np.where(r.random(n) < 0.9, likely, r.integers(0, VOCAB, n))
    return seq[:, :-1], seq[:, 1:]


X, Y = markov(1024, 0)
XE, YE = markov(256, 1)
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


class TinyGPT(nn.Cell):
    def __init__(self, d_model: int = 48, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.position = ms.Parameter(ms.Tensor(np.random.default_rng(5).normal(0, 0.02, (1, STEPS, d_model)),
                                               ms.float32), name="position")
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm((d_model,)))
        self.mask = ms.Tensor(np.triu(np.full((STEPS, STEPS), -1e9, np.float32), k=1))

    def construct(self, tokens):
        h = self.blocks(self.embed(tokens) + self.position, src_mask=self.mask)
        return ops.matmul(h, self.embed.embedding_table.T)  # output projection tied to the embedding


class TokenCrossEntropy(nn.Cell):
    """Cross-entropy over every position: (N, T, V) logits against (N, T) next tokens."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def construct(self, logits, labels):
        return self.ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def recipe() -> corpus.Recipe:
    net = TinyGPT()
    per_epoch = DATA.steps_per_epoch
    lr = nn.warmup_lr(3e-3, per_epoch, per_epoch, 1) + nn.cosine_decay_lr(1e-4, 3e-3, EPOCHS * per_epoch, per_epoch,
                                                                          EPOCHS)[per_epoch:]
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=lr, weight_decay=0.01)
    return corpus.recipe(net, TokenCrossEntropy(), opt, metric="loss")


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(first=10) > 2.8, outcome.losses[:10]  # about log(24): uniform at the start
    assert outcome.metrics["loss"] < 2.0, outcome.metrics  # the chain's entropy is about 1.57 nats
