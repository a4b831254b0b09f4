"""The Doctor's static lint sees what only training has: the train cell Model built (MSD112) and a real batch (MSD114)."""
from __future__ import annotations

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Model

from mindspore_doctor import Doctor, lint

QUIET = ("MSD3",)  # data checks have their own tests; these tiny synthetic sets are legitimately small


def _regression(n=64, features=4, batch=16, shuffle=False):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = (x @ rng.standard_normal((features, 1))).astype(np.float32)  # labels (N, 1)
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=shuffle).batch(batch)


class Regressor(nn.Cell):
    def __init__(self, squeeze=False):
        super().__init__()
        self.fc1 = nn.Dense(4, 16)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(16, 1)
        self.squeeze = squeeze

    def construct(self, x):
        out = self.fc2(self.relu(self.fc1(x)))
        return out.squeeze(-1) if self.squeeze else out


def _train(net, doctor, *, opt=None, data=None, epochs=1, **model_kw):
    opt = opt or nn.Momentum(net.trainable_params(), 0.01, 0.9)
    model = Model(net, nn.MSELoss(), opt, **model_kw)
    model.train(epochs, data or _regression(), callbacks=[doctor] if doctor else [], dataset_sink_mode=False)
    return model


def _found(doctor, code):
    return [f for f in doctor.report.findings if f.code == code]


# --- MSD112: the loss scale lives in the train cell Model builds --------------------------------


def test_fixed_loss_scale_manager_without_optimizer_scale_fires():
    net = Regressor()
    doctor = Doctor(ignore=QUIET)
    manager = ms.FixedLossScaleManager(1024.0, drop_overflow_update=False)
    _train(net, doctor, opt=nn.Momentum(net.trainable_params(), 1e-4, 0.9), loss_scale_manager=manager)
    found = _found(doctor, "MSD112")
    assert any(f.location["setting"] == "sens" and f.evidence == {"sens": 1024.0, "optimizer_loss_scale": 1.0}
               for f in found), [f.message for f in found]


def test_lint_takes_the_train_cell_built_elsewhere():
    net = Regressor()
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    model = Model(net, nn.MSELoss(), opt, loss_scale_manager=ms.FixedLossScaleManager(1024.0, False))
    assert not lint(net, optimizer=opt, select=["MSD112"]).findings
    train = model._train_network  # pylint: disable=protected-access
    assert lint(net, optimizer=opt, train_network=train, select=["MSD112"]).codes() == {"MSD112"}


def test_fixed_loss_scale_with_matching_optimizer_scale_on_amp_is_quiet():
    net = Regressor()
    doctor = Doctor(ignore=QUIET)
    manager = ms.FixedLossScaleManager(1024.0, drop_overflow_update=False)
    _train(net, doctor, opt=nn.Momentum(net.trainable_params(), 0.01, 0.9, loss_scale=1024.0),
           loss_scale_manager=manager, amp_level="O2")
    assert not _found(doctor, "MSD112")


def test_matching_scales_on_float32_only_say_the_scale_is_pointless():
    """The scales agree (no mismatch); MSD112's "loss scale without mixed precision" case still applies."""
    net = Regressor()
    doctor = Doctor(ignore=QUIET)
    manager = ms.FixedLossScaleManager(1024.0, drop_overflow_update=False)
    _train(net, doctor, opt=nn.Momentum(net.trainable_params(), 0.01, 0.9, loss_scale=1024.0),
           loss_scale_manager=manager)
    assert [f.location["setting"] for f in _found(doctor, "MSD112")] == ["loss_scale"]


# --- MSD114: one batch of the training set feeds the shape check ----------------------------------


@pytest.mark.parametrize("squeeze", [True, False], ids=["squeezed-output", "matching-shapes"])
def test_silent_broadcast_on_the_first_training_batch(exec_mode, squeeze):
    doctor = Doctor(ignore=QUIET)
    _train(Regressor(squeeze=squeeze), doctor)
    found = _found(doctor, "MSD114")
    if squeeze:
        [finding] = found
        assert finding.evidence["output_shape"] == [16] and finding.evidence["label_shape"] == [16, 1]
    else:
        assert not found
    assert not [f for f in _found(doctor, "MSD002") if "MSD114" in f.evidence.get("codes", [])]


def test_no_sample_batch_is_skipped_with_the_reason():
    doctor = Doctor(ignore=QUIET, label_column="target")
    _train(Regressor(squeeze=True), doctor)
    [skip] = [f for f in _found(doctor, "MSD002") if f.evidence.get("codes") == ["MSD114"]]
    assert "'target' not in the dataset's columns" in skip.message, skip.message
    assert not _found(doctor, "MSD114")


def test_sampling_the_batch_leaves_training_bitwise_identical(exec_mode):
    def run(doctor):
        ms.set_seed(0)
        net = Regressor(squeeze=True)
        model = _train(net, doctor, data=_regression(shuffle=True), epochs=2)
        return {p.name: p.asnumpy() for p in model._train_network.get_parameters()}  # pylint: disable=protected-access

    doctor = Doctor(ignore=QUIET)
    with_doctor, without = run(doctor), run(None)
    assert _found(doctor, "MSD114")
    assert with_doctor.keys() == without.keys()
    assert all(np.array_equal(with_doctor[k], without[k]) for k in without)
