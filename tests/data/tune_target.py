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


def fragile_build(params: dict) -> tuple:
    """``build``, except for two configurations: the widest runs out of memory while building, and width 2 gets
    a second layer sized for width 1, so its shapes mismatch in the first training step."""
    width = int(params.get("width_multiplier", 1))
    if width == 4:
        raise MemoryError("cannot allocate the width-64 layers")
    net, loss, optimizer = build(params)
    if width == 2:
        net = nn.SequentialCell(nn.Dense(FEATURES, 32), nn.ReLU(), nn.Dense(16, CLASSES))
        optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    return net, loss, optimizer


def make_factory_data() -> tuple:
    """(train_ds(params), eval): a training-set factory (``batch_size`` is searched) that refuses batches of 128."""
    def train_ds(params: dict) -> ds.Dataset:
        batch = int(params.get("batch_size", 32))
        if batch == 128:
            raise ValueError("a batch of 128 does not fit the pipeline's shared memory")
        return _split(1, 384, batch)

    return train_ds, make_data()[1]


def interrupted_build(params: dict) -> tuple:
    """``build`` for the baseline; Ctrl-C in the first trial."""
    if params:
        raise KeyboardInterrupt
    return build(params)

EMPTY_SPACE: dict = {}
LR_SPACE = {"learning_rate": (0.01, 1.0, "log"), "weight_decay": (1e-6, 1e-2, "log")}
"""A given space: the CLI tests skip the range test that ``space="auto"`` runs."""
FRAGILE_SPACE = {"width_multiplier": [1, 2, 4], "batch_size": [32, 128], "learning_rate": [0.05]}
"""For ``fragile_build`` and ``make_factory_data``: width 4 fails to build, width 2 to train, batch 128 to load;
the others train at a good learning rate."""
WIDEST_SPACE = {"width_multiplier": [4]}
"""For ``fragile_build``: every trial fails."""
