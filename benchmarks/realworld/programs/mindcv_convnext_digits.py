"""mindcv's ConvNeXt (its own class, at an atto-like width) on the real digits (32x32), mindcv's ConvNeXt recipe:
AdamW, weight decay 0.05 off norm/bias, label smoothing, warm-up + cosine, layer scale 1e-6, EMA (mindcv's own
train step)."""
import numpy as np
from mindcv.models.convnext import ConvNeXt

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: mindcv ConvNeXt (depths 1-1-2-1, dims 16-128) with AdamW and EMA", expect=(),
                  arch="convnext", data="digits images (real)", category="healthy")
LIBRARY = "mindcv 0.3.0"
COVERS = ("depthwise 7x7 conv", "LayerNorm (channels-first)", "layer scale 1e-6", "GELU", "residual",
          "AdamW", "EMA train step")

X, Y, XE, YE = corpus.split(*corpus.load("digits"))
X, XE = corpus.digit_images(X, 32), corpus.digit_images(XE, 32)
Y, YE = Y.astype(np.int32), YE.astype(np.int32)
EPOCHS, BATCH = 5, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


def recipe() -> corpus.Recipe:
    net = ConvNeXt(in_channels=1, num_classes=10, depths=[1, 1, 2, 1], dims=[16, 32, 64, 128],
                   layer_scale_init_value=1e-6)
    return corpus.mindcv_recipe(net, DATA.steps_per_epoch, EPOCHS, opt="adamw", lr=2e-3, weight_decay=0.05, ema=True)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
