"""Fault: images scaled to [0, 1] and then cast back to uint8 in the loader: all pixels but saturated ones become 0."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("(img / 255).astype(np.uint8) zeroes every pixel below 255: the inputs carry almost no information",
                  expect={"MSD403"}, accept={"MSD203", "MSD209", "MSD310", "MSD402", "MSD404"}, arch="cnn",
                  data="images", category="data", sanity=True)

X, Y = kit.images(512, seed=0)
PIXELS = np.clip(128 + 50 * X, 0, 255).astype(np.uint8)    # what is on disk


def load(img):
    return (img / 255).astype(np.uint8).astype(np.float32)     # meant .astype(np.float32) only


def dataset():
    ds = mds.NumpySlicesDataset({"image": PIXELS, "label": Y}, shuffle=True)
    return ds.map(load, "image").batch(32, drop_remainder=True)


def build():
    net = kit.CNN()
    return net, kit.cross_entropy(), kit.momentum(net)


def train(callbacks):
    net, loss, opt = build()
    outcome = kit.fit(net, loss, opt, dataset(), 2, callbacks)
    outcome.metrics["train_accuracy"] = kit.accuracy(net, np.stack([load(p) for p in PIXELS]), Y)
    return outcome


def effect(outcome):
    # only the rare saturated pixels (255 -> 1) survive: far below the > 0.8 of the float pipeline
    assert outcome.metrics["train_accuracy"] < 0.7, outcome.metrics
