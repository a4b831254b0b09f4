"""MSD201-MSD216: judge training signals (plain numbers) against DoctorConfig thresholds.

Every rule is a pure function ``(TrainingHistory, DoctorConfig) -> list[Finding]``;
none touches MindSpore. Rules re-run on every probed step over a bounded tail of
the history, so a finding appears at the step its condition first holds.
"""
from __future__ import annotations

import functools
import math
import statistics
from typing import TYPE_CHECKING, Any, Callable, Iterable

from mindspore_doctor.findings import Finding
from mindspore_doctor.signals import DEAD_AT_ZERO, StepSignals, TrainingHistory
from mindspore_doctor.rule import CHECK_SKIPPED, ERROR, INFO, Option, Rule, WARNING
from mindspore_doctor.rules.layers import TRAIN_MODE_MISUSE

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

# --- definitions: the options these rules read, and the rules ----------------------------------------

LOSS_WINDOW = Option(
    "loss_window", 20,
    "MSD202/203/204/217: number of loss checks in a trend window.",
)
DIVERGE_FACTOR = Option(
    "diverge_factor", 2.0,
    "MSD202: loss at or above this multiple of its running minimum for a window.",
)
DIVERGE_SMOOTHING = Option(
    "diverge_smoothing", 10,
    "MSD202: the loss is judged on its rolling median over this many steps (small or imbalanced batches make "
    "single-step losses noisy; the catalog's raw running minimum raised false alarms on healthy runs).",
)
DIVERGE_MIN_RISE = Option(
    "diverge_min_rise", 0.1,
    "MSD202: the loss must also rise by at least this fraction of the initial loss (noise near zero is not "
    "divergence).",
)
DIVERGE_NOISE = Option(
    "diverge_noise", 2.0,
    "MSD202: ... and by at least this many robust standard deviations of the per-step loss around its rolling "
    "median (a dropout MLP on batches of 32 swings between 0.07 and 0.46 while it trains well).",
)
DIVERGE_TREND = Option(
    "diverge_trend", 0.5,
    "MSD202 rising trend: least-squares rise of the loss over a window, as a fraction of its fitted start.",
)
DIVERGE_TREND_UP = Option(
    "diverge_trend_up", 0.6,
    "MSD202 rising trend: fraction of the window's steps on which the loss must go up.",
)
MIN_IMPROVEMENT = Option(
    "min_improvement", 0.05,
    "MSD203: relative loss improvement, against the first window, expected of at least one recent window.",
)
PLATEAU_WINDOWS = Option(
    "plateau_windows", 3,
    "MSD203: the loss must miss ``min_improvement`` on this many consecutive windows (of ``loss_window`` steps) "
    "after the first: a healthy LeNet can sit on its initial plateau for a window or two before it falls.",
)
LOW_LOSS = Option(
    "low_loss", 1e-4,
    "MSD205: a loss below this within the first ``early_steps`` steps is suspicious.",
)
EARLY_STEPS = Option(
    "early_steps", 3,
    "MSD205/215: what counts as \"the first steps\".",
)
CONVERGED_LOSS_FRACTION = Option(
    "converged_loss_fraction", 0.05,
    "MSD207/MSD210: once the loss is below this fraction of its initial value, small gradients and updates mean the "
    "model has converged, and are not reported.",
)
VANISHING_GRAD_MEAN = Option(
    "vanishing_grad_mean", 1e-7,
    "MSD207: a layer's gradient RMS (sqrt of mean g², which is >= mean |g|) below this is vanishing.",
)
VANISHING_GRAD_RATIO = Option(
    "vanishing_grad_ratio", 1e-3,
    "MSD207: first-layer / last-layer gradient-norm ratio below this is vanishing.",
)
NO_GRADIENT_FRACTION = Option(
    "no_gradient_fraction", 1e-6,
    "MSD207: a gradient RMS below this fraction of the median layer's on every probe is no gradient at all (no loss "
    "term reaches the parameter: a dropped output, a detection level no target is assigned to), and the message "
    "says so rather than \"vanish\" (mindyolo's unassigned YOLOv8 box branches: 5e-15 and exactly 0 against a median "
    "1e-3).",
)
VANISHING_UPDATE_FRACTION = Option(
    "vanishing_update_fraction", 0.05,
    "MSD207: ... only while the layer's update ratio is also below this fraction of its peers' (the upper quartile "
    "of the network's; the last layer's for the first/last ratio). Under AdamW a layer with RMS |g| 3e-8 "
    "(ConvNeXt's layer scale 1e-6) moves as fast as the rest (0.7-1.1x) and learns; a deep sigmoid stack's first "
    "layers under Momentum move 1e-4x or less.",
)
EXPLODING_GRAD_GROWTH = Option(
    "exploding_grad_growth", 2.0,
    "MSD208: global gradient norm growing more than this per window.",
)
EXPLODING_GRAD_RATIO = Option(
    "exploding_grad_ratio", 70.0,
    "MSD208: last / first gradient-norm ratio above this is exploding.",
)
FROZEN_UPDATE_ATOL = Option(
    "frozen_update_atol", 1e-8,
    "MSD209: |dw| <= atol + rtol*|w| counts as not updated.",
)
FROZEN_UPDATE_RTOL = Option(
    "frozen_update_rtol", 1e-7,
    "MSD209: about one float32 ulp of the weight (the catalog's 1e-5 also caught a tiny but non-zero learning rate, "
    "which is MSD210's case).",
)
REDUNDANT_GRAD_RATIO = Option(
    "redundant_grad_ratio", 1e-5,
    "MSD115/MSD209: a bias/beta whose gradient RMS stays below this fraction of its cell's weight/gamma gradient "
    "(which learns) is cancelled by a following normalization: redundant (info), not frozen. Measured: 3e-7 on the "
    "projection BatchNorm betas of MobileNetV3; a learning beta is within 10x of its gamma.",
)
UPDATE_RATIO_MIN = Option(
    "update_ratio_min", 1e-4,
    "MSD210: mean|dw| / mean|w| below this is too small (judged as at the schedule's peak learning rate).",
)
UPDATE_RATIO_PEER_FRACTION = Option(
    "update_ratio_peer_fraction", 1e-3,
    "MSD210: when the network's median update ratio is healthy, a layer below ``update_ratio_min`` is reported only "
    "if it is also below this fraction of that median (a parameter group whose rate is off). ShuffleNetV2's "
    "depthwise convs, large-init and followed by BatchNorm, run 1e-2 to 3e-2 of the median and learn.",
)
UPDATE_RATIO_MAX = Option(
    "update_ratio_max", 1e-1,
    "MSD211: mean|dw| / mean|w| above this (median of the recent probes) is too large.",
)
UPDATE_RATIO_BURST = Option(
    "update_ratio_burst", 0.5,
    "MSD211: a single probed step (the first included) moving the network's weights (median over them) by more than "
    "this fraction of themselves.",
)
DEAD_RELU_FRACTION = Option(
    "dead_relu_fraction", 0.999,
    "MSD212: fraction of ReLU outputs <= 0 above which the layer is dead.",
)
DEAD_UNIT_FRACTION = Option(
    "dead_unit_fraction", 0.5,
    "MSD212: fraction of a ReLU layer's units that are <= 0 on the whole batch above which the layer is dying.",
)
DEAD_UNIT_Z = Option(
    "dead_unit_z", 1.645,
    "MSD212: the dead-unit fraction must exceed ``dead_unit_fraction`` by this many binomial standard errors over "
    "the units measured (its one-sided Wilson lower bound; 1.645: 95 % confidence). The first squeeze-excite "
    "reduction of a healthy MobileNetV3-small has 8 units, 4 of them off on the whole batch from initialisation and "
    "6 at twice the recipe's learning rate: 7 of 8 must be dead to count, 12 of 16, 39 of 64, 142 of 256 sampled "
    "units. 0: the raw fraction.",
)
SATURATED_FRACTION = Option(
    "saturated_fraction", 0.999,
    "MSD213: fraction of Sigmoid/Tanh outputs in the flat tails.",
)
OVERFLOW_RATE = Option(
    "overflow_rate", 0.1,
    "MSD214: fraction of loss-scale overflow steps that is too many.",
)
INITIAL_LOSS_FACTOR = Option(
    "initial_loss_factor", 3.0,
    "MSD215: first loss off ln(num_classes) by more than this factor.",
)
ACTIVATION_EXPLODE = Option(
    "activation_explode", 10.0,
    "MSD216: mean |activation| at or above this and growing through the network.",
)
OSCILLATION_ALTERNATION = Option(
    "oscillation_alternation", 0.8,
    "MSD204: fraction of consecutive loss changes that flip sign within a window.",
)
OSCILLATION_AMPLITUDE = Option(
    "oscillation_amplitude", 0.25,
    "MSD204: median |loss change| in the window, as a fraction of the first loss, that counts as large.",
)
PERSISTENT_PROBES = Option(
    "persistent_probes", 2,
    "MSD115/207/209/212/213/218: a probe signal must hold on this many consecutive probed steps (MSD210/211 take "
    "the median of this many probes after step 1, at least 3).",
)
LABEL_COPY_TOLERANCE = Option(
    "label_copy_tolerance", 1e-4,
    "MSD205 (data check): an input feature that is an affine function of the regression target up to this relative "
    "RMS residual, sqrt(1 - r^2), is the target itself (float32 and standardised copies: ~1e-7; the last observed "
    "value of a smooth series before the one to forecast: >= 1e-2).",
)

REDUNDANT_PARAMETER = Rule(
    "MSD115", "redundant-parameter", INFO,
    "bias/beta whose effect a following normalization removes",
    options=(REDUNDANT_GRAD_RATIO, PERSISTENT_PROBES),
)
NONFINITE_LOSS = Rule(
    "MSD201", "nonfinite-loss", ERROR,
    "loss is NaN or Inf",
)
LOSS_DIVERGING = Rule(
    "MSD202", "loss-diverging", ERROR,
    "loss grows far above its running minimum",
    options=(LOSS_WINDOW, DIVERGE_FACTOR, DIVERGE_SMOOTHING, DIVERGE_MIN_RISE, DIVERGE_NOISE, DIVERGE_TREND, DIVERGE_TREND_UP),
)
LOSS_NOT_DECREASING = Rule(
    "MSD203", "loss-not-decreasing", WARNING,
    "loss does not improve over a window",
    options=(LOSS_WINDOW, MIN_IMPROVEMENT, PLATEAU_WINDOWS),
)
LOSS_OSCILLATING = Rule(
    "MSD204", "loss-oscillating", WARNING,
    "large sign-alternating loss swings",
    options=(LOSS_WINDOW, OSCILLATION_ALTERNATION, OSCILLATION_AMPLITUDE),
)
LOSS_SUSPICIOUSLY_LOW = Rule(
    "MSD205", "loss-suspiciously-low", WARNING,
    "loss near zero within the first steps",
    options=(LOW_LOSS, EARLY_STEPS, LABEL_COPY_TOLERANCE),
)
NONFINITE_TENSOR = Rule(
    "MSD206", "nonfinite-tensor", ERROR,
    "NaN/Inf in a gradient, weight or activation",
)
VANISHING_GRADIENT = Rule(
    "MSD207", "vanishing-gradient", WARNING,
    "gradients vanish in a layer",
    options=(CONVERGED_LOSS_FRACTION, VANISHING_GRAD_MEAN, VANISHING_GRAD_RATIO, NO_GRADIENT_FRACTION, VANISHING_UPDATE_FRACTION, PERSISTENT_PROBES),
)
EXPLODING_GRADIENT = Rule(
    "MSD208", "exploding-gradient", ERROR,
    "global gradient norm explodes",
    options=(EXPLODING_GRAD_GROWTH, EXPLODING_GRAD_RATIO),
)
WEIGHTS_NOT_UPDATING = Rule(
    "MSD209", "weights-not-updating", WARNING,
    "weight unchanged across steps",
    options=(FROZEN_UPDATE_ATOL, FROZEN_UPDATE_RTOL, REDUNDANT_GRAD_RATIO, PERSISTENT_PROBES),
)
UPDATE_RATIO_TOO_SMALL = Rule(
    "MSD210", "update-ratio-too-small", WARNING,
    "updates tiny relative to weights",
    options=(CONVERGED_LOSS_FRACTION, FROZEN_UPDATE_RTOL, UPDATE_RATIO_MIN, UPDATE_RATIO_PEER_FRACTION, PERSISTENT_PROBES),
)
UPDATE_RATIO_TOO_LARGE = Rule(
    "MSD211", "update-ratio-too-large", WARNING,
    "updates large relative to weights",
    options=(UPDATE_RATIO_MAX, UPDATE_RATIO_BURST, PERSISTENT_PROBES),
)
DEAD_RELU = Rule(
    "MSD212", "dead-relu", WARNING,
    "ReLU outputs almost all zero",
    options=(DEAD_RELU_FRACTION, DEAD_UNIT_FRACTION, DEAD_UNIT_Z, PERSISTENT_PROBES),
)
SATURATED_ACTIVATION = Rule(
    "MSD213", "saturated-activation", WARNING,
    "Sigmoid/Tanh outputs in the flat tails",
    options=(SATURATED_FRACTION, PERSISTENT_PROBES),
)
LOSS_SCALE_OVERFLOW = Rule(
    "MSD214", "loss-scale-overflow", WARNING,
    "loss-scale overflow on many steps",
    options=(OVERFLOW_RATE,),
)
UNEXPECTED_INITIAL_LOSS = Rule(
    "MSD215", "unexpected-initial-loss", WARNING,
    "first loss far from ln(num_classes)",
    options=(EARLY_STEPS, INITIAL_LOSS_FACTOR),
)
ACTIVATION_EXPLODING = Rule(
    "MSD216", "activation-exploding", WARNING,
    "activations large and growing through the network",
    options=(ACTIVATION_EXPLODE,),
)

RULES = (REDUNDANT_PARAMETER, NONFINITE_LOSS, LOSS_DIVERGING, LOSS_NOT_DECREASING, LOSS_OSCILLATING, LOSS_SUSPICIOUSLY_LOW, NONFINITE_TENSOR, VANISHING_GRADIENT, EXPLODING_GRADIENT, WEIGHTS_NOT_UPDATING, UPDATE_RATIO_TOO_SMALL, UPDATE_RATIO_TOO_LARGE, DEAD_RELU, SATURATED_ACTIVATION, LOSS_SCALE_OVERFLOW, UNEXPECTED_INITIAL_LOSS, ACTIVATION_EXPLODING)

TrainingRule = Callable[[TrainingHistory, "DoctorConfig"], list[Finding]]
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
                NONFINITE_LOSS.finding(
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
                LOSS_DIVERGING.finding(
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
                LOSS_DIVERGING.finding(
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
    return [LOSS_DIVERGING.finding(f"The loss (rolling median) is still at least {window_min:.4g}, above its best "
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
        LOSS_NOT_DECREASING.finding(
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
                LOSS_OSCILLATING.finding(
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
                LOSS_SUSPICIOUSLY_LOW.finding(
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
        UNEXPECTED_INITIAL_LOSS.finding(
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
            NONFINITE_TENSOR.finding(
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
            VANISHING_GRADIENT.finding(
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
                VANISHING_GRADIENT.finding(
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
                EXPLODING_GRADIENT.finding(
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
            REDUNDANT_PARAMETER.finding(
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
                WEIGHTS_NOT_UPDATING.finding(
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
            UPDATE_RATIO_TOO_SMALL.finding(
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
            UPDATE_RATIO_TOO_LARGE.finding(
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


def _activation_fraction_rule(reported: Rule, kinds: tuple[str, ...], criteria: tuple[tuple[str, str, str, str], ...],
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
                    reported.finding(
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
    DEAD_RELU,
    DEAD_AT_ZERO,
    (("dead_fraction", "dead_relu_fraction", "outputs are <= 0", ""),
     ("dead_unit_fraction", "dead_unit_fraction", "units are <= 0 on every sample of the batch (dead units)",
      "dead_unit_z")),
    "Lower the learning rate, use He init and a small positive bias, or LeakyReLU/GELU; check the input is "
    "normalised.",
)
saturated_activation = _activation_fraction_rule(
    SATURATED_ACTIVATION,
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
        ACTIVATION_EXPLODING.finding(
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
        LOSS_SCALE_OVERFLOW.finding(
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
        TRAIN_MODE_MISUSE.finding(
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
    return [CHECK_SKIPPED.finding(
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
