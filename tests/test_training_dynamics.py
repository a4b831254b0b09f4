"""Loss and gradient dynamics on real (tiny, deterministic) trainings: MSD202, MSD204, MSD208, MSD212 dead units.

Each rule fires on a training that has the problem, at the step its window first allows, and stays quiet on the
same training with a sane learning rate (the near miss).
"""
from __future__ import annotations

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import Tensor, nn
from mindspore.train import Model

from mindspore_doctor import Doctor

QUIET = ("MSD3",)  # tiny synthetic sets: the data checks have their own tests


def _regression(n, features=8, batch=16):
    """y = x @ w*: a convex least-squares problem (or least-absolute with L1Loss)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = (x @ rng.standard_normal((features, 1))).astype(np.float32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)


def _train(net, loss, lr, data, epochs, doctor):
    Model(net, loss, nn.SGD(net.trainable_params(), lr)).train(epochs, data, callbacks=[doctor],
                                                                dataset_sink_mode=False)
    return {f.code: f for f in doctor.report.findings}


@pytest.mark.parametrize("lr, fires", [(1.0, True), (0.3, False)])
def test_learning_rate_far_too_high_diverges_and_explodes_the_gradient(lr, fires):
    # SGD on least squares is stable below lr = 2 / lambda_max of the batch Hessian; lr=1.0 is well above it for
    # 16 samples of 8 standard-normal features: the loss grows geometrically but stays finite for 40 steps.
    doctor = Doctor(ignore=QUIET, probe_every=4)
    found = _train(nn.Dense(8, 1), nn.MSELoss(), lr, _regression(64), 10, doctor)
    assert all(np.isfinite(loss) for _, loss in doctor.history.losses)
    if fires:
        # the first full window of loss_window=20 steps, one step later for the 10-step rolling median
        assert found["MSD202"].step == 22
        assert found["MSD208"].step == 8  # probes at steps 1, 4, 8: the norm grew > 70x
        assert found["MSD208"].evidence["ratio"] > 70
    else:
        assert {"MSD202", "MSD208"}.isdisjoint(found), doctor.report


def test_exploding_gradient_is_reported_before_the_mlp_goes_nan():
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 1))
    doctor = Doctor(ignore=QUIET, probe_every=2)
    found = _train(net, nn.MSELoss(), 0.3, _regression(64), 3, doctor)
    assert found["MSD208"].step < found["MSD201"].step


@pytest.mark.parametrize("lr, fires", [(2.0, True), (0.5, False)])
def test_large_step_sgd_on_a_convex_l1_problem_oscillates(lr, fires):
    # Full-batch subgradient descent on mean |x @ w - y| with a fixed step: lr=2.0 settles on a 2-cycle whose loss
    # swings by ~80 % of the initial loss; lr=0.5 ends in a small bounce (~8 %), under the 25 % amplitude.
    doctor = Doctor(ignore=QUIET, probe_every=10)
    found = _train(nn.Dense(8, 1, has_bias=False, weight_init="zeros"), nn.L1Loss(), lr, _regression(16), 40, doctor)
    if fires:
        assert found["MSD204"].step == 21  # the first full window
        assert found["MSD204"].evidence["sign_flip_fraction"] >= 0.8
    else:
        assert "MSD204" not in found, doctor.report


class HalfDeadMLP(nn.Cell):
    """``dead`` of the 16 hidden units start with bias -100: they never fire, the others train normally."""

    def __init__(self, dead):
        super().__init__()
        bias = np.where(np.arange(16) < dead, -100.0, 0.0).astype(np.float32)
        self.fc1 = nn.Dense(8, 16, bias_init=Tensor(bias))
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Dense(16, 1)

    def construct(self, x):
        return self.fc2(self.relu1(self.fc1(x)))


@pytest.mark.parametrize("dead, fires", [(13, True), (10, False)])
def test_dead_units_on_most_of_a_relu_layer(dead, fires):
    """13 of 16 units dead is beyond binomial noise around the 50 % threshold; 10 of 16 (62 %) is not."""
    doctor = Doctor(ignore=QUIET, probe_every=2)
    found = _train(HalfDeadMLP(dead), nn.MSELoss(), 0.01, _regression(64), 1, doctor)
    stats = doctor.history.probed()[-1].activations["relu1"]
    assert stats.dead_unit_fraction == pytest.approx(dead / 16)
    assert stats.dead_fraction < 0.999  # the whole-layer criterion alone would stay quiet
    assert ("MSD212" in found) is fires
    if fires:
        assert found["MSD212"].location == {"cell": "relu1"}
        assert found["MSD212"].evidence["dead_unit_fraction"] == pytest.approx(13 / 16)
        assert found["MSD212"].evidence["units"] == 16 and "13 of 16" in found["MSD212"].message
