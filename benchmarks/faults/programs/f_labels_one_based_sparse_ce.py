"""Fault: class ids read as 1..K (1-based label file) for a K-output CNN trained with sparse cross-entropy."""
import mindspore.dataset as mds

from benchmarks.faults import kit

FAULT = kit.Fault("labels 1..4 for a 4-output network (1-based label file not remapped)", expect={"MSD306"},
                  accept={"MSD201", "MSD206", "MSD208"}, arch="cnn", data="images", category="data", fast=True,
                  deterministic=False)  # the label 4 makes the loss read past the logits

X, Y = kit.images(512, seed=0)
LABELS = Y + 1                                             # as stored in labels.txt


def train(callbacks):
    ds = mds.NumpySlicesDataset({"image": X, "label": LABELS}, shuffle=True).batch(32, drop_remainder=True)
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), ds, 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses[:5]
