"""MSD201-MSD216: judge training signals (plain numbers) against DoctorConfig thresholds.

Every rule is a pure function ``(TrainingHistory, DoctorConfig) -> list[Finding]``;
none touches MindSpore. Rules re-run on every probed step over a bounded tail of
the history, so a finding appears at the step its condition first holds.
"""
from __future__ import annotations

import functools
import math
import statistics
from typing import Any, Callable, Iterable

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding
from mindspore_doctor.signals import DEAD_AT_ZERO, StepSignals, TrainingHistory

TrainingRule = Callable[[TrainingHistory, DoctorConfig], list[Finding]]
_CLASSIFICATION_HINT = "classification loss (SoftmaxCrossEntropyWithLogits / CrossEntropyLoss / NLLLoss)"


def _param_location(name: str) -> dict[str, str]:
    return {"parameter": name, "cell": name.rsplit(".", 1)[0] if "." in name else ""}


def _is_weight(history: TrainingHistory, name: str) -> bool:
    """Matrices and kernels, not biases or normalisation scales (rank >= 2; unknown shape counts)."""
    shape = history.parameter_shapes.get(name)
    return shape is None or len(shape) >= 2


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _recent_probes(history: TrainingHistory, count: int) -> list[StepSignals]:
    """The last ``count`` probed steps that ran on finite weights, however far apart the probes are.

    Once NaN/Inf reached the weights (MSD206), every later statistic is an after-effect: ReLUs output 0,
    gradients read 0; judging them would bury the cause under "dead" and "vanishing" findings. The probe
    whose update made the weights non-finite still counts: its forward and backward ran before the update.
    """
    broken = next((s.step for s in history.steps if any(s.weight_nonfinite.values())), None)
    probed: list[StepSignals] = []
    for s in reversed(history.steps):  # from the end: cheap at any probe_every, and never misses a probe
        if (s.grad_norm or s.activations) and (broken is None or s.step <= broken):
            probed.append(s)
            if len(probed) == count:
                break
    return probed[::-1]


def _persistent(history: TrainingHistory, config: DoctorConfig, measured: str) -> list[StepSignals]:
    """The last ``persistent_probes`` probes that measured the signal field ``measured``; [] when fewer did."""
    probes = [p for p in _recent_probes(history, config.persistent_probes) if getattr(p, measured)]
    return probes if len(probes) >= config.persistent_probes else []


def _converged(history: TrainingHistory, step: int, config: DoctorConfig) -> bool:
    """The loss around ``step`` is below ``converged_loss_fraction`` of where it started: small gradients
    and updates are then what learning looks like, not a problem."""
    losses = [v for s, v in _finite_losses(history) if s <= step]
    if len(losses) < 2:
        return False
    start, now = statistics.median(losses[:5]), statistics.median(losses[-5:])
    return start > 0 and now < config.converged_loss_fraction * start


# --- loss --------------------------------------------------------------------------------


def nonfinite_loss(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    for s in history.steps:
        if s.loss is not None and not math.isfinite(s.loss):
            return [
                make_finding(
                    "MSD201",
                    f"The loss is {s.loss} at step {s.step}; training cannot recover from a non-finite loss.",
                    step=s.step,
                    evidence={"loss": s.loss, "step": s.step},
                    suggestion="Look at MSD206 for the first tensor that went non-finite and at the repro bundle "
                    "(repro_step<N>.npz) for the batch; guard divisions and logs with an epsilon, lower the "
                    "learning rate, or clip gradients.",
                )
            ]
    return []


def _finite_losses(history: TrainingHistory) -> list[tuple[int, float]]:
    return [(step, loss) for step, loss in history.losses if math.isfinite(loss)]


def _fitted_rise(window: list[float]) -> float:
    """Rise of the least-squares line through ``window``, as a fraction of its fitted start (0 when not positive)."""
    n = len(window)
    x_mean, y_mean = (n - 1) / 2, statistics.fmean(window)
    slope = sum((i - x_mean) * (v - y_mean) for i, v in enumerate(window)) / sum((i - x_mean) ** 2 for i in range(n))
    start = y_mean - slope * x_mean
    return slope * (n - 1) / start if start > 0 and slope > 0 else 0.0


def _rolling_median(values: list[float], width: int) -> list[float]:
    return [statistics.median(values[max(0, i - width + 1) : i + 1]) for i in range(len(values))]


def _smoothed_losses(history: TrainingHistory, config: DoctorConfig) -> tuple[list[int], list[float], float, float]:
    """(steps, rolling-median losses, per-step noise, smallest rise that counts) for MSD202."""
    raw = _finite_losses(history)
    steps = [step for step, _ in raw]
    values = [v for _, v in raw]
    smooth = _rolling_median(values, config.diverge_smoothing)
    noise = 1.4826 * statistics.median(abs(v - m) for v, m in zip(values, smooth)) if values else 0.0  # MAD -> std
    min_rise = max(config.diverge_min_rise * abs(smooth[0]), config.diverge_noise * noise) if smooth else 0.0
    return steps, smooth, noise, min_rise


def _minimised_loss(rule: TrainingRule) -> TrainingRule:
    """A rule that expects the loss to be minimised: silent on an adversarial loss (``TrainingHistory.adversarial``).
    A GAN's generator and discriminator are each trained against the other, so each loss rises whenever the other
    player improves, and swings or plateaus in a healthy game; ``rules/adversarial.py`` judges what goes wrong there."""
    @functools.wraps(rule)
    def judge(history: TrainingHistory, config: DoctorConfig, *args: Any, **kwargs: Any) -> list[Finding]:
        return [] if history.adversarial else rule(history, config, *args, **kwargs)
    return judge


_DIVERGING_FIX = "Lower the learning rate (try 10x smaller), add a warm-up, or clip gradients."


@_minimised_loss
def loss_diverging(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """Loss >= diverge_factor x its running minimum for a window, or a steady rise above that minimum.

    Judged on a rolling median (``diverge_smoothing`` steps): one lucky run of small batches must not become the
    "best loss" that every ordinary batch after it is measured against. The rise must also be at least
    ``diverge_min_rise`` of the initial loss, so jitter of a loss already near zero is not divergence, and
    ``diverge_noise`` robust standard deviations of the per-step loss, so a noisy loss's swings are not either.
    """
    steps, smooth, noise, min_rise = _smoothed_losses(history, config)
    w = config.loss_window
    running_min = math.inf  # minimum of the smoothed losses before the current window
    for end in range(w, len(smooth)):
        running_min = min(running_min, smooth[end - w])
        window = smooth[end - w + 1 : end + 1]
        window_min = min(window)
        step, loss = steps[end], smooth[end]
        if loss - running_min < min_rise:
            continue
        evidence = {"running_min": running_min, "window_min": window_min, "loss": loss, "window": w,
                    "loss_noise": noise}
        if running_min > 0 and window_min >= config.diverge_factor * running_min:
            return [
                make_finding(
                    "MSD202",
                    f"The loss (rolling median) stayed at or above {config.diverge_factor:g}x its running minimum "
                    f"({running_min:.4g}) for {w} steps, up to {loss:.4g} at step {step}: training is diverging.",
                    step=step,
                    evidence=evidence,
                    suggestion=_DIVERGING_FIX,
                )
            ]
        if window_min <= running_min:
            continue  # the window gets back to the best loss so far: no drift
        rise = _fitted_rise(window)
        up = sum(1 for a, b in zip(window, window[1:]) if b > a) / (w - 1)
        if rise >= config.diverge_trend and up >= config.diverge_trend_up:
            return [
                make_finding(
                    "MSD202",
                    f"The loss rose steadily over the last {w} steps (up on {up:.0%} of them, trend +{rise:.0%}, "
                    f"never back to its running minimum {running_min:.4g}), to {loss:.4g} at step {step}: "
                    "training is diverging.",
                    step=step,
                    evidence={**evidence, "trend_rise": rise, "up_fraction": up},
                    suggestion=_DIVERGING_FIX,
                )
            ]
    return []


@_minimised_loss
def loss_still_diverged(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD202 now: the loss has not come back, i.e. its whole last window stays ``min_rise`` above the best loss
    before it. A high plateau after a divergence stays open; a warm-up spike the loss recovered from does not."""
    steps, smooth, noise, min_rise = _smoothed_losses(history, config)
    w = config.loss_window
    if len(smooth) <= w:
        return []
    best, window_min = min(smooth[:-w]), min(smooth[-w:])
    if window_min - best < min_rise:
        return []
    return [make_finding("MSD202", f"The loss (rolling median) is still at least {window_min:.4g}, above its best "
                         f"{best:.4g} by more than {min_rise:.3g}, at step {steps[-1]}.", step=steps[-1],
                         evidence={"running_min": best, "window_min": window_min, "window": w, "loss_noise": noise},
                         suggestion=_DIVERGING_FIX)]


@_minimised_loss
def loss_not_decreasing(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """The loss stays within ``min_improvement`` of its first window over each of the last ``plateau_windows``
    windows: one window without progress is a healthy net still on its initial plateau, not a stuck one."""
    values = [v for _, v in _finite_losses(history)]
    w, k = config.loss_window, config.plateau_windows
    if len(values) < (k + 1) * w:
        return []
    first = statistics.fmean(values[:w])
    means = [statistics.fmean(values[len(values) - (i + 1) * w : len(values) - i * w]) for i in range(k)]
    gains = [(first - m) / abs(first) if first else 0.0 for m in means]
    if max(gains) >= config.min_improvement:
        return []
    last, improvement = means[0], gains[0]
    return [
        make_finding(
            "MSD203",
            f"The mean loss of each of the last {k} windows of {w} steps is less than {config.min_improvement:.0%} "
            f"below the first {w} steps ({first:.4g}); now {last:.4g} ("
            + (f"{improvement:.1%} lower" if improvement >= 0 else f"{last / first:.3g}x" if first > 0 else "above")
            + ").",
            step=_finite_losses(history)[-1][0],
            evidence={"first_window_mean": first, "last_window_mean": last, "improvement": improvement,
                      "best_improvement": max(gains), "window": w, "windows": k},
            suggestion="Check that the optimizer holds the network's parameters and that the learning rate is not "
            "tiny (MSD210), the labels match the inputs, and the loss is wired to the logits (MSD107).",
        )
    ]


@_minimised_loss
def loss_oscillating(history: TrainingHistory, config: DoctorConfig, latest: bool = False) -> list[Finding]:
    """Sign-alternating loss swings over a window; ``latest``: judge the last window only (is it still so)."""
    losses = _finite_losses(history)
    w = config.loss_window
    if len(losses) < w + 1:
        return []
    scale = abs(losses[0][1]) or 1.0
    for end in range(len(losses) - 1 if latest else w, len(losses)):
        window = [v for _, v in losses[end - w : end + 1]]
        diffs = [b - a for a, b in zip(window, window[1:])]
        flips = sum(1 for a, b in zip(diffs, diffs[1:]) if a * b < 0) / max(1, len(diffs) - 1)
        amplitude = statistics.median(abs(d) for d in diffs) / scale
        if flips >= config.oscillation_alternation and amplitude >= config.oscillation_amplitude:
            step = losses[end][0]
            return [
                make_finding(
                    "MSD204",
                    f"The loss swings up and down on {flips:.0%} of the last {w} steps, by a median "
                    f"{amplitude:.0%} of the initial loss: the step size overshoots.",
                    step=step,
                    evidence={"sign_flip_fraction": flips, "relative_amplitude": amplitude, "window": w},
                    suggestion="Lower the learning rate or increase the batch size; with Momentum, lower the momentum.",
                )
            ]
    return []


def _trained_start(history: TrainingHistory) -> bool:
    """The run starts from trained weights (resumed, continued, fine-tuned): its first losses show what the network
    learned before, not what a fresh one does. Unknown counts as fresh: a rule stays quiet only on evidence."""
    return history.start is not None and history.start.fresh is False


def _start_evidence(history: TrainingHistory) -> dict[str, Any]:
    """Why the start was judged fresh, for the evidence of a rule that assumes it."""
    start = history.start
    if start is None:
        return {"fresh_start": None, "start_state": "not measured"}
    return {"fresh_start": start.fresh, "start_state": start.reason}


@_minimised_loss
def loss_suspiciously_low(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """A loss near zero in the first steps of a fresh network; a resumed one may have learned it already."""
    if _trained_start(history):
        return []
    for s in history.steps:
        if s.step > config.early_steps:
            break
        if _finite(s.loss) and abs(s.loss) < config.low_loss:
            return [
                make_finding(
                    "MSD205",
                    f"The loss is already {s.loss:.3g} at step {s.step}, before the model could have learned "
                    "anything: the labels may leak into the inputs, or the loss is not comparing predictions "
                    "with labels.",
                    step=s.step,
                    evidence={"loss": s.loss, "threshold": config.low_loss, **_start_evidence(history)},
                    suggestion="Check the label column is not also an input feature and that the loss receives "
                    "(logits, labels) in that order.",
                )
            ]
    return []


def unexpected_initial_loss(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """The first loss of a fresh classifier far from ln(C); a resumed or fine-tuned one starts where it was."""
    classes = history.num_classes
    first = next((s for s in history.steps if s.loss is not None), None)
    if not classes or classes < 2 or first is None or not _finite(first.loss) or _trained_start(history):
        return []
    step, loss = first.step, first.loss
    expected = math.log(classes)
    if expected / config.initial_loss_factor <= loss <= expected * config.initial_loss_factor:
        return []
    return [
        make_finding(
            "MSD215",
            f"The first loss is {loss:.4g}, but a freshly initialised {classes}-class classifier should start near "
            f"ln({classes}) = {expected:.3g} (off by more than {config.initial_loss_factor:g}x).",
            step=step,
            evidence={"first_loss": loss, "expected": expected, "num_classes": classes, **_start_evidence(history)},
            suggestion="A much larger loss means over-confident init (large final-layer weights or logits scaled up); "
            "a much smaller one means the loss is not a " + _CLASSIFICATION_HINT + " over these outputs.",
        )
    ]


# --- tensors -----------------------------------------------------------------------------


def nonfinite_tensor(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    order = {name: i for i, name in enumerate(history.parameter_order)}
    for s in history.steps:
        if not (s.grad_nonfinite or s.activations):
            continue
        act = sorted(
            (a.order, path) for path, a in s.activations.items() if a.nonfinite or not math.isfinite(a.mean_abs)
        )
        weights = sorted((order.get(n, 1 << 30), n) for n, c in s.weight_nonfinite.items() if c)
        grads = sorted((order.get(n, 1 << 30), n) for n, c in s.grad_nonfinite.items() if c)
        if not (act or weights or grads):
            continue
        if act:
            where, what = {"cell": act[0][1]}, f"the output of `{act[0][1]}`"
        elif grads:
            where, what = _param_location(grads[0][1]), f"the gradient of `{grads[0][1]}`"
        else:
            where, what = _param_location(weights[0][1]), f"the weight `{weights[0][1]}`"
        return [
            make_finding(
                "MSD206",
                f"NaN/Inf first appears in {what} at step {s.step} "
                f"({len(grads)} gradient(s), {len(weights)} weight(s), {len(act)} activation(s) non-finite).",
                location=where,
                step=s.step,
                evidence={
                    "nonfinite_activations": [p for _, p in act],
                    "nonfinite_gradients": [n for _, n in grads],
                    "nonfinite_weights": [n for _, n in weights],
                },
                suggestion="Guard the operation feeding this tensor (epsilon in divisions, clamp before log/sqrt), "
                "lower the learning rate, or clip gradients.",
            )
        ]
    return []


def _learning_peers(history: TrainingHistory, probe: StepSignals) -> float | None:
    """The update ratio the network's learning layers reach at ``probe``: the upper quartile over its weights."""
    ratios = sorted(v for n, v in probe.update_ratio.items() if _is_weight(history, n) and _finite(v))
    return ratios[round(0.75 * (len(ratios) - 1))] if ratios else None


def _median_gradient(history: TrainingHistory, probe: StepSignals) -> float:
    """The median weight's RMS gradient at ``probe`` (0.0 when none was measured)."""
    values = [v for n, v in probe.grad_rms.items() if _is_weight(history, n) and _finite(v)]
    return statistics.median(values) if values else 0.0


def _relative_update(probes: list[StepSignals], name: str,
                     reference: Callable[[StepSignals], float | None]) -> float | None:
    """Median over ``probes`` of ``name``'s update ratio / ``reference``'s; None when no probe measured both."""
    fractions = [p.update_ratio[name] / ref for p in probes
                 if _finite(p.update_ratio.get(name)) and _finite(ref := reference(p)) and ref > 0]
    return statistics.median(fractions) if fractions else None


def _cannot_learn(relative: float | None, config: DoctorConfig) -> bool:
    """A small gradient matters when the layer's updates fall behind too (or were not measured). Adam-family
    optimizers normalise the gradient's scale away, and a layer scale (ConvNeXt's gamma = 1e-6) makes it small by
    design: such a layer moves as fast as its peers, it learns."""
    return relative is None or relative < config.vanishing_update_fraction


_VANISHING_FIX = ("Use ReLU-family activations or residual connections, He/Glorot init, normalisation layers; check "
                  "nothing cuts the gradient (stop_gradient, integer casts).")
_NO_GRADIENT_FIX = ("Check that the loss reaches this parameter: an output computed and dropped (an auxiliary head), a "
                    "branch cut by stop_gradient, a detection level no target is assigned to (match the strides to "
                    "the object sizes), a parameter the optimizer holds that the network no longer uses.")


def vanishing_gradient(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """A weight's RMS gradient below ``vanishing_grad_mean``, or the first layer's gradient norm below
    ``vanishing_grad_ratio`` of the last's, on ``persistent_probes`` probes, while its updates lag behind."""
    probes = _recent_probes(history, config.persistent_probes)
    if len(probes) < config.persistent_probes or not probes[-1].grad_rms:
        return []
    found = []
    last = probes[-1]
    if _converged(history, last.step, config):
        return []
    for name in history.parameter_order:
        if not _is_weight(history, name):
            continue
        values = [p.grad_rms.get(name) for p in probes]
        if not all(_finite(v) and v < config.vanishing_grad_mean for v in values):
            continue
        relative = _relative_update(probes, name, lambda p: _learning_peers(history, p))
        if not _cannot_learn(relative, config):
            continue
        lag = "" if relative is None else f", and it moves {relative:.2g}x as fast as the network's learning layers"
        median = _median_gradient(history, last)
        none = all(v <= config.no_gradient_fraction * _median_gradient(history, p) for p, v in zip(probes, values))
        if none:
            against = f"against {median:.3g} for the median layer" if median else "as for most layers"
            what = (f"`{name}` gets no gradient: RMS |g| = {values[-1]:.3g} {against} on the last {len(probes)} "
                    "probed steps; no loss term reaches it")
        else:
            what = (f"Gradients of `{name}` vanish: RMS |g| = {values[-1]:.3g} < {config.vanishing_grad_mean:g} "
                    f"on the last {len(probes)} probed steps")
        found.append(
            make_finding(
                "MSD207",
                f"{what}{lag}.",
                location=_param_location(name),
                step=last.step,
                evidence={"grad_rms": values[-1], "threshold": config.vanishing_grad_mean,
                          "relative_update": relative, "median_grad_rms": median, "no_gradient": none},
                suggestion=_NO_GRADIENT_FIX if none else _VANISHING_FIX,
            )
        )
    weights = [n for n in history.parameter_order if _is_weight(history, n) and n in last.grad_norm]
    if not found and len(weights) >= 2:
        first, final = weights[0], weights[-1]
        ratios = [p.grad_norm.get(first, 0.0) / p.grad_norm[final] for p in probes if p.grad_norm.get(final)]
        relative = _relative_update(probes, first, lambda p: p.update_ratio.get(final))
        if (len(ratios) == len(probes) and all(_finite(r) and r < config.vanishing_grad_ratio for r in ratios)
                and _cannot_learn(relative, config)):
            found.append(
                make_finding(
                    "MSD207",
                    f"Gradients vanish towards the input: |g| of the first layer `{first}` is {ratios[-1]:.2g}x "
                    f"that of the last layer `{final}` (threshold {config.vanishing_grad_ratio:g})"
                    + ("." if relative is None else f", and its updates {relative:.2g}x."),
                    location=_param_location(first),
                    step=last.step,
                    evidence={"first_last_ratio": ratios[-1], "first": first, "last": final,
                              "relative_update": relative},
                    suggestion="Add normalisation or residual connections; avoid saturating activations "
                    "(Sigmoid/Tanh) in deep stacks.",
                )
            )
    return found


def exploding_gradient(history: TrainingHistory, config: DoctorConfig, latest: bool = False) -> list[Finding]:
    """The global gradient norm grew > ``exploding_grad_growth``x on 3 probes in a row, or to
    ``exploding_grad_ratio``x its first value; ``latest``: judge the last probe only (is it still so)."""
    norms = [(s.step, s.global_grad_norm) for s in history.steps if s.grad_norm]
    norms = [(step, n) for step, n in norms if _finite(n)]
    if len(norms) < 2:
        return []
    first = norms[0][1]
    growth_run = 0
    for (_, prev), (step, cur) in zip(norms, norms[1:]):
        growth_run = growth_run + 1 if prev > 0 and cur > config.exploding_grad_growth * prev else 0
        overall = cur / first if first > 0 else 0.0
        if latest and step != norms[-1][0]:
            continue
        if growth_run >= 3 or overall > config.exploding_grad_ratio:
            return [
                make_finding(
                    "MSD208",
                    f"The global gradient norm exploded to {cur:.4g} at step {step} "
                    f"({overall:.3g}x its first value {first:.3g}; grew >{config.exploding_grad_growth:g}x on "
                    f"{growth_run} consecutive probes).",
                    step=step,
                    evidence={"global_grad_norm": cur, "first": first, "ratio": overall, "growth_run": growth_run},
                    suggestion="Lower the learning rate, clip gradients (ops.clip_by_global_norm), "
                    "or add normalisation layers.",
                )
            ]
    return []


_SHIFT_LEAVES = ("bias", "beta")
"""Per-channel shift parameters: what a following normalization (batch statistics) subtracts again."""


def _cancelled_by_normalization(probes: list[StepSignals], name: str, config: DoctorConfig) -> dict | None:
    """Evidence when ``name`` is a bias/beta whose gradient is rounding noise while its cell's weight/gamma learns.

    A per-channel constant added before a normalization with batch statistics is removed by it, whatever lies
    between them that keeps it per-channel constant: a 1x1 conv, a residual add, a concatenation or channel
    shuffle, pooling (the linear-bottleneck projection BatchNorms of MobileNetV2/V3 and ShuffleNetV2, a conv bias
    before BatchNorm). Its gradient is then ~0 on every probe (below ``redundant_grad_ratio`` of its sibling's):
    redundant, not frozen. A frozen or cut-off cell gets no gradient anywhere, the sibling included.
    """
    cell, _, leaf = name.rpartition(".")
    if leaf not in _SHIFT_LEAVES:
        return None
    siblings = [n for n in probes[-1].grad_rms if n != name and n.rpartition(".")[0] == cell]
    if not siblings:
        return None
    ratios = []
    for p in probes:
        own = p.grad_rms.get(name)
        sibling = max(siblings, key=lambda n: p.grad_rms.get(n, 0.0))
        other = p.grad_rms.get(sibling, 0.0)
        if not (_finite(own) and _finite(other) and other > 0 and own < config.redundant_grad_ratio * other):
            return None
        ratios.append((own / other, own, sibling, other))
    ratio, own, sibling, other = max(ratios)
    return {"grad_rms": own, "sibling": sibling, "sibling_grad_rms": other, "grad_ratio": ratio,
            "threshold": config.redundant_grad_ratio}


def redundant_parameter(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD115 (dynamic part): a bias/beta that a following normalization cancels: info, once per parameter."""
    probes = _persistent(history, config, "grad_rms")
    found = []
    for name in history.parameter_order if probes else ():
        evidence = _cancelled_by_normalization(probes, name, config)
        if evidence is None:
            continue
        found.append(
            make_finding(
                "MSD115",
                f"`{name}` is redundant: its gradient is {evidence['grad_ratio']:.2g} of `{evidence['sibling']}`'s "
                f"(RMS {evidence['grad_rms']:.3g} vs {evidence['sibling_grad_rms']:.3g}) on the last {len(probes)} "
                "probed steps: a normalization further on removes the per-channel shift it adds, so it cannot "
                "learn, and need not.",
                location=_param_location(name),
                step=probes[-1].step,
                evidence=evidence,
                suggestion="Nothing is broken. To drop the dead parameter, build the layer without it "
                "(has_bias=False before a BatchNorm); its near-zero updates are not a frozen layer (MSD209).",
            )
        )
    return found


def weights_not_updating(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    probes = _persistent(history, config, "update_abs")
    found = []
    for name in history.parameter_order if probes else ():
        if _cancelled_by_normalization(probes, name, config) is not None:
            continue  # MSD115: redundant, not frozen
        rows = [(p.update_abs.get(name), p.weight_mean_abs.get(name, 0.0)) for p in probes]
        if all(d is not None and d <= config.frozen_update_atol + config.frozen_update_rtol * w for d, w in rows):
            found.append(
                make_finding(
                    "MSD209",
                    f"`{name}` is not updating: max |dw| = {rows[-1][0]:.3g} on the last {len(rows)} probed steps "
                    f"(mean |w| = {rows[-1][1]:.3g}).",
                    location=_param_location(name),
                    step=probes[-1].step,
                    evidence={"max_abs_update": rows[-1][0], "weight_mean_abs": rows[-1][1]},
                    suggestion="Its gradient is zero: check the cell is used on the path to the loss, that no "
                    "stop_gradient or integer cast cuts it, and that its learning rate is not zero.",
                )
            )
    return found


def _blown_up(history: TrainingHistory, name: str, config: DoctorConfig) -> bool:
    """Some probe saw an update of ``name`` above ``update_ratio_max``: small updates since are its after-effect
    (dead or saturated units), and "raise the learning rate" would be the wrong advice."""
    return any(_finite(s.update_ratio.get(name)) and s.update_ratio[name] > config.update_ratio_max
               for s in history.steps if s.update_ratio)


def _network_update_ratio(history: TrainingHistory, ratios: dict[str, float]) -> float:
    """Median update ratio over the weights (rank >= 2) of one probed step; 0 when none was measured."""
    weights = [v for n, v in ratios.items() if _is_weight(history, n) and _finite(v)]
    return statistics.median(weights) if weights else 0.0


def _rate_and_peak(history: TrainingHistory, probe: StepSignals, name: str) -> tuple[float | None, float | None]:
    """``name``'s learning rate at ``probe`` and its schedule's peak: its own group's with parameter groups
    (mindyolo warms the bias group down from 0.1 while the weights warm up to 0.01), else the optimizer's."""
    group = history.lr_groups.get(name)
    if group is not None and group < min(len(probe.group_learning_rates), len(history.group_peak_learning_rates)):
        return probe.group_learning_rates[group], history.group_peak_learning_rates[group]
    return probe.learning_rate, history.peak_learning_rate


def _lr_scale(history: TrainingHistory, probe: StepSignals, name: str) -> float:
    """How far the schedule had lowered ``name``'s learning rate below its peak at ``probe`` (warm-up, decay); 1
    when not lowered or not known. Updates scale with the rate: MSD210 judges them as at the peak rate, so the end
    of a cosine schedule (lr 0.1 -> 1e-5) is not "too small"."""
    lr, peak = _rate_and_peak(history, probe, name)
    return peak / lr if _finite(lr) and _finite(peak) and 0 < lr < peak else 1.0


def _update_window(config: DoctorConfig) -> int:
    """Probes after step 1 that MSD210/211 take the median of: the first step of a momentum/Adam optimizer is not
    representative, and one or two probes are not a trend."""
    return max(3, config.persistent_probes)


def _update_probes(history: TrainingHistory, config: DoctorConfig) -> tuple[list[StepSignals], list[StepSignals], bool]:
    """(recent probes, those after step 1 with update ratios, whether there are enough of them)."""
    recent = _recent_probes(history, _update_window(config))
    probes = [p for p in recent if p.update_ratio and p.step > 1]
    return recent, probes, len(probes) >= _update_window(config)


def _median_ratio(ratios: list[dict[str, float]], name: str) -> float | None:
    """Median of ``name``'s update ratio over the probes' ``ratios``; None unless every probe measured it."""
    values = [r.get(name) for r in ratios]
    return statistics.median(values) if all(_finite(v) for v in values) else None


def update_ratio_too_small(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD210: a weight's updates (median of the recent probes, as at the schedule's peak learning rate) below
    ``update_ratio_min``, when the network as a whole is that slow (the learning rate is too small), or when this
    layer lags ``update_ratio_peer_fraction`` behind a network that learns (its own group's rate is off)."""
    recent, probes, enough = _update_probes(history, config)
    if not enough or _converged(history, probes[-1].step, config):
        return []
    scaled = [{n: v * _lr_scale(history, p, n) for n, v in p.update_ratio.items()} for p in probes]
    network = statistics.median(_network_update_ratio(history, ratios) for ratios in scaled)
    found = []
    for name in history.parameter_order:
        ratio = _median_ratio(scaled, name) if _is_weight(history, name) else None
        if ratio is None or ratio >= config.update_ratio_min or _blown_up(history, name, config):
            continue
        if not all(p.update_abs.get(name, 1.0) > config.frozen_update_atol for p in probes):
            continue  # not moving at all: MSD209's case
        if network >= config.update_ratio_min and ratio >= config.update_ratio_peer_fraction * network:
            continue  # slower than its peers, but the network learns: a scale-invariant or large-init weight
        lagging = network >= config.update_ratio_min
        peak = _rate_and_peak(history, probes[-1], name)[1]
        at_peak = (f", as at the schedule's peak learning rate {peak:g}"
                   if any(_lr_scale(history, p, name) != 1.0 for p in probes) else "")
        found.append(
            make_finding(
                "MSD210",
                f"Updates of `{name}` are {ratio:.2g} of its magnitude per step (mean|dw|/mean|w|, median of "
                f"{len(probes)} probes{at_peak}); healthy is about 1e-3, threshold {config.update_ratio_min:g}"
                + (f"; the network's median is {network:.2g}, {network / ratio:.3g}x faster." if lagging else "."),
                location=_param_location(name),
                step=recent[-1].step,
                evidence={"update_ratio": ratio, "threshold": config.update_ratio_min, "network_update_ratio": network},
                suggestion=("Check this parameter's group: its learning rate (or a huge weight decay) is far below "
                            "the rest of the network's." if lagging else
                            "Raise the learning rate (about 10x) or check weight decay / lr schedule."),
            )
        )
    return found


def update_ratio_too_large(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD211: a weight's updates above ``update_ratio_max`` (median of the recent probes), or a single probe
    moving most of the network by more than ``update_ratio_burst`` of itself."""
    recent, probes, enough = _update_probes(history, config)
    bursts = [p for p in recent if _network_update_ratio(history, p.update_ratio) > config.update_ratio_burst]
    found = []
    for name in history.parameter_order:
        if not _is_weight(history, name):
            continue
        ratio = _median_ratio([p.update_ratio for p in probes], name) if enough else None
        # One step that moves the network's weights by a sizeable fraction of themselves is already too large
        # (Adam's first step moves every weight by about lr): judged on any probe, the first included, when it
        # holds for most weights. One small-init weight (an output head, an embedding table) moving by its own
        # size under Adam is normal.
        burst = max((p.update_ratio[name] for p in bursts if _finite(p.update_ratio.get(name))), default=None)
        if ratio is not None and ratio > config.update_ratio_max:
            bound, what = config.update_ratio_max, f"median of {len(probes)} probes"
        elif burst is not None and burst > config.update_ratio_burst:
            ratio, bound, what = burst, config.update_ratio_burst, "in a single probed step"
        else:
            continue
        found.append(
            make_finding(
                "MSD211",
                f"Updates of `{name}` are {ratio:.2g} of its magnitude per step (mean|dw|/mean|w|, {what}); "
                f"healthy is about 1e-3, threshold {bound:g}.",
                location=_param_location(name),
                step=recent[-1].step,
                evidence={"update_ratio": ratio, "threshold": bound},
                suggestion="Lower the learning rate (about 10x) or add warm-up; large updates wipe out what the "
                "layer learned.",
            )
        )
    return found


def _lower_bound(fraction: float, units: int, z: float) -> float:
    """One-sided Wilson lower confidence bound, ``z`` standard errors down, of a fraction measured on ``units``
    units; the fraction itself when the count is unknown (0) or ``z`` is 0."""
    if units <= 0 or z <= 0:
        return fraction
    spread = z * math.sqrt(fraction * (1.0 - fraction) / units + z * z / (4.0 * units * units))
    return (fraction + z * z / (2.0 * units) - spread) / (1.0 + z * z / units)


def _persistent_fraction(probes: list[StepSignals], path: str, attribute: str, threshold: float,
                         z: float) -> float | None:
    """The last value of ``attribute`` when it is above ``threshold`` on every probe, else None. With ``z`` > 0 the
    fraction counts units (``ActivationStats.units``): its lower confidence bound must be above ``threshold``."""
    stats = [p.activations[path] for p in probes if path in p.activations]
    values = [getattr(s, attribute) for s in stats]
    if len(values) == len(probes) and all(_lower_bound(v, s.units, z) > threshold for v, s in zip(values, stats)):
        return values[-1]
    return None


def _activation_fraction_rule(code: str, kinds: tuple[str, ...], criteria: tuple[tuple[str, str, str, str], ...],
                              fix: str) -> TrainingRule:
    """``criteria``: (signal attribute, DoctorConfig threshold field, what it means, DoctorConfig field of the
    confidence ``z`` when the attribute is a fraction of units, else ""); the first that holds reports."""

    def rule(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
        probes = _persistent(history, config, "activations")
        if not probes:
            return []
        found = []
        for path, stats in probes[-1].activations.items():
            if stats.kind not in kinds:
                continue
            for attribute, threshold_field, what, z_field in criteria:
                threshold = getattr(config, threshold_field)
                z = getattr(config, z_field) if z_field else 0.0
                value = _persistent_fraction(probes, path, attribute, threshold, z)
                if value is None:
                    continue
                evidence = {attribute: value, "threshold": threshold, "kind": stats.kind}
                counted = ""
                if z and stats.units:
                    evidence.update(units=stats.units, lower_bound=_lower_bound(value, stats.units, z))
                    counted = (f" ({round(value * stats.units)} of {stats.units}, lower confidence bound "
                               f"{evidence['lower_bound']:.0%})")
                found.append(
                    make_finding(
                        code,
                        f"{value:.2%} of `{path}` ({stats.kind}) {what}{counted} on the last {len(probes)} probed "
                        f"steps (threshold {threshold:.1%}).",
                        location={"cell": path},
                        step=probes[-1].step,
                        evidence=evidence,
                        suggestion=fix,
                    )
                )
                break
        return found

    return rule


dead_relu = _activation_fraction_rule(
    "MSD212",
    DEAD_AT_ZERO,
    (("dead_fraction", "dead_relu_fraction", "outputs are <= 0", ""),
     ("dead_unit_fraction", "dead_unit_fraction", "units are <= 0 on every sample of the batch (dead units)",
      "dead_unit_z")),
    "Lower the learning rate, use He init and a small positive bias, or LeakyReLU/GELU; check the input is "
    "normalised.",
)
saturated_activation = _activation_fraction_rule(
    "MSD213",
    ("sigmoid", "tanh"),
    (("saturated_fraction", "saturated_fraction", "inputs sit in the flat tails (zero gradient)", ""),),
    "Normalise the inputs, add BatchNorm/LayerNorm before the activation, use Glorot init or ReLU.",
)


def activation_exploding(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    probes = _recent_probes(history, 1)
    if not probes or not probes[-1].activations:
        return []
    ordered = sorted(probes[-1].activations.items(), key=lambda kv: kv[1].order)
    means = [(path, a.mean_abs) for path, a in ordered if _finite(a.mean_abs)]
    if len(means) < 2:
        return []
    path, top = max(means, key=lambda pm: pm[1])
    growing = all(b[1] >= a[1] for a, b in zip(means, means[1:]))
    if top < config.activation_explode or not growing or means[-1][1] <= means[0][1]:
        return []
    return [
        make_finding(
            "MSD216",
            f"Activations grow through the network up to mean |a| = {top:.3g} at `{path}` "
            f"(from {means[0][1]:.3g} at `{means[0][0]}`; threshold {config.activation_explode:g}).",
            location={"cell": path},
            step=probes[-1].step,
            evidence={"mean_abs_by_cell": dict(means), "threshold": config.activation_explode},
            suggestion="Scale the initialisation down (He/Glorot for the fan-in), add normalisation layers, or "
            "normalise the inputs.",
        )
    ]


def loss_scale_overflow(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    flags = [(s.step, s.overflow, s.loss_scale) for s in history.steps if s.overflow is not None]
    # Dynamic loss scaling overflows on purpose while it calibrates: count from the first clean step.
    start = next((i for i, (_, o, _) in enumerate(flags) if not o), None)
    counted = flags[start:] if start is not None and start < len(flags) // 2 else flags
    if len(counted) < 10:
        return []
    rate = sum(1 for _, o, _ in counted if o) / len(counted)
    if rate <= config.overflow_rate:
        return []
    step, _, scale = counted[-1]
    return [
        make_finding(
            "MSD214",
            f"The loss-scale cell overflowed on {rate:.0%} of {len(counted)} steps (threshold "
            f"{config.overflow_rate:.0%}); those steps skip the weight update. Current loss scale: {scale}.",
            step=step,
            evidence={"overflow_rate": rate, "steps": len(counted), "loss_scale": scale},
            suggestion="Use DynamicLossScaleManager instead of a fixed scale, or a smaller fixed loss_scale; "
            "check for fp16 overflow in the forward pass (keep BatchNorm/Softmax in fp32).",
        )
    ]


def train_mode_off(cells_not_training: Iterable[str], step: int | None,
                   mode_effects: dict[str, str] | None = None) -> list[Finding]:
    """MSD105 (dynamic part): cells left in eval mode while the network trains. With ``mode_effects`` (cell path
    -> what eval mode changes in it, see ``static.layers.mode_dependent_cells``), only the cells whose behaviour
    depends on the mode count: a network without BatchNorm or active Dropout computes the same in both modes."""
    cells = [c for c in cells_not_training if mode_effects is None or c in mode_effects]
    if not cells:
        return []
    if mode_effects is None:
        effect = ": its BatchNorm uses moving statistics and Dropout does nothing."
    else:
        effect = ": " + "; ".join(f"`{c}` ({mode_effects[c]})" for c in cells[:3]) + \
            (f"; and {len(cells) - 3} more." if len(cells) > 3 else ".")
    return [
        make_finding(
            "MSD105",
            f"`{cells[0]}` is in eval mode (training=False) while the network trains"
            + (f", and {len(cells) - 1} more mode-dependent cell(s)" if len(cells) > 1 else "") + effect,
            location={"cell": cells[0]},
            step=step,
            evidence={"cells": cells, **({"effects": {c: mode_effects[c] for c in cells}} if mode_effects else {})},
            suggestion="Call `net.set_train()` before training (and again after any evaluation that called "
            "`set_train(False)`); to freeze BatchNorm statistics on purpose, set use_batch_statistics=False and say "
            "so in a suppression.",
        )
    ]


#: (codes, rule) in the order they run; the callback disables one pair if it raises (MSD001).
TRAINING_RULES: list[tuple[tuple[str, ...], TrainingRule]] = [
    (("MSD201",), nonfinite_loss),
    (("MSD202",), loss_diverging),
    (("MSD203",), loss_not_decreasing),
    (("MSD204",), loss_oscillating),
    (("MSD205",), loss_suspiciously_low),
    (("MSD206",), nonfinite_tensor),
    (("MSD207",), vanishing_gradient),
    (("MSD208",), exploding_gradient),
    (("MSD209",), weights_not_updating),
    (("MSD210",), update_ratio_too_small),
    (("MSD211",), update_ratio_too_large),
    (("MSD212",), dead_relu),
    (("MSD213",), saturated_activation),
    (("MSD214",), loss_scale_overflow),
    (("MSD215",), unexpected_initial_loss),
    (("MSD216",), activation_exploding),
    (("MSD115",), redundant_parameter),
]

#: Rules that need the in-graph probes (skipped, MSD002, in sink mode or when probes cannot be installed).
PROBE_CODES = ("MSD206", "MSD207", "MSD208", "MSD209", "MSD210", "MSD211", "MSD212", "MSD213", "MSD216", "MSD115")
#: The probe rules that read the optimizer's probe (gradients, updates), and those that read the activation samples.
PARAMETER_PROBE_CODES = ("MSD207", "MSD208", "MSD209", "MSD210", "MSD211", "MSD115")
ACTIVATION_PROBE_CODES = ("MSD212", "MSD213", "MSD216")


def probes_needed(config: DoctorConfig) -> dict[str, int]:
    """How many probed steps, step 1 included, each probe rule needs before it can judge anything (MSD206/216 judge
    a single probe)."""
    persistent = config.persistent_probes
    updates = _update_window(config) + 1
    return {"MSD207": persistent, "MSD208": 2, "MSD209": persistent, "MSD210": updates, "MSD211": updates,
            "MSD212": persistent, "MSD213": persistent, "MSD115": persistent}


def too_few_probes(history: TrainingHistory, config: DoctorConfig, codes: Iterable[str]) -> list[Finding]:
    """MSD002 at the end of training: the probe rules among ``codes`` that never judged, because the run took fewer
    probed steps than they need (a 16-step run at ``probe_every=50`` probes step 1 and its last step only): silence
    there is not a clean bill of health."""
    probed, wanted = [s.step for s in history.probed()], set(codes)
    missing = {code: n for code, n in probes_needed(config).items() if code in wanted and n > len(probed)}
    if not missing:
        return []
    most, steps = max(missing.values()), len(history.steps)
    by_count: dict[int, list[str]] = {}
    for code, n in sorted(missing.items()):
        by_count.setdefault(n, []).append(code)
    need = (f"they need {most}" if len(by_count) == 1 else
            " and ".join(f"{', '.join(c)} need {n}" for n, c in sorted(by_count.items())))
    advice = (f"pass probe_every={max(1, steps // most)} (or train longer) to judge them" if steps >= most else
              f"train at least {most} steps to judge them")
    shown = f" (step{'s' if len(probed) > 1 else ''} {', '.join(map(str, probed))})" if probed else ""
    return [make_finding(
        "MSD002",
        f"{', '.join(sorted(missing))} not judged: {need} probed steps, and this run of {steps} "
        f"step{'s' if steps != 1 else ''} took {len(probed)}{shown} at probe_every={config.probe_every}; {advice}.",
        location={"check": "probe-count"},
        evidence={"codes": sorted(missing), "probed_steps": len(probed), "steps": steps, "needed": missing,
                  "probe_every": config.probe_every},
        suggestion=f"Doctor(probe_every={max(1, steps // most)}) probes often enough for a run this short; "
        "probing does not change the training, it costs time on the probed steps only.")]


#: The finding lifecycle: each transient code and the rule that reports which of its findings still hold at the
#: end of a history. The probe rules judge the latest probes already; the loss rules, which report the first
#: window anywhere, get their "now" form.
CURRENT_RULES: dict[str, TrainingRule] = {
    "MSD202": loss_still_diverged,
    "MSD203": loss_not_decreasing,
    "MSD204": functools.partial(loss_oscillating, latest=True),
    "MSD207": vanishing_gradient,
    "MSD208": functools.partial(exploding_gradient, latest=True),
    "MSD209": weights_not_updating,
    "MSD210": update_ratio_too_small,
    "MSD211": update_ratio_too_large,
    "MSD212": dead_relu,
    "MSD213": saturated_activation,
    "MSD216": activation_exploding,
}
