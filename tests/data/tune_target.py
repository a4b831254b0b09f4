"""A small classifier whose default learning rate is far too high, for ``tune`` / ``msdoctor tune`` tests."""
from __future__ import annotations

import mindspore.dataset as ds
import numpy as np
from mindspore import nn

DEFAULT_LR = 8.0  # the deliberate bug: Momentum at lr 8 diverges within a few steps
CLASSES, FEATURES = 3, 8


def build(params: dict) -> tuple:
    width = 16 * int(params.get("width_multiplier", 1))
    # no Dropout: MindSpore 2.10's CPU Dropout draws other masks in a second run even after ms.set_seed, and the
    # study must be reproducible
    net = nn.SequentialCell(nn.Dense(FEATURES, width), nn.ReLU(), nn.Dense(width, CLASSES))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=params.get("learning_rate", DEFAULT_LR),
                            momentum=0.9, weight_decay=params.get("weight_decay", 0.0))
    return net, loss, optimizer


def _split(seed: int, samples: int, batch: int) -> ds.Dataset:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(100).normal(size=(CLASSES, FEATURES)).astype(np.float32) * 0.5
    y = rng.integers(0, CLASSES, samples).astype(np.int32)
    x = (centres[y] + rng.normal(size=(samples, FEATURES))).astype(np.float32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)


def make_data() -> tuple:
    """(train, eval, holdout): three draws from the same three Gaussian blobs."""
    return _split(1, 384, 32), _split(2, 192, 64), _split(3, 192, 64)


def make_empty_data() -> tuple:
    """A training set filtered to nothing."""
    train, evaluation, _ = make_data()
    return train.filter(predicate=lambda x, y: False, input_columns=["x", "y"]), evaluation


def raising_build(params: dict) -> tuple:
    raise RuntimeError("the model file is missing")


EMPTY_SPACE: dict = {}
LR_SPACE = {"learning_rate": (0.01, 1.0, "log"), "weight_decay": (1e-6, 1e-2, "log")}
"""A given space: the CLI tests skip the range test that ``space="auto"`` runs."""
