"""Diagnosis from real Doctor trainings: each purposely broken run shows several symptoms, the true cause ranks first.

Tiny MLPs, a few steps each, ``probe_every=2`` so the probe rules see enough signals; 256 samples keep the
data doctor's "too few samples" (MSD307) out of the runs where data size is not the point.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.common.initializer import Constant
from mindspore.train import Model

from mindspore_doctor import Doctor


def _data(n=256, seed=0, nan_row=None, random_labels=False, scale=1.0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    if random_labels:
        y = rng.integers(0, 2, n).astype(np.int32)
    if nan_row is not None:
        x[nan_row, 2] = np.nan
    return ds.NumpySlicesDataset({"x": x * scale, "label": y}, shuffle=False).batch(min(32, n // 2))


class MLP(nn.Cell):
    def __init__(self, hidden=16, bias=0.0, act=None, softmax=False):
        super().__init__()
        self.fc1 = nn.Dense(8, hidden, bias_init=Constant(bias))
        self.act = act or nn.ReLU()
        self.fc2 = nn.Dense(hidden, 2)
        self.softmax = nn.Softmax() if softmax else nn.Identity()

    def construct(self, x):
        return self.softmax(self.fc2(self.act(self.fc1(x))))


@dataclass
class Run:
    """One training: the network, its data and the knobs that break it."""

    net: Callable[[], nn.Cell] = MLP
    data: dict[str, Any] = field(default_factory=dict)
    epochs: int = 1
    lr: float = 0.05
    optimizer: Callable[[nn.Cell, float], nn.Optimizer] | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def train(self) -> Doctor:
        net = self.net()
        optimizer = (self.optimizer or (lambda n, lr: nn.Momentum(n.trainable_params(), lr, 0.9)))(net, self.lr)
        doctor = Doctor(**{"probe_every": 2, **self.options})
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
        model.train(self.epochs, _data(**self.data), callbacks=[doctor], dataset_sink_mode=False)
        return doctor


def _frozen_first_layer():
    net = MLP()
    net.fc1.weight.requires_grad = False  # the optimizer below is built from trainable_params(): fc1 never trains
    return net


def _zero_lr_for_first_layer(net, lr):
    return nn.Momentum([{"params": net.fc1.trainable_params(), "lr": 0.0},
                        {"params": net.fc2.trainable_params()}], lr, 0.9)


SHORT_RUN = {"loss_window": 6, "plateau_windows": 1}
"""16-24 steps: the loss rules judge windows of 6, MSD203 one of them after the first (the default wants 3 more)."""

# scenario -> (run, true cause, symptoms the run must show)
SCENARIOS = {
    "lr-far-too-low": (Run(epochs=2, lr=1e-7, options=SHORT_RUN),
                       "learning-rate-too-low", {"MSD111", "MSD203", "MSD210"}),
    "layer-frozen-requires-grad": (Run(net=_frozen_first_layer, epochs=2), "layer-frozen", {"MSD102"}),
    "layer-frozen-zero-lr-group": (Run(epochs=2, optimizer=_zero_lr_for_first_layer, options=SHORT_RUN),
                                   "layer-frozen", {"MSD209", "MSD111"}),
    "nan-in-data": (Run(net=lambda: MLP(act=nn.Tanh()), data={"nan_row": 3}),
                    "nan-in-input-data", {"MSD201", "MSD301"}),
    # ReLU maps NaN to 0: the loss stays finite. The "dead" ReLUs after that are not reported: they ran on NaN weights
    "nan-in-data-hidden-by-relu": (Run(data={"nan_row": 3}), "nan-in-input-data", {"MSD301", "MSD206"}),
    "lr-far-too-high": (Run(lr=50.0), "learning-rate-too-high", {"MSD111", "MSD211", "MSD201"}),
    "dead-relus-from-negative-bias": (Run(net=lambda: MLP(bias=-100.0)), "dead-relus", {"MSD212"}),
    "saturated-sigmoid": (Run(net=lambda: MLP(act=nn.Sigmoid(), bias=50.0)),
                          "vanishing-gradients", {"MSD213", "MSD207"}),
    "softmax-before-logits-loss": (Run(net=lambda: MLP(softmax=True), epochs=2, options=SHORT_RUN),
                                   "loss-activation-mismatch", {"MSD107", "MSD203"}),
    "inputs-not-normalised": (Run(data={"scale": 1000.0}, lr=0.01),
                              "inputs-not-normalised", {"MSD304", "MSD211"}),
    "random-labels": (Run(net=lambda: MLP(hidden=4), data={"random_labels": True}, epochs=3, lr=0.01,
                          options={"eval_dataset": _data(seed=1), "probe_every": 4, **SHORT_RUN}),
                      "labels-do-not-match-inputs", {"MSD402", "MSD203"}),
    "overfitting-a-small-training-set": (Run(net=lambda: MLP(hidden=256), data={"n": 32}, epochs=8, lr=0.1,
                                             options={"eval_dataset": _data(128, seed=1), "probe_every": 8}),
                                         "too-little-data", {"MSD401", "MSD307"}),
}


@functools.cache
def _trained(scenario: str) -> Doctor:
    return SCENARIOS[scenario][0].train()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_training_run_ranks_the_true_cause_first(scenario):
    _, cause, symptoms = SCENARIOS[scenario]
    doctor = _trained(scenario)
    ranked = [c["id"] for c in doctor.report.meta["diagnosis"]["causes"]]
    assert symptoms <= doctor.report.codes(), (sorted(doctor.report.codes()), ranked)
    assert ranked and ranked[0] == cause, (sorted(doctor.report.codes()), ranked)


def test_overfitting_remedies_come_next_to_the_small_data_cause():
    causes = _trained("overfitting-a-small-training-set").report.meta["diagnosis"]["causes"]
    assert [c["id"] for c in causes[:2]] == ["too-little-data", "overfitting"]
    remedies = " ".join(causes[0]["remedies"] + causes[1]["remedies"]).lower()
    assert "more data" in remedies and "regularisation" in remedies
