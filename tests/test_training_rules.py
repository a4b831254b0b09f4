"""MSD2xx rules as pure functions over hand-built signals: one positive and one near miss each."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import training as rules
from mindspore_doctor.signals import ActivationStats, StepSignals, TrainingHistory

CONFIG = DoctorConfig(loss_window=5)


def losses(values, **kw):
    return TrainingHistory(steps=[StepSignals(step=i + 1, loss=v) for i, v in enumerate(values)], **kw)


def codes(findings):
    return [f.code for f in findings]


def test_nonfinite_loss_reports_first_bad_step():
    (f,) = rules.nonfinite_loss(losses([1.0, 0.9, math.nan, math.inf]), CONFIG)
    assert f.step == 3
    assert rules.nonfinite_loss(losses([1.0, 1e30]), CONFIG) == []


RAW = DoctorConfig(loss_window=5, diverge_smoothing=1)  # the window logic on the raw losses


def test_diverging_loss():
    (f,) = rules.loss_diverging(losses([1.0, 0.5, 0.4] + [1.0] * 5), RAW)
    assert f.code == "MSD202" and f.step == 8
    assert rules.loss_diverging(losses([1.0, 0.5, 0.4] + [0.79] * 5), RAW) == []  # just under 2x


def test_diverging_loss_rising_trend_below_the_factor():
    # window of 5: rises on every step, +60 % fitted rise, never back to the running minimum 0.4: fires
    (f,) = rules.loss_diverging(losses([1.0, 0.5, 0.4, 0.5, 0.55, 0.6, 0.7, 0.79]), RAW)
    assert f.step == 8 and f.evidence["up_fraction"] == 1.0 and f.evidence["trend_rise"] >= 0.5
    assert "rose steadily" in f.message
    # same rise, but one step of the window gets back to the best loss: noise around a plateau, quiet
    assert rules.loss_diverging(losses([1.0, 0.5, 0.4, 0.5, 0.55, 0.4, 0.7, 0.79]), RAW) == []
    # steady but slow drift (+20 %): quiet
    assert rules.loss_diverging(losses([1.0, 0.5, 0.4, 0.45, 0.46, 0.48, 0.5, 0.52]), RAW) == []


def test_loss_not_decreasing():
    assert codes(rules.loss_not_decreasing(losses([1.0] * 5 + [0.97] * 5), CONFIG)) == ["MSD203"]
    assert rules.loss_not_decreasing(losses([1.0] * 5 + [0.94] * 5), CONFIG) == []
    assert rules.loss_not_decreasing(losses([1.0] * 9), CONFIG) == []  # needs two windows


def test_loss_oscillating():
    swing = [2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    assert codes(rules.loss_oscillating(losses(swing), CONFIG)) == ["MSD204"]
    jitter = [2.0, 1.9, 1.95, 1.85, 1.9, 1.8, 1.85]  # alternates, but by 5 % of the initial loss
    assert rules.loss_oscillating(losses(jitter), CONFIG) == []


def test_loss_suspiciously_low_only_in_the_first_steps():
    assert codes(rules.loss_suspiciously_low(losses([1e-6, 1.0]), CONFIG)) == ["MSD205"]
    assert rules.loss_suspiciously_low(losses([1.0, 1.0, 1.0, 1e-6]), CONFIG) == []


@pytest.mark.parametrize("first, fires", [(9.0, True), (0.1, True), (2.5, False)])
def test_unexpected_initial_loss(first, fires):
    history = losses([first], num_classes=10)  # ln(10) = 2.30
    assert bool(rules.unexpected_initial_loss(history, CONFIG)) is fires


def probed(step, grads=None, acts=None, **kw):
    grads = grads or {}
    return StepSignals(step=step, grad_norm={k: v for k, v in grads.items()},
                       grad_rms={k: v for k, v in grads.items()}, activations=acts or {}, **kw)


def test_nonfinite_tensor_names_first_cell_in_network_order():
    acts = {"late": ActivationStats("relu", math.nan, nonfinite=4, order=2),
            "early": ActivationStats("relu", math.inf, nonfinite=1, order=1)}
    history = TrainingHistory(steps=[probed(1, {"a.weight": 1.0}), probed(5, {"a.weight": 1.0}, acts,
                                                                           grad_nonfinite={"a.weight": 3})],
                              parameter_order=["a.weight"])
    (f,) = rules.nonfinite_tensor(history, CONFIG)
    assert f.step == 5 and f.location == {"cell": "early"}
    clean = TrainingHistory(steps=[probed(1, {"a.weight": 1.0}, grad_nonfinite={"a.weight": 0})])
    assert rules.nonfinite_tensor(clean, CONFIG) == []


def test_vanishing_gradient_needs_persistence():
    order = ["first.weight", "last.weight"]
    tiny = {"first.weight": 1e-9, "last.weight": 1e-2}
    history = TrainingHistory(steps=[probed(1, tiny), probed(2, tiny)], parameter_order=order)
    (f,) = rules.vanishing_gradient(history, CONFIG)
    assert f.location["parameter"] == "first.weight"
    once = TrainingHistory(steps=[probed(1, {"first.weight": 1.0, "last.weight": 1.0}), probed(2, tiny)],
                           parameter_order=order)
    assert rules.vanishing_gradient(once, CONFIG) == []


def test_exploding_gradient():
    grow = TrainingHistory(steps=[probed(i, {"w": 3.0 ** i}) for i in range(1, 6)])
    assert codes(rules.exploding_gradient(grow, CONFIG)) == ["MSD208"]
    steady = TrainingHistory(steps=[probed(i, {"w": 1.5 ** i}) for i in range(1, 6)])  # 1.5x per probe, 7.6x total
    assert rules.exploding_gradient(steady, CONFIG) == []


def test_saturated_activation_and_dead_relu_read_the_right_kinds():
    act = {"sig": ActivationStats("sigmoid", 1.0, saturated_fraction=0.9995, order=0),
           "relu": ActivationStats("relu", 0.0, dead_fraction=0.998, order=1)}
    history = TrainingHistory(steps=[probed(1, acts=act), probed(2, acts=act)])
    assert codes(rules.saturated_activation(history, CONFIG)) == ["MSD213"]
    assert rules.dead_relu(history, CONFIG) == []  # 99.8 % dead is under the 99.9 % threshold


def test_dead_relu_units_dead_on_most_of_the_layer():
    def history(unit_fraction):
        act = {"relu": ActivationStats("relu", 0.3, dead_fraction=0.8, dead_unit_fraction=unit_fraction)}
        return TrainingHistory(steps=[probed(1, acts=act), probed(2, acts=act)])

    (f,) = rules.dead_relu(history(0.625), CONFIG)  # 80 % of outputs <= 0: under 99.9 %, but 62.5 % of units dead
    assert f.location == {"cell": "relu"} and f.evidence["dead_unit_fraction"] == 0.625
    assert rules.dead_relu(history(0.375), CONFIG) == []
    assert rules.dead_relu(history(-1.0), CONFIG) == []  # not measured (batch too small)


def test_activation_exploding_needs_growth_through_the_network():
    growing = {f"a{i}": ActivationStats("relu", m, order=i) for i, m in enumerate([1.0, 5.0, 30.0])}
    shrinking = {f"a{i}": ActivationStats("relu", m, order=i) for i, m in enumerate([30.0, 5.0, 1.0])}
    assert codes(rules.activation_exploding(TrainingHistory(steps=[probed(1, acts=growing)]), CONFIG)) == ["MSD216"]
    assert rules.activation_exploding(TrainingHistory(steps=[probed(1, acts=shrinking)]), CONFIG) == []


def test_loss_scale_overflow_ignores_the_calibration_phase():
    calibrating = [True] * 5 + [False] * 20
    history = TrainingHistory(steps=[StepSignals(i, 1.0, overflow=o) for i, o in enumerate(calibrating)])
    assert rules.loss_scale_overflow(history, CONFIG) == []
    flaky = [False, True] * 10
    history = TrainingHistory(steps=[StepSignals(i, 1.0, overflow=o) for i, o in enumerate(flaky)])
    assert codes(rules.loss_scale_overflow(history, CONFIG)) == ["MSD214"]


def test_train_mode_off():
    (f,) = rules.train_mode_off(["head.bn"], step=3)
    assert f.code == "MSD105" and f.location == {"cell": "head.bn"}
    assert rules.train_mode_off([], step=3) == []


def test_history_round_trips_through_json_dict():
    history = TrainingHistory(steps=[probed(1, {"w": 1.0})], parameter_order=["w"], parameter_shapes={"w": [2, 3]})
    assert TrainingHistory.from_dict(history.to_dict()) == history


def test_diverging_ignores_one_lucky_batch_and_jitter_near_zero():
    config = DoctorConfig()  # loss_window 20: a rolling median over 5 steps
    noisy = [1.4, 1.0, 0.7] + [0.25, 0.15, 0.2, 0.3, 0.18] * 6
    noisy[10] = 0.01  # one lucky batch: 20 ordinary batches are all above 2x it
    assert rules.loss_diverging(losses(noisy), config) == []
    near_zero = [1.4] + [1e-7] * 20 + [4e-6] * 25  # 40x its minimum, but nothing that matters
    assert rules.loss_diverging(losses(near_zero), config) == []
    jump = [1.4, 1.0, 0.7] + [0.2] * 20 + [0.9] * 25  # an lr schedule that jumps: still caught
    (f,) = rules.loss_diverging(losses(jump), config)
    assert 23 < f.step <= 48


def test_vanishing_gradient_quiet_once_the_model_has_converged():
    tiny = {"first.weight": 1e-9, "last.weight": 1e-8}

    def history(late_loss):
        steps = [probed(s, tiny) if s in (1, 50) else StepSignals(step=s) for s in range(1, 51)]
        for s in steps:
            s.loss = 1.4 if s.step < 5 else late_loss
        return TrainingHistory(steps=steps, parameter_order=["first.weight", "last.weight"])

    assert rules.vanishing_gradient(history(1e-4), CONFIG) == []  # the loss fell 10000x: it learned
    assert set(codes(rules.vanishing_gradient(history(1.38), CONFIG))) == {"MSD207"}  # stuck near ln(4)


def test_probe_rules_stop_judging_once_weights_are_nonfinite():
    dead = {"relu": ActivationStats("relu", 0.0, dead_fraction=1.0)}
    nan_weights = {"fc.weight": 1}
    after_nan = TrainingHistory(steps=[probed(1, acts=dead, weight_nonfinite=nan_weights),
                                       probed(2, acts=dead, weight_nonfinite=nan_weights)])
    assert rules.dead_relu(after_nan, CONFIG) == []
    before = TrainingHistory(steps=[probed(1, acts=dead), probed(2, acts=dead)])
    assert codes(rules.dead_relu(before, CONFIG)) == ["MSD212"]


def test_bias_cancelled_by_batchnorm_is_not_a_frozen_weight():
    def step(i, bias_grad):
        return StepSignals(step=i, grad_rms={"fc.weight": 0.01, "fc.bias": bias_grad},
                           grad_norm={"fc.weight": 0.1, "fc.bias": bias_grad},
                           update_abs={"fc.weight": 1e-3, "fc.bias": 0.0},
                           weight_mean_abs={"fc.weight": 0.1, "fc.bias": 0.1})

    order = ["fc.weight", "fc.bias"]
    cancelled = TrainingHistory(steps=[step(1, 0.0), step(2, 2e-9)], parameter_order=order)  # rounding noise
    assert rules.weights_not_updating(cancelled, CONFIG) == []
    zero_lr = TrainingHistory(steps=[step(1, 0.01), step(2, 0.01)], parameter_order=order)  # has a gradient
    (f,) = rules.weights_not_updating(zero_lr, CONFIG)
    assert f.location["parameter"] == "fc.bias"


def updates(ratios, update_abs=1e-3):
    """Probed steps 1, 50, 100, ... with these update ratios of `fc.weight` (shape 2-D)."""
    steps = [StepSignals(step=1 if i == 0 else 50 * i, loss=1.0, grad_norm={"fc.weight": 1.0},
                         update_ratio={"fc.weight": r}, update_abs={"fc.weight": update_abs})
             for i, r in enumerate(ratios)]
    return TrainingHistory(steps=steps, parameter_order=["fc.weight"], parameter_shapes={"fc.weight": [4, 4]})


def test_update_ratio_too_large_on_one_huge_step_even_the_first():
    (f,) = rules.update_ratio_too_large(updates([0.9]), CONFIG)  # Adam lr=0.1 on weights of about 0.1
    assert f.step == 1 and "single probed step" in f.message
    assert rules.update_ratio_too_large(updates([0.3, 0.01, 0.01, 0.01]), CONFIG) == []  # a big but sane first step
    assert codes(rules.update_ratio_too_large(updates([0.01, 0.2, 0.2, 0.2]), CONFIG)) == ["MSD211"]


def test_update_ratio_too_small_is_not_advised_after_the_layer_blew_up():
    assert codes(rules.update_ratio_too_small(updates([0.01, 5e-5, 5e-5, 5e-5]), CONFIG)) == ["MSD210"]
    assert rules.update_ratio_too_small(updates([0.9, 5e-5, 5e-5, 5e-5]), CONFIG) == []  # units died from step 1


def test_a_tiny_but_real_update_is_not_a_frozen_weight():
    def history(update_abs):
        steps = [StepSignals(step=s, grad_rms={"fc.weight": 0.07}, grad_norm={"fc.weight": 1.0},
                             update_abs={"fc.weight": update_abs}, weight_mean_abs={"fc.weight": 0.16})
                 for s in (50, 100)]
        return TrainingHistory(steps=steps, parameter_order=["fc.weight"])

    assert rules.weights_not_updating(history(7e-7), CONFIG) == []  # SGD lr=1e-5: slow (MSD210), not frozen
    assert codes(rules.weights_not_updating(history(0.0), CONFIG)) == ["MSD209"]


def test_one_small_init_weight_moving_by_its_size_is_not_a_burst():
    def first_step(ratios):
        step = StepSignals(step=1, loss=1.0, grad_norm={n: 1.0 for n in ratios}, update_ratio=ratios,
                           update_abs={n: 1e-3 for n in ratios})
        return TrainingHistory(steps=[step], parameter_order=list(ratios),
                               parameter_shapes={n: [4, 4] for n in ratios})

    head_only = {"body.weight": 0.02, "mid.weight": 0.03, "head.weight": 0.9}  # Adam on a tiny-init head
    assert rules.update_ratio_too_large(first_step(head_only), CONFIG) == []
    everything = {"body.weight": 0.7, "mid.weight": 0.6, "head.weight": 0.9}  # Adam lr=0.1: every layer
    assert {f.location["parameter"] for f in rules.update_ratio_too_large(first_step(everything), CONFIG)} == set(
        everything)


def test_diverging_is_quiet_on_a_noisy_healthy_loss_and_still_catches_a_jump_in_it():
    """Per-step losses of a dropout MLP that trains well swing between 0.07 and 0.46 (tests/data)."""
    data = json.loads((Path(__file__).parent / "data" / "healthy_dropout_mlp_losses.json").read_text())["losses"]
    config = DoctorConfig()
    assert rules.loss_diverging(losses(data), config) == []
    assert codes(rules.loss_diverging(losses(data), dataclasses.replace(config, diverge_noise=0.0))) == ["MSD202"]
    jumped = data[:120] + [4 * v for v in data[120:]]  # the learning rate jumps at step 121
    (f,) = rules.loss_diverging(losses(jumped), config)
    assert 121 < f.step <= 150
