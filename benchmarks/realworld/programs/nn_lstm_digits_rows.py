"""Digits read row by row: an 8-step sequence of 8 pixels into a 2-layer nn.LSTM, Adam with warm-up + cosine."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: a 2-layer LSTM reading the real 8x8 digits row by row", expect=(), arch="lstm",
                  data="digits rows (real, sequences)", category="healthy", fast=True)
LIBRARY = "mindspore.nn"
COVERS = ("nn.LSTM (2 layers)", "sequence input", "warm-up + cosine lr", "eval split")

X, Y, XE, YE = corpus.split(*corpus.load("digits"))
X, XE = [(a / 16.0).reshape(-1, 8, 8).astype(np.float32) for a in (X, XE)]
Y, YE = Y.astype(np.int32), YE.astype(np.int32)
EPOCHS, BATCH = 8, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


class RowReader(nn.Cell):
    def __init__(self, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.lstm = nn.LSTM(8, hidden, num_layers=2, batch_first=True)
        self.head = nn.Dense(hidden, classes)

    def construct(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1, :])


def recipe() -> corpus.Recipe:
    net = RowReader()
    per_epoch = DATA.steps_per_epoch
    total = EPOCHS * per_epoch
    warm = nn.warmup_lr(5e-3, per_epoch, per_epoch, 1)
    lr = warm + nn.cosine_decay_lr(1e-4, 5e-3, total, per_epoch, EPOCHS)[per_epoch:]
    opt = nn.Adam(net.trainable_params(), learning_rate=lr)
    return corpus.recipe(net, nn.CrossEntropyLoss(), opt)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.3 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
