"""Fault: uint8 HWC images (0-255) go through HWC2CHW and a cast but no Rescale/Normalize before a CNN."""
import mindspore as ms
import mindspore.dataset as mds
import mindspore.dataset.transforms as T
import mindspore.dataset.vision as vision
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("raw 0-255 pixels fed to the CNN (Rescale(1/255) and Normalize forgotten)", expect={"MSD304"},
                  accept={"MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD208", "MSD211", "MSD212", "MSD215",
                          "MSD216"},
                  arch="cnn", data="images", category="data", fast=True)


def _uint8_hwc(n, seed):
    x, y = kit.images(n, seed=seed)
    return np.clip(128 + 50 * x, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1), y


X, Y = _uint8_hwc(512, 0)
XE, YE = _uint8_hwc(256, 1)


def _ds(x, y, shuffle):
    ds = mds.NumpySlicesDataset({"image": x, "label": y}, shuffle=shuffle)
    ds = ds.map([vision.HWC2CHW(), T.TypeCast(ms.float32)], "image")
    return ds.batch(32, drop_remainder=True)


def train(callbacks):
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.01), _ds(X, Y, True), 3, callbacks,
                   eval_ds=_ds(XE, YE, False))


def effect(outcome):
    # the healthy pipeline (Rescale + Normalize) reaches > 0.9 here
    assert outcome.nonfinite_step is not None or outcome.metrics["accuracy"] < 0.6, outcome.metrics
