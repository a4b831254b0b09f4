"""Fault: grayscale images made 3-channel by zero-padding instead of repeating; two channels are constant."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("gray->RGB by padding two all-zero channels: their first-layer weights never learn",
                  expect={"MSD310"}, arch="cnn", data="images", category="data")

GRAY, Y = kit.images(512, seed=0)


def to_rgb(img):
    return np.concatenate([img, np.zeros_like(img), np.zeros_like(img)], axis=0)   # meant np.repeat(img, 3, 0)


def train(callbacks):
    ds = mds.NumpySlicesDataset({"image": GRAY, "label": Y}, shuffle=True).map(to_rgb, "image").batch(32)
    net = kit.CNN(channels=3)
    start = net.conv1.weight.asnumpy()[:, 1:].copy()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), ds, 2, callbacks)
    outcome.extra["unused_weights_moved"] = float(np.abs(net.conv1.weight.asnumpy()[:, 1:] - start).max())
    return outcome


def effect(outcome):
    # two thirds of the first conv layer never receive a gradient
    assert outcome.extra["unused_weights_moved"] == 0.0, outcome.extra
