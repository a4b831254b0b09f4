"""Wine (178 samples, 13 features, 3 classes): a small MLP with BatchNorm and Dropout, Adam with weight decay."""
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: a small BatchNorm/Dropout MLP on the real 178-sample wine set", expect=(), arch="mlp",
                  data="wine (real, tabular)", category="healthy", fast=True,
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindspore.nn"
COVERS = ("BatchNorm1d", "Dropout", "tiny real dataset", "eval split")

X, Y, XE, YE = corpus.split(*corpus.load("wine"))
X, XE = corpus.standardize(X, XE)
Y, YE = Y.astype("int32"), YE.astype("int32")
EPOCHS, BATCH = 25, 16
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


def recipe() -> corpus.Recipe:
    net = nn.SequentialCell(nn.Dense(13, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(p=0.2),
                            nn.Dense(32, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(p=0.2), nn.Dense(32, 3))
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3, weight_decay=1e-4)
    return corpus.recipe(net, nn.CrossEntropyLoss(), opt)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.9, outcome.metrics
