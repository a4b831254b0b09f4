"""MSD202-MSD204: the loss curve of a run that minimises its loss: diverging, stuck on a plateau, oscillating.

MSD202 and MSD204 report the first window where their condition holds; at the end of a run their ``judge_current``
forms say whether it still holds (the finding lifecycle). On an adversarial loss they stay silent
(``common.minimised_loss``).
"""
from __future__ import annotations

import functools
import statistics
import sys
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING
from mindspore_doctor.rules.training.common import (finite_loss_values, finite_losses, median, minimised_loss,
                                                    row_medians, shared, window_medians)
from mindspore_doctor.signals import TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _fitted_rise(window: list[float]) -> float:
    """Rise of the least-squares line through ``window``, as a fraction of its fitted start (0 when not positive)."""
    n = len(window)
    x_mean, y_mean = (n - 1) / 2, statistics.fmean(window)
    slope = sum((i - x_mean) * (v - y_mean) for i, v in enumerate(window)) / sum((i - x_mean) ** 2 for i in range(n))
    start = y_mean - slope * x_mean
    return slope * (n - 1) / start if start > 0 and slope > 0 else 0.0


def _rolling_median(values: np.ndarray, width: int) -> np.ndarray:
    """The median of the last ``width`` values up to each one (of all of them, before the first ``width``), bit for
    bit ``statistics.median`` of each: the full windows all at once (``window_medians``)."""
    if width < 1 or len(values) < width:
        listed = values.tolist()
        return np.array([statistics.median(listed[max(0, i - width + 1) : i + 1]) for i in range(len(listed))],
                        dtype=float)
    first = values[: width - 1].tolist()
    head = [statistics.median(first[: i + 1]) for i in range(width - 1)]
    return np.concatenate((np.array(head, dtype=float), window_medians(values, width)))


class _Smoothed(NamedTuple):
    """MSD202's view of the loss: shared by its judge and its current form."""

    steps: list[int]
    smooth: list[float]
    """The rolling-median losses (``diverge_smoothing`` steps)."""
    noise: float
    """The per-step loss's robust standard deviation around them (MAD x 1.4826)."""
    min_rise: float
    """The smallest rise above the running minimum that counts."""
    array: np.ndarray
    """``smooth`` as an array."""


def _smoothed_losses(history: TrainingHistory, config: DoctorConfig) -> _Smoothed:
    return shared(history, ("smoothed_losses", config.diverge_smoothing, config.diverge_min_rise,
                            config.diverge_noise), lambda: _smooth(history, config))


def _smooth(history: TrainingHistory, config: DoctorConfig) -> _Smoothed:
    steps = [step for step, _ in finite_losses(history)]
    values = finite_loss_values(history)
    with np.errstate(all="ignore"):  # a sum past 1.8e308 is inf, silently, as with Python floats
        array = _rolling_median(values, config.diverge_smoothing)
        noise = 1.4826 * median(np.abs(values - array)) if len(values) else 0.0  # MAD -> std
    smooth = array.tolist()
    min_rise = max(config.diverge_min_rise * abs(smooth[0]), config.diverge_noise * noise) if smooth else 0.0
    return _Smoothed(steps, smooth, noise, min_rise, array)


def _diverging_ends(smoothed: _Smoothed, w: int, config: DoctorConfig) -> list[int] | range:
    """The window ends, from ``w`` on, where MSD202 may fire: the loss ``min_rise`` above its running minimum, and
    either ``diverge_factor`` above it for the whole window, or never back to it and up on ``diverge_trend_up`` of
    the steps. Judged for every window at once with exact comparisons; ``loss_diverging`` re-judges each in plain
    Python (the fitted trend too), so its findings are what the loop over every window found."""
    s = smoothed.array
    n = len(s)
    if w < 2 or n <= w:
        return range(w, n)
    with np.errstate(all="ignore"):  # inf - inf is nan, silently, as with Python floats
        running = np.minimum.accumulate(s)[: n - w]  # the running minimum before each window
        risen = ~(s[w:] - running < smoothed.min_rise)
        if not risen.any():
            return []  # the common case: never far enough above the best loss so far
        window_min = sliding_window_view(s, w).min(axis=1)[1:]
        fires = (running > 0) & (window_min >= config.diverge_factor * running)
        ups = np.concatenate(([0], np.cumsum(s[1:] > s[:-1])))  # ups[k]: rises among the first k steps
        drifts = ~(window_min <= running)
        if np.abs(s).max() < sys.float_info.max / w:
            # A window that drifts must rise on ``diverge_trend_up`` of its steps too. Past this bound the loop
            # still fits every drifting window's trend first, as it always did: its mean can overflow (fmean raises).
            drifts &= (ups[w:] - ups[1 : n - w + 1]) / (w - 1) >= config.diverge_trend_up
    return (w + np.flatnonzero(risen & (fires | drifts))).tolist()


_DIVERGING_FIX = "Lower the learning rate (try 10x smaller), add a warm-up, or clip gradients."

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
LOSS_DIVERGING = Rule(
    "MSD202", "loss-diverging", ERROR,
    "loss grows far above its running minimum",
    options=(LOSS_WINDOW, DIVERGE_FACTOR, DIVERGE_SMOOTHING, DIVERGE_MIN_RISE, DIVERGE_NOISE, DIVERGE_TREND, DIVERGE_TREND_UP),
    transient=True,
)


@LOSS_DIVERGING.judge
@minimised_loss
def loss_diverging(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """Loss >= diverge_factor x its running minimum for a window, or a steady rise above that minimum.

    Judged on a rolling median (``diverge_smoothing`` steps): one lucky run of small batches must not become the
    "best loss" that every ordinary batch after it is measured against. The rise must also be at least
    ``diverge_min_rise`` of the initial loss, so jitter of a loss already near zero is not divergence, and
    ``diverge_noise`` robust standard deviations of the per-step loss, so a noisy loss's swings are not either.
    """
    smoothed = _smoothed_losses(history, config)
    steps, smooth, noise, min_rise, _ = smoothed
    w = config.loss_window
    for end in _diverging_ends(smoothed, w, config):
        running_min = min(smooth[: end - w + 1])  # minimum of the smoothed losses before the current window
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


@LOSS_DIVERGING.judge_current
@minimised_loss
def loss_still_diverged(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD202 now: the loss has not come back, i.e. its whole last window stays ``min_rise`` above the best loss
    before it. A high plateau after a divergence stays open; a warm-up spike the loss recovered from does not."""
    steps, smooth, noise, min_rise, _ = _smoothed_losses(history, config)
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


MIN_IMPROVEMENT = Option(
    "min_improvement", 0.05,
    "MSD203: relative loss improvement, against the first window, expected of at least one recent window.",
)
PLATEAU_WINDOWS = Option(
    "plateau_windows", 3,
    "MSD203: the loss must miss ``min_improvement`` on this many consecutive windows (of ``loss_window`` steps) "
    "after the first: a healthy LeNet can sit on its initial plateau for a window or two before it falls.",
)
LOSS_NOT_DECREASING = Rule(
    "MSD203", "loss-not-decreasing", WARNING,
    "loss does not improve over a window",
    options=(LOSS_WINDOW, MIN_IMPROVEMENT, PLATEAU_WINDOWS),
    transient=True,
)


@LOSS_NOT_DECREASING.judge
@minimised_loss
def loss_not_decreasing(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """The loss stays within ``min_improvement`` of its first window over each of the last ``plateau_windows``
    windows: one window without progress is a healthy net still on its initial plateau, not a stuck one."""
    losses = finite_losses(history)
    n, w, k = len(losses), config.loss_window, config.plateau_windows
    if n < (k + 1) * w:
        return []
    first = statistics.fmean([v for _, v in losses[:w]])
    means = [statistics.fmean([v for _, v in losses[n - (i + 1) * w : n - i * w]]) for i in range(k)]
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
            step=losses[-1][0],
            evidence={"first_window_mean": first, "last_window_mean": last, "improvement": improvement,
                      "best_improvement": max(gains), "window": w, "windows": k},
            suggestion="Check that the optimizer holds the network's parameters and that the learning rate is not "
            "tiny (MSD210), the labels match the inputs, and the loss is wired to the logits (MSD107).",
        )
    ]


OSCILLATION_ALTERNATION = Option(
    "oscillation_alternation", 0.8,
    "MSD204: fraction of consecutive loss changes that flip sign within a window.",
)
OSCILLATION_AMPLITUDE = Option(
    "oscillation_amplitude", 0.25,
    "MSD204: median |loss change| in the window, as a fraction of the first loss, that counts as large.",
)
LOSS_OSCILLATING = Rule(
    "MSD204", "loss-oscillating", WARNING,
    "large sign-alternating loss swings",
    options=(LOSS_WINDOW, OSCILLATION_ALTERNATION, OSCILLATION_AMPLITUDE),
    transient=True,
)


def _swinging_ends(history: TrainingHistory, w: int, scale: float, config: DoctorConfig) -> list[int] | range:
    """The window ends, from ``w`` on, whose loss changes flip sign on ``oscillation_alternation`` of the steps with
    a median size of ``oscillation_amplitude`` of ``scale``: every window judged at once, bit for bit as the loop over
    them judged each (the medians by ``row_medians``, of the windows that alternate enough only), and
    ``loss_oscillating`` runs its loop on these ends only."""
    values = finite_loss_values(history)
    n = len(values)
    if w < 2 or n <= w:
        return range(w, n)
    with np.errstate(all="ignore"):  # overflows to inf (and inf * 0 to nan) silently, as with Python floats
        diffs = np.diff(values)
        flipped = np.concatenate(([0], np.cumsum(diffs[:-1] * diffs[1:] < 0)))  # flips among the first k changes
        alternating = (flipped[w - 1 : n - 1] - flipped[: n - w]) / (w - 1) >= config.oscillation_alternation
        if not alternating.any():
            return []  # the common case: no window swings often enough
        ends = np.flatnonzero(alternating)  # few: the medians of those windows only
        amplitude = row_medians(sliding_window_view(np.abs(diffs), w)[ends]) / scale
    return (w + ends[amplitude >= config.oscillation_amplitude]).tolist()


@LOSS_OSCILLATING.judge
@minimised_loss
def loss_oscillating(history: TrainingHistory, config: DoctorConfig, latest: bool = False) -> list[Finding]:
    """Sign-alternating loss swings over a window; ``latest``: judge the last window only (is it still so)."""
    losses = finite_losses(history)
    w = config.loss_window
    if len(losses) < w + 1:
        return []
    scale = abs(losses[0][1]) or 1.0
    ends = range(len(losses) - 1, len(losses)) if latest else _swinging_ends(history, w, scale, config)
    for end in ends:
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


LOSS_OSCILLATING.judge_current(functools.partial(loss_oscillating, latest=True))
