"""Digits autoencoder (target = input): 64 -> 32 -> 8 -> 32 -> 64 with a sigmoid output, MSE, Adam."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: a dense autoencoder reconstructing the real digits in [0, 1]", expect=(),
                  arch="autoencoder", data="digits vectors (real, target = input)", category="healthy")
LIBRARY = "mindspore.nn"
COVERS = ("autoencoder (label = input)", "sigmoid output", "MSE", "eval split")

X, _, XE, _ = corpus.split(*corpus.load("digits"))
X, XE = (X / 16.0).astype(np.float32), (XE / 16.0).astype(np.float32)
EPOCHS, BATCH = 10, 32
DATA = corpus.Data(X, X, EPOCHS, BATCH, XE, XE)


def recipe() -> corpus.Recipe:
    net = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 8), nn.ReLU(),
                            nn.Dense(8, 32), nn.ReLU(), nn.Dense(32, 64), nn.Sigmoid())
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    return corpus.recipe(net, nn.MSELoss(), opt, metric="loss")


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["loss"] < 0.8 * float(((XE - X.mean(0)) ** 2).mean()), outcome.metrics  # beats the mean image
