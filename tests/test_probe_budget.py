"""Which due probe steps run (``training/probe_budget.py``): step 1 and the first four regular probes always; after
them a fast step's probes are thinned to ``probe_budget`` of the training time, on the ``probe_every`` grid."""
from __future__ import annotations

import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.probes.instrument import Instrumentation
from mindspore_doctor.training.probe_budget import ProbeBudget


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _probed(budget: ProbeBudget, clock: Clock, steps: int, step_s: float, probe_s: float, every: int = 50) -> list[int]:
    """Steps of ``step_s`` seconds; a probe step that runs takes ``probe_s`` (its step included)."""
    probed = []
    for step in range(1, steps + 1):
        if (step == 1 or step % every == 0) and budget.allows(step):
            budget.began(step)
            clock.now += probe_s
            budget.ended()
            probed.append(step)
        else:
            clock.now += step_s
    return probed


def test_a_fast_steps_probes_are_thinned_to_the_budget_on_the_grid():
    clock = Clock()
    budget = ProbeBudget(0.03, clock=clock)
    probed = _probed(budget, clock, 5000, step_s=0.0004, probe_s=0.0024)  # 2 ms beyond a 0.4 ms step
    assert probed[:5] == [1, 50, 100, 150, 200]  # the first probes, whatever they cost
    assert all(step % 50 == 0 for step in probed[1:])
    # the first five cost 10 % of their steps: none until the share since step 50 is back under 3 %, then one
    # in about 167 steps (2 ms against 3 % of 0.4 ms steps)
    assert 800 <= probed[5] <= 950, probed
    gaps = [b - a for a, b in zip(probed[5:], probed[6:])]
    assert gaps and all(150 <= gap <= 200 for gap in gaps), gaps
    run_s = 5000 * 0.0004 + (len(probed) - 1) * 0.002
    assert (len(probed) - 2) * 0.002 <= 0.03 * run_s
    assert budget.skipped == 100 - (len(probed) - 1)
    assert budget.to_dict()["probe_step_ms"] == pytest.approx(2.4)


def test_a_probe_that_is_cheap_beside_the_step_runs_at_every_due_step():
    clock = Clock()
    probed = _probed(ProbeBudget(0.03, clock=clock), clock, 1000, step_s=0.05, probe_s=0.06)  # ResNet-sized
    assert probed == [1, *range(50, 1001, 50)]


class _MLP(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.relu, self.out = nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2)

    def construct(self, x):
        return self.out(self.relu(self.hidden(x)))


def _probe_steps(doctor: Doctor, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[np.ndarray]]:
    """Train 300 steps of a small MLP whose probe steps are made slow (a 50 ms read): the probed steps and the
    final weights."""
    read_into = Instrumentation.read_into

    def slow_read(self, *args, **kwargs):
        time.sleep(0.05)
        return read_into(self, *args, **kwargs)

    monkeypatch.setattr(Instrumentation, "read_into", slow_read)
    ms.set_seed(0)
    net = _MLP()
    x = np.random.default_rng(0).standard_normal((4800, 8)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "label": (x[:, 0] > 0).astype(np.int32)}, shuffle=False).batch(16)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.SGD(net.trainable_params(), 0.01))
    model.train(1, data, callbacks=[doctor], dataset_sink_mode=False)
    return [s.step for s in doctor.history.probed()], [p.asnumpy() for p in net.trainable_params()]


def test_the_default_probe_every_is_thinned_and_an_explicit_budget_of_none_is_not(monkeypatch):
    thinned = Doctor()
    probed, weights = _probe_steps(thinned, monkeypatch)
    assert probed == [1, 50, 100, 150, 200], probed  # the first four after step 1, then none at 50 ms each
    schedule = thinned.report.meta["probe_schedule"]
    assert schedule["skipped"] == 2 and schedule["probe_step_ms"] >= 50
    every, weights_every = _probe_steps(Doctor(probe_budget=None), monkeypatch)
    assert every == [1, 50, 100, 150, 200, 250, 300]
    assert all(np.array_equal(a, b) for a, b in zip(weights, weights_every))  # probing never changes training


def test_an_explicit_probe_every_probes_exactly_every_n_steps(monkeypatch):
    probed, _ = _probe_steps(Doctor(probe_every=60), monkeypatch)
    assert probed == [1, 60, 120, 180, 240, 300]


def test_a_negative_budget_is_refused():
    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.training.session import DoctorSession

    with pytest.raises(ValueError, match="probe_budget must be None or >= 0"):
        DoctorSession(DoctorConfig(probe_budget=-0.1))
