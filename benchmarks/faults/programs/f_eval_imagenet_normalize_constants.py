"""Fault: training normalises with the dataset's own statistics, the eval pipeline with ImageNet's constants."""
import mindspore.dataset as mds
import numpy as np
from mindspore import nn
from mindspore.dataset import vision
from mindspore.train import Model

from benchmarks.faults import kit

FAULT = kit.Fault("eval pipeline normalised with ImageNet's mean/std while training used the dataset's own",
                  expect={"MSD313"}, accept={"MSD308"}, arch="cnn", data="images", category="evaluation")


def pixels(n, seed):
    """Camera-like uint8 HWC images (the kit's template images scaled to pixel values)."""
    x, y = kit.images(n, channels=3, seed=seed, noise=2.0)
    return np.clip(128 + 32 * x.transpose(0, 2, 3, 1), 0, 255).astype(np.uint8), y


X, Y = pixels(1024, seed=0)
XE, YE = pixels(256, seed=1)
OWN_MEAN, OWN_STD = [0.5, 0.5, 0.5], [0.125, 0.125, 0.125]   # the training set's statistics on the 0-1 scale
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def pipeline(x, y, shuffle, mean, std):
    ds = mds.NumpySlicesDataset({"image": x, "label": y}, shuffle=shuffle)
    ds = ds.map([vision.Rescale(1 / 255, 0), vision.Normalize(mean, std), vision.HWC2CHW()], input_columns="image")
    return ds.batch(32)


def eval_ds():
    return pipeline(XE, YE, False, IMAGENET_MEAN, IMAGENET_STD)


def doctor_options():
    return {"eval_dataset": eval_ds()}


def train(callbacks):
    net = kit.CNN(channels=3)
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net, lr=0.02), pipeline(X, Y, True, OWN_MEAN, OWN_STD),
                      4, callbacks, eval_ds=eval_ds())
    model = Model(net, kit.cross_entropy(), metrics={"accuracy": nn.Accuracy(), "loss": nn.Loss()})
    matching = model.eval(pipeline(XE, YE, False, OWN_MEAN, OWN_STD), dataset_sink_mode=False)
    outcome.extra["matching_eval"] = {k: float(v) for k, v in matching.items()}
    return outcome


def effect(outcome):
    # the model is fine: with the training constants the same eval images score higher (measured: accuracy 1.00
    # against 0.91, eval loss 0.018 against 0.26); the reported eval metric blames the model for the pipeline
    matching, reported = outcome.extra["matching_eval"], outcome.metrics
    assert matching["accuracy"] > reported["accuracy"] + 0.05, (matching, reported)
    assert reported["loss"] > 5 * matching["loss"], (matching, reported)
