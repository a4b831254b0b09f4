"""mindcv ShuffleNetV2 x0.5 on learnable synthetic RGB images (32x32), mindcv's recipe: label smoothing, Momentum
with weight decay off norm/bias, warm-up + cosine."""
import mindcv

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: mindcv shufflenet_v2_x0_5 trained from scratch", expect=(), arch="shufflenet_v2",
                  data="images (synthetic)", category="healthy")
LIBRARY = "mindcv 0.3.0"
COVERS = ("depthwise conv", "channel split + concat", "channel shuffle", "BatchNorm everywhere")

X, Y = kit.images(1024, classes=4, channels=3, size=32, seed=0, noise=1.0)
XE, YE = kit.images(256, classes=4, channels=3, size=32, seed=1, noise=1.0)
EPOCHS, BATCH = 6, 32
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


def recipe() -> corpus.Recipe:
    net = mindcv.create_model("shufflenet_v2_x0_5", num_classes=4, pretrained=False)
    # configs/shufflenetv2/shufflenet_v2_0.5_ascend.yaml: lr 0.35 for batch 64 per device; batch 32 here
    return corpus.mindcv_recipe(net, DATA.steps_per_epoch, EPOCHS, opt="momentum", lr=0.1, weight_decay=4e-5)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.6 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
