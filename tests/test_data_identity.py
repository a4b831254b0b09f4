"""Sampling for the data checks never changes what training sees: same batches, bitwise-same weights."""
from __future__ import annotations

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model

from mindspore_doctor import check_data

ROWS, FEATURES, CLASSES = 96, 6, 3


def _arrays():
    rng = np.random.default_rng(1)
    return rng.normal(size=(ROWS, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, ROWS).astype(np.int32)


class _RandomAccess:
    def __init__(self):
        self.x, self.y = _arrays()

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return ROWS


def _numpy_slices():
    x, y = _arrays()
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=True).batch(16)


def _generator_random_access():
    return ds.GeneratorDataset(_RandomAccess(), ["x", "label"], shuffle=True).map(lambda v: v * 2.0, "x").batch(16)


class _Recorder(Callback):
    def __init__(self):
        self.batches = []

    def on_train_step_end(self, run_context):
        self.batches.append([t.asnumpy().copy() for t in run_context.original_args().train_dataset_element])


class _CheckAtBegin(Callback):
    """What the Doctor does: check the data at on_train_begin, with the network and an eval set."""

    def __init__(self, eval_ds):
        self.eval_ds = eval_ds
        self.report = None

    def on_train_begin(self, run_context):
        cb = run_context.original_args()
        self.report = check_data(cb.train_dataset, self.eval_ds, cb.network)


def _train(make_dataset, check: str):
    ms.set_seed(0)
    dataset = make_dataset()
    net = nn.SequentialCell([nn.Dense(FEATURES, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dense(16, CLASSES)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    recorder, callbacks = _Recorder(), []
    if check == "before":
        assert check_data(dataset, make_dataset(), net).meta["data"]["train"]["samples"] == ROWS
    elif check == "callback":
        callbacks.append(_CheckAtBegin(make_dataset()))
    model.train(2, dataset, callbacks=[*callbacks, recorder], dataset_sink_mode=False)
    if callbacks:
        assert callbacks[0].report.meta["data"]["train"]["samples"] == ROWS
    # all parameters: BatchNorm's moving statistics must not move in the checks' forward pass
    return recorder.batches, {p.name: p.asnumpy().copy() for p in net.get_parameters()}


@pytest.mark.parametrize("make_dataset", [_numpy_slices, _generator_random_access], ids=["numpy_slices", "generator"])
@pytest.mark.parametrize("check", ["before", "callback"])
def test_data_checks_do_not_change_batches_or_weights(make_dataset, check):
    plain_batches, plain_weights = _train(make_dataset, "none")
    checked_batches, checked_weights = _train(make_dataset, check)
    assert len(plain_batches) == len(checked_batches) == 2 * ROWS // 16
    first_epoch = np.concatenate([b[1] for b in plain_batches[: ROWS // 16]])
    assert not np.array_equal(first_epoch, np.sort(first_epoch)), "the dataset must really be shuffled"
    for plain, checked in zip(plain_batches, checked_batches):
        for a, b in zip(plain, checked):
            np.testing.assert_array_equal(a, b)
    for name, value in plain_weights.items():
        np.testing.assert_array_equal(value, checked_weights[name], err_msg=name)
