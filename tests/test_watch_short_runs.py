"""``doctor.watch(..., epochs=N)`` on a short hand-written loop probes the run's last step (issue 24, coverage).

A run shorter than ``probe_every`` would otherwise be probed at step 1 only, and no rule that compares two probes
could judge it. ``Model.train`` and ``watch`` with a sized dataset know the run's length up front; a loop over
batches that are not a MindSpore dataset (or no ``train_dataset`` at all) learns an epoch's length when its first
epoch ends, which is early enough to probe the last step of a run of two epochs or more. Also here: the
``(loss, accuracy)`` tuple a train cell returns goes to ``run.step`` as it is (the first element is the loss).
"""
from __future__ import annotations

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
import pytest
from mindspore import nn, ops

from mindspore_doctor import Doctor

BATCHES, EPOCHS, BATCH = 5, 2, 8


def _arrays():
    r = np.random.default_rng(0)
    x = r.standard_normal((BATCHES * BATCH, 8)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int32)


def _setup():
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
    loss_fn = nn.CrossEntropyLoss()
    optimizer = nn.SGD(net.trainable_params(), 0.1)
    train_cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), optimizer)
    train_cell.set_train()
    return net, loss_fn, optimizer, train_cell


def _loop(run, train_cell, batches, returns=lambda loss, data, label: loss):
    losses = []
    for _ in range(EPOCHS):
        for data, label in batches():
            loss = train_cell(data, label)
            run.step(returns(loss, data, label), data, label)
            losses.append(float(loss.asnumpy()))
        run.epoch_end()
    return losses


def test_short_run_over_a_dataset_probes_its_last_step():
    x, y = _arrays()
    net, loss_fn, optimizer, train_cell = _setup()
    ds = mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
    doctor = Doctor()
    with doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=ds, epochs=EPOCHS) as run:
        _loop(run, train_cell, ds.create_tuple_iterator)
    assert [s.step for s in doctor.history.probed()] == [1, BATCHES * EPOCHS]


def test_short_run_over_plain_batches_probes_its_last_step():
    """No ``train_dataset``: the loop walks numpy batches. ``epochs`` was given, so after the first epoch the run's
    length is known (steps per epoch x epochs) and its last step must be probed as with a dataset.

    Before: ``batch_num`` stayed None without a sized dataset, and only step 1 was probed."""
    x, y = _arrays()
    net, loss_fn, optimizer, train_cell = _setup()

    def batches():
        for i in range(0, len(x), BATCH):
            yield ms.Tensor(x[i:i + BATCH]), ms.Tensor(y[i:i + BATCH])

    doctor = Doctor()
    with doctor.watch(net, optimizer, loss_fn=loss_fn, epochs=EPOCHS) as run:
        _loop(run, train_cell, batches)
    assert [s.step for s in doctor.history.probed()] == [1, BATCHES * EPOCHS]


def test_step_takes_the_loss_accuracy_tuple_of_a_train_cell():
    x, y = _arrays()
    net, loss_fn, optimizer, train_cell = _setup()
    ds = mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)

    def with_accuracy(loss, data, label):
        accuracy = ops.equal(net(data).argmax(-1), label).astype(ms.float32).mean()
        return loss, accuracy

    doctor = Doctor()
    with doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=ds, epochs=EPOCHS) as run:
        losses = _loop(run, train_cell, ds.create_tuple_iterator, returns=with_accuracy)
    np.testing.assert_allclose([s.loss for s in doctor.history.steps], losses, rtol=1e-6)
    assert not [f for f in doctor.report.findings if f.severity.value != "info"]


def test_step_takes_a_loss_the_loop_already_read():
    """``run.step(float(loss))`` and ``run.step(loss.asnumpy())``: the loss rules judge those numbers too."""
    x, y = _arrays()
    for to_host in (lambda loss: float(loss.asnumpy()), lambda loss: loss.asnumpy()):
        net, loss_fn, optimizer, train_cell = _setup()
        ds = mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
        doctor = Doctor()
        with doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=ds, epochs=EPOCHS) as run:
            losses = _loop(run, train_cell, ds.create_tuple_iterator, returns=lambda loss, d, l: to_host(loss))
        assert [s.loss for s in doctor.history.steps] == pytest.approx(losses)
