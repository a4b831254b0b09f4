"""Digits as 64-pixel vectors, standardized per pixel: an MLP with Dropout, Momentum on a cosine schedule."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: an MLP on the real digits as standardized pixel vectors", expect=(), arch="mlp",
                  data="digits vectors (real, image-like)", category="healthy", fast=True,
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindspore.nn"
COVERS = ("Dropout", "image-like features (constant border pixels)", "cosine lr", "eval split")

X, Y, XE, YE = corpus.split(*corpus.load("digits"))
X, XE = corpus.standardize(X, XE)
Y, YE = Y.astype(np.int32), YE.astype(np.int32)
EPOCHS, BATCH = 5, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


def recipe() -> corpus.Recipe:
    net = nn.SequentialCell(nn.Dense(64, 128), nn.ReLU(), nn.Dropout(p=0.2), nn.Dense(128, 10))
    per_epoch = DATA.steps_per_epoch
    lr = nn.cosine_decay_lr(1e-3, 0.05, EPOCHS * per_epoch, per_epoch, EPOCHS)
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9, weight_decay=1e-4)
    return corpus.recipe(net, nn.CrossEntropyLoss(), opt)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.2 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.93, outcome.metrics
