"""Diabetes (442 x 10, regression): an MLP on standardized features and a standardized target, MSE, Adam."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: an MLP regressor on the real diabetes set, target standardized", expect=(), arch="mlp",
                  data="diabetes (real, regression)", category="healthy", fast=True)
LIBRARY = "mindspore.nn"
COVERS = ("regression", "MSE", "tiny real dataset", "eval split")

X, Y, XE, YE = corpus.split(*corpus.load("diabetes"))
X, XE = corpus.standardize(X, XE)
Y, YE = [a.astype(np.float32).reshape(-1, 1) for a in (Y, YE)]
Y, YE = corpus.standardize(Y, YE)
EPOCHS, BATCH = 18, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


def recipe() -> corpus.Recipe:
    net = nn.SequentialCell(nn.Dense(10, 64), nn.ReLU(), nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 1))
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    return corpus.recipe(net, nn.MSELoss(), opt, metric="mae")


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.7 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["loss"] < 0.7, outcome.metrics  # R^2 above 0.3 on held-out patients
