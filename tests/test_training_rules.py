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


def test_loss_not_decreasing_over_several_windows():
    # loss_window 5, plateau_windows 3: the first window, then three more, each less than 5 % below it
    (f,) = rules.loss_not_decreasing(losses([1.0] * 5 + [0.97] * 15), CONFIG)
    assert f.code == "MSD203" and f.step == 20 and f.evidence["windows"] == 3
    assert rules.loss_not_decreasing(losses([1.0] * 5 + [0.94] * 15), CONFIG) == []  # 6 % lower
    assert rules.loss_not_decreasing(losses([1.0] * 19), CONFIG) == []  # needs four windows
    # one of the three windows got 6 % lower: the loss is moving, not stuck
    assert rules.loss_not_decreasing(losses([1.0] * 5 + [0.97] * 5 + [0.94] * 5 + [0.97] * 5), CONFIG) == []


def test_one_window_without_improvement_is_not_a_plateau():
    """Issue 13: a healthy LeNet sits on its initial plateau (1.39 -> 1.36) for a window before the loss falls."""
    assert rules.loss_not_decreasing(losses([1.39] * 5 + [1.36] * 5), CONFIG) == []
    assert rules.loss_not_decreasing(losses([1.39] * 5 + [1.36] * 10), CONFIG) == []
    stuck = rules.loss_not_decreasing(losses([1.39] * 5 + [1.36] * 15), CONFIG)
    assert codes(stuck) == ["MSD203"]


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


def test_dead_units_of_a_tiny_layer_must_be_more_than_binomial_noise():
    """Issue 13: MobileNetV3's first squeeze-excite ReLU has 8 units; 6 of 8 off on a whole batch (75 %) is what a
    healthy one shows at a slightly higher learning rate. 7 of 8 is beyond noise; on 256 units 60 % is too."""
    def history(dead, units):
        act = {"se.relu": ActivationStats("relu", 0.3, dead_fraction=0.7, dead_unit_fraction=dead / units,
                                          units=units)}
        return TrainingHistory(steps=[probed(1, acts=act), probed(50, acts=act)])

    assert rules.dead_relu(history(6, 8), CONFIG) == []
    (f,) = rules.dead_relu(history(7, 8), CONFIG)
    assert f.location == {"cell": "se.relu"} and f.evidence["units"] == 8
    assert f.evidence["lower_bound"] == pytest.approx(0.589, abs=1e-3) and "7 of 8" in f.message
    assert codes(rules.dead_relu(history(154, 256), CONFIG)) == ["MSD212"]  # 60 %
    assert rules.dead_relu(history(134, 256), CONFIG) == []  # 52 %: within noise of the threshold
    raw = dataclasses.replace(CONFIG, dead_unit_z=0.0)  # the raw fraction, as before
    assert codes(rules.dead_relu(history(6, 8), raw)) == ["MSD212"]


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


# --- "does it still hold": the loss rules' form for the finding lifecycle ----------------------------------------


def test_divergence_still_holds_on_a_high_plateau_not_after_a_recovered_spike():
    config = DoctorConfig()  # loss_window 20, rolling median over 10 steps
    falling = [2.3 - 0.01 * i for i in range(30)]
    spike = falling + [15.0] * 30 + [2.0 - 0.01 * i for i in range(60)]  # warm-up spike, recovered
    (f,) = rules.loss_diverging(losses(spike), config)  # it was diverging at the spike...
    assert 30 < f.step <= 60
    assert rules.loss_still_diverged(losses(spike), config) == []  # ...and no longer is
    plateau = falling + [6.0] * 80  # diverged, then stuck high: still open
    assert rules.loss_diverging(losses(plateau), config) and rules.loss_still_diverged(losses(plateau), config)
    trend = [1.0, 0.5, 0.4, 0.5, 0.55, 0.6, 0.7, 0.79] + [0.79] * 10  # rose by 98 %, stays there (under 2x)
    assert codes(rules.loss_still_diverged(losses(trend), RAW)) == ["MSD202"]


def test_oscillation_and_exploding_gradient_judged_at_the_end():
    swing_then_calm = [2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0] + [0.5] * 6
    assert codes(rules.loss_oscillating(losses(swing_then_calm), CONFIG)) == ["MSD204"]
    assert rules.loss_oscillating(losses(swing_then_calm), CONFIG, latest=True) == []
    assert codes(rules.loss_oscillating(losses([2.0, 1.0] * 5), CONFIG, latest=True)) == ["MSD204"]
    spike = TrainingHistory(steps=[probed(i, {"w": v}) for i, v in enumerate([1.0, 100.0, 1.0, 1.2], 1)])
    assert codes(rules.exploding_gradient(spike, CONFIG)) == ["MSD208"]
    assert rules.exploding_gradient(spike, CONFIG, latest=True) == []
    assert codes(rules.exploding_gradient(spike, dataclasses.replace(CONFIG, exploding_grad_ratio=1.1),
                                          latest=True)) == ["MSD208"]


def test_every_transient_code_has_a_current_rule_and_nothing_else_does():
    transient = {"MSD202", "MSD203", "MSD204", "MSD207", "MSD208", "MSD209", "MSD210", "MSD211", "MSD212", "MSD213",
                 "MSD216"}
    assert set(rules.CURRENT_RULES) == transient


# --- probe rules at any probe_every ------------------------------------------------------------------------------


def test_probe_rules_see_probes_200_steps_apart():
    """Issue 13: a fixed 64-step look-back found one probe at probe_every=200, so no probe rule ever fired."""
    dead = {"relu": ActivationStats("relu", 0.0, dead_fraction=1.0, order=0)}
    steps = [probed(s, {"fc.weight": 0.1}, dead) if s in (1, 200, 400) else StepSignals(step=s, loss=1.0)
             for s in range(1, 401)]
    (f,) = rules.dead_relu(TrainingHistory(steps=steps), CONFIG)
    assert f.step == 400 and f.location == {"cell": "relu"}
    alive = {"relu": ActivationStats("relu", 0.3, dead_fraction=0.5, order=0)}
    steps[199] = probed(200, {"fc.weight": 0.1}, alive)  # healthy at one of the two last probes: quiet
    assert rules.dead_relu(TrainingHistory(steps=steps), CONFIG) == []


# --- MSD115: shifts a normalization cancels -------------------------------------------------------------------------


def _cell_probes(grads, steps=(50, 100)):
    return [StepSignals(step=i, grad_rms=dict(grads), grad_norm=dict(grads), update_abs={n: 0.0 for n in grads},
                        weight_mean_abs={n: 1e-8 for n in grads}) for i in steps]


def test_projection_batchnorm_beta_is_redundant_not_frozen():
    """MobileNetV3's linear-bottleneck projection BN: beta's gradient 3e-7 of gamma's, |dw| ~ 1e-11 (measured)."""
    order = ["proj.bn.gamma", "proj.bn.beta"]
    history = TrainingHistory(steps=_cell_probes({"proj.bn.gamma": 5.4e-3, "proj.bn.beta": 1.3e-9}),
                              parameter_order=order)
    history.steps[0].update_abs["proj.bn.gamma"] = history.steps[1].update_abs["proj.bn.gamma"] = 5e-5
    assert rules.weights_not_updating(history, CONFIG) == []
    (f,) = rules.redundant_parameter(history, CONFIG)
    assert f.code == "MSD115" and f.severity.value == "info" and f.location["parameter"] == "proj.bn.beta"
    assert f.evidence["sibling"] == "proj.bn.gamma" and f.evidence["grad_ratio"] == pytest.approx(1.3e-9 / 5.4e-3)
    assert "proj.bn.beta" in f.message and "2.4e-07" in f.message


def test_a_cell_cut_from_the_loss_is_frozen_not_redundant():
    order = ["head.bn.gamma", "head.bn.beta"]
    history = TrainingHistory(steps=_cell_probes({"head.bn.gamma": 0.0, "head.bn.beta": 0.0}), parameter_order=order)
    assert {f.location["parameter"] for f in rules.weights_not_updating(history, CONFIG)} == set(order)
    assert rules.redundant_parameter(history, CONFIG) == []
    # a beta that learns (within 10x of its gamma) is neither
    learning = TrainingHistory(steps=_cell_probes({"bn.gamma": 5e-3, "bn.beta": 1e-3}), parameter_order=["bn.beta"])
    assert rules.redundant_parameter(learning, CONFIG) == []


# --- MSD207 / MSD210: judged by whether the layer learns ----------------------------------------------------------


def _layers(grads, ratios, steps=(50, 100, 150)):
    """Probed steps with these gradient RMS/norms and update ratios per weight (all 2-D)."""
    history = TrainingHistory(parameter_order=list(grads), parameter_shapes={n: [4, 4] for n in grads})
    for step in steps:
        history.append(StepSignals(step=step, loss=1.0, grad_rms=dict(grads), grad_norm=dict(grads),
                                   update_ratio=dict(ratios), update_abs={n: 1e-3 for n in grads}))
    return history


def test_a_tiny_gradient_that_still_moves_the_layer_is_not_vanishing():
    """ConvNeXt under AdamW (mindcv, measured): pointwise convs with RMS |g| 3e-8 move at 0.7-1.1x their peers."""
    grads = {"stem.weight": 1e-2, "block.pwconv.weight": 3e-8, "block.dwconv.weight": 1e-3, "head.weight": 1e-2}
    adam = _layers(grads, {n: 1e-3 for n in grads})
    assert rules.vanishing_gradient(adam, CONFIG) == []
    sgd = _layers(grads, {**{n: 1e-3 for n in grads}, "block.pwconv.weight": 1e-8})  # moves 1e-5x its peers
    (f,) = rules.vanishing_gradient(sgd, CONFIG)
    assert f.location["parameter"] == "block.pwconv.weight" and f.evidence["relative_update"] == pytest.approx(1e-5)
    unmeasured = _layers(grads, {})  # no update ratios: the gradient alone decides, as before
    assert codes(rules.vanishing_gradient(unmeasured, CONFIG)) == ["MSD207"]


def test_first_to_last_gradient_ratio_also_needs_the_first_layer_to_lag():
    grads = {"first.weight": 5e-7, "mid.weight": 1e-4, "last.weight": 5e-3}  # first/last 1e-4 < 1e-3
    lagging = _layers(grads, {"first.weight": 4e-7, "mid.weight": 1e-5, "last.weight": 2.4e-4})  # 1.7e-3x
    (f,) = rules.vanishing_gradient(lagging, CONFIG)
    assert f.location["parameter"] == "first.weight" and "first_last_ratio" in f.evidence
    normalised = _layers(grads, {"first.weight": 2e-4, "mid.weight": 2e-4, "last.weight": 2.4e-4})  # Adam: 0.8x
    assert rules.vanishing_gradient(normalised, CONFIG) == []


def test_update_ratio_too_small_when_the_network_is_slow_or_one_layer_lags_far_behind():
    grads = {f"l{i}.weight": 1e-2 for i in range(5)}
    slow = _layers(grads, {n: 5e-5 for n in grads})  # SGD lr=1e-5: every layer
    assert len(rules.update_ratio_too_small(slow, CONFIG)) == 5
    healthy = {n: 3e-3 for n in grads}
    depthwise = _layers(grads, {**healthy, "l2.weight": 5e-5})  # 1.7e-2 of the median: ShuffleNetV2's dwconv
    assert rules.update_ratio_too_small(depthwise, CONFIG) == []
    group = _layers(grads, {**healthy, "l2.weight": 2e-6})  # 7e-4 of the median: its group's lr is 1000x off
    (f,) = rules.update_ratio_too_small(group, CONFIG)
    assert f.location["parameter"] == "l2.weight" and "group" in f.suggestion


def test_update_ratio_judged_as_at_the_schedules_peak():
    grads = {f"l{i}.weight": 1e-2 for i in range(3)}
    annealed = _layers(grads, {n: 5e-6 for n in grads})  # cosine tail: lr at 0.5 % of its peak
    assert len(rules.update_ratio_too_small(annealed, CONFIG)) == 3  # rate unknown: judged as it is
    for s in annealed.steps:
        s.learning_rate = 5e-4
    annealed.peak_learning_rate = 0.1
    assert rules.update_ratio_too_small(annealed, CONFIG) == []  # 5e-6 x 200 = 1e-3 at the peak


def test_too_few_probes_names_the_rules_that_could_not_judge_and_the_probe_every_that_would():
    """Issue 13 follow-up: a 16-step run probes step 1 (and, forced, its last step) only; the probe rules that need
    more probes must say so instead of staying silent."""
    def run(probed_steps, steps=16):
        return TrainingHistory(steps=[StepSignals(step=i, loss=1.0, grad_norm={"w": 1.0} if i in probed_steps else {})
                                      for i in range(1, steps + 1)])

    codes_ = rules.PROBE_CODES
    assert rules.probes_needed(CONFIG)["MSD212"] == 2 and rules.probes_needed(CONFIG)["MSD210"] == 4
    (f,) = rules.too_few_probes(run({1, 16}), CONFIG, codes_)
    assert f.code == "MSD002" and f.location == {"check": "probe-count"}
    assert f.evidence["codes"] == ["MSD210", "MSD211"] and f.evidence["probed_steps"] == 2
    assert "probe_every=4" in f.message and "steps 1, 16" in f.message
    (one,) = rules.too_few_probes(run({1}, steps=3), CONFIG, codes_)
    assert {"MSD207", "MSD212", "MSD210"} <= set(one.evidence["codes"]) and "train at least 4 steps" in one.message
    assert rules.too_few_probes(run({1, 5, 10, 15}), CONFIG, codes_) == []  # enough for every rule
    assert rules.too_few_probes(run({1, 16}), CONFIG, ("MSD212",)) == []  # MSD210/211 ignored by the user


def test_update_ratio_judged_as_at_the_peak_of_the_parameters_own_learning_rate_group():
    """mindyolo's recipe: biases warm down from lr 0.1, weights warm up to 0.01, then both decay. Scaled by the
    optimizer's peak (the bias group's), a weight group whose own rate is 1000x too small looked healthy."""
    grads = {f"l{i}.weight": 1e-2 for i in range(3)}

    def history(weight_ratio, weight_rates):
        h = _layers({**grads, "l0.bias": 1e-2}, {**{n: weight_ratio for n in grads}, "l0.bias": 1e-3})
        h.parameter_shapes["l0.bias"] = [4]
        h.lr_groups = {**{n: 0 for n in grads}, "l0.bias": 1}
        for s, rate in zip(h.steps, weight_rates):
            s.group_learning_rates = [rate, 1e-3]
            s.learning_rate = max(rate, 1e-3)
        h.group_peak_learning_rates, h.peak_learning_rate = [max(weight_rates), 1.0], 1.0
        return h

    stuck = history(5e-6, [1e-5] * 3)  # the weights' own rate is constant and tiny
    assert len(rules.update_ratio_too_small(stuck, CONFIG)) == 3
    assert "peak" not in rules.update_ratio_too_small(stuck, CONFIG)[0].message  # not lowered by its schedule
    decayed = history(5e-6, [1e-4, 1e-4, 1e-4])  # ...at 1 % of its own peak 1e-2 (the peak was taken earlier)
    decayed.group_peak_learning_rates[0] = 1e-2
    assert rules.update_ratio_too_small(decayed, CONFIG) == []


def test_a_gradient_no_loss_term_reaches_is_named_as_such():
    """mindyolo YOLOv8-n on small objects (measured): the unassigned levels' box branches get 5e-15 and exactly 0
    while the median layer gets about 1e-3 - no gradient at all, not one that fades through depth."""
    grads = {"stem.weight": 1e-2, "neck.weight": 1e-3, "box_p5.weight": 0.0, "box_p4.weight": 5e-15,
             "head.weight": 1e-3}
    history = _layers(grads, {**{n: 1e-3 for n in grads}, "box_p5.weight": 0.0, "box_p4.weight": 1e-9})
    found = {f.location["parameter"]: f for f in rules.vanishing_gradient(history, CONFIG)}
    assert set(found) == {"box_p5.weight", "box_p4.weight"}
    for f in found.values():
        assert "gets no gradient" in f.message and "no loss term reaches it" in f.message and f.evidence["no_gradient"]
        assert "loss reaches this parameter" in f.suggestion


def test_a_gradient_that_fades_through_depth_still_vanishes():
    """A deep sigmoid stack's first layer: 1e-8 against a median 1e-4 is small, but it is a gradient."""
    grads = {"first.weight": 1e-8, "mid.weight": 1e-4, "last.weight": 1e-3}
    history = _layers(grads, {"first.weight": 1e-9, "mid.weight": 1e-4, "last.weight": 1e-3})
    (f,) = rules.vanishing_gradient(history, CONFIG)
    assert "vanish" in f.message and not f.evidence["no_gradient"] and "ReLU-family" in f.suggestion


def test_a_network_the_loss_never_reaches_gets_no_gradient_anywhere():
    """The optimizer built from a stale instance: every parameter it holds gets exactly 0."""
    grads = {"conv.weight": 0.0, "fc.weight": 0.0}
    found = rules.vanishing_gradient(_layers(grads, {n: 0.0 for n in grads}), CONFIG)
    assert len(found) == 2 and all("gets no gradient" in f.message and "most layers" in f.message for f in found)
