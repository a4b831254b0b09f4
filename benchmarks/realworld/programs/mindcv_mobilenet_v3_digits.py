"""mindcv MobileNetV3-Small 0.75 on the real digits (16x16, grey), mindcv's recipe: label smoothing, Momentum with
weight decay off norm/bias, warm-up + cosine."""
import mindcv
import numpy as np

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: mindcv mobilenet_v3_small_075 trained from scratch on digits", expect=(),
                  arch="mobilenet_v3", data="digits images (real)", category="healthy",
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindcv 0.3.0"
COVERS = ("depthwise conv", "SE block", "BatchNorm everywhere", "hard-swish", "inverted residual",
          "linear bottleneck", "Dropout")

X, Y, XE, YE = corpus.split(*corpus.load("digits"))
X, XE = corpus.digit_images(X, 16), corpus.digit_images(XE, 16)
Y, YE = Y.astype(np.int32), YE.astype(np.int32)
EPOCHS, BATCH = 4, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


def recipe() -> corpus.Recipe:
    net = mindcv.create_model("mobilenet_v3_small_075", num_classes=10, in_channels=1, pretrained=False)
    return corpus.mindcv_recipe(net, DATA.steps_per_epoch, EPOCHS, opt="momentum", lr=0.05, weight_decay=1e-5)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.8, outcome.metrics
