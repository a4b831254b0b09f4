"""Transfer learning as users do it with mindcv: a MobileNetV3-Small 0.75 trained on a source task is saved, its
backbone loaded into a fresh 10-class model (classifier left out), the stem and first bottleneck frozen with
``requires_grad=False``, the optimizer built from the parameters that still require gradients; then fine-tuned on
the real digits (16x16)."""
import atexit
import os
import tempfile

import mindcv
import mindspore as ms
import numpy as np
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: fine-tuning a loaded mindcv MobileNetV3 with a frozen stem", expect=(),
                  arch="mobilenet_v3 (transfer)", data="digits images (real)", category="healthy",
                  deterministic=False)  # CPU Dropout: not bit-for-bit repeatable even without the Doctor
LIBRARY = "mindcv 0.3.0"
COVERS = ("checkpoint save/load", "frozen loaded stem (requires_grad=False)", "replaced classifier",
          "optimizer over trainable parameters only", "depthwise conv", "SE block")

X, Y, XE, YE = corpus.split(*corpus.load("digits"))
X, XE = corpus.digit_images(X, 16), corpus.digit_images(XE, 16)
Y, YE = Y.astype(np.int32), YE.astype(np.int32)
EPOCHS, BATCH = 4, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)
FROZEN = ("features.0.", "features.1.", "features.3.")  # the stem (conv + BatchNorm) and the first bottleneck
_SOURCE = os.path.join(tempfile.gettempdir(), f"realworld_mobilenet_v3_source_{os.getpid()}.ckpt")


def source_checkpoint() -> str:
    """The 'pretrained' backbone: 60 steps on a 4-class synthetic image task, saved once per process."""
    if not os.path.exists(_SOURCE):
        xs, ys = kit.images(640, classes=4, channels=1, size=16, seed=5, noise=1.0)
        net = mindcv.create_model("mobilenet_v3_small_075", num_classes=4, in_channels=1, pretrained=False)
        setup = corpus.mindcv_recipe(net, len(xs) // BATCH, 3, opt="momentum", lr=0.05, weight_decay=1e-5)
        setup.model.train(3, kit.dataset(xs, ys, BATCH), dataset_sink_mode=False)
        ms.save_checkpoint(net, _SOURCE)
        atexit.register(os.remove, _SOURCE)
    return _SOURCE


def recipe() -> corpus.Recipe:
    params = ms.load_checkpoint(source_checkpoint())
    net = mindcv.create_model("mobilenet_v3_small_075", num_classes=10, in_channels=1, pretrained=False)
    ms.load_param_into_net(net, {k: v for k, v in params.items() if not k.startswith("classifier.")})
    for p in net.get_parameters():
        if p.name.startswith(FROZEN):
            p.requires_grad = False
    trainable = list(filter(lambda p: p.requires_grad, net.get_parameters()))
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)
    schedule = nn.cosine_decay_lr(1e-4, 0.05, EPOCHS * DATA.steps_per_epoch, DATA.steps_per_epoch, EPOCHS)
    opt = nn.Momentum(trainable, learning_rate=schedule, momentum=0.9, weight_decay=1e-5)
    return corpus.recipe(net, loss, opt)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.8, outcome.metrics
