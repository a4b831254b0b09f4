"""Fault: the train pipeline rescales and normalises the images, the eval pipeline forgets both maps."""
import mindspore as ms
import mindspore.dataset as mds
import mindspore.dataset.transforms as T
import mindspore.dataset.vision as vision
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("eval images left raw (0-255) while training images are rescaled and normalised",
                  expect={"MSD308"}, accept={"MSD304", "MSD313", "MSD404", "MSD405"}, arch="residual", data="images",
                  category="data")


def _uint8_hwc(n, seed):
    x, y = kit.images(n, seed=seed)
    return np.clip(128 + 50 * x, 0, 255).astype(np.uint8).transpose(0, 2, 3, 1), y


X, Y = _uint8_hwc(512, 0)
XE, YE = _uint8_hwc(256, 1)
MEAN, STD = X.mean() / 255, X.std() / 255


def train_ds():
    ds = mds.NumpySlicesDataset({"image": X, "label": Y}, shuffle=True)
    ds = ds.map([vision.Rescale(1 / 255, 0), vision.Normalize([MEAN], [STD]), vision.HWC2CHW()], "image")
    return ds.batch(32, drop_remainder=True)


def eval_ds():
    ds = mds.NumpySlicesDataset({"image": XE, "label": YE}, shuffle=False)
    return ds.map([vision.HWC2CHW(), T.TypeCast(ms.float32)], "image").batch(32)


def doctor_options():
    return {"eval_dataset": eval_ds()}


def train(callbacks):
    net = kit.ResNetTiny()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), train_ds(), 3, callbacks, eval_ds=eval_ds())


def effect(outcome):
    # training fits (loss well below ln 4) but the raw eval images are misclassified
    assert outcome.mean_loss(last=10) < 0.7 and outcome.metrics["accuracy"] < 0.5, (outcome.mean_loss(last=10),
                                                                                   outcome.metrics)
