"""Healthy: 3-channel uint8 HWC images from a GeneratorDataset, normalised and made CHW by .map(), into a CNN."""
import mindspore.dataset as mds
import numpy as np
from mindspore.dataset import vision

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a GeneratorDataset pipeline with Normalize + HWC2CHW done right", expect=(), arch="cnn",
                  data="images", category="healthy")

MEAN, STD = [128.0] * 3, [32.0] * 3


def pixels(n, seed):
    """Camera-like uint8 HWC images (the kit's template images scaled to pixel values)."""
    x, y = kit.images(n, channels=3, seed=seed, noise=2.0)
    return np.clip(128 + 32 * x.transpose(0, 2, 3, 1), 0, 255).astype(np.uint8), y


class Source:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.x)


def pipeline(x, y, shuffle):
    ds = mds.GeneratorDataset(Source(x, y), ["image", "label"], shuffle=shuffle)
    ds = ds.map([vision.Normalize(MEAN, STD), vision.HWC2CHW()], input_columns="image")
    return ds.batch(32, drop_remainder=True)


X, Y = pixels(1024, seed=0)
XE, YE = pixels(256, seed=1)


def train(callbacks):
    net = kit.CNN(channels=3)
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.02), pipeline(X, Y, True), 4, callbacks,
                   eval_ds=pipeline(XE, YE, False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
