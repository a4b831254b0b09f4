"""MSD210, MSD211: the size of the weights' updates relative to the weights (mean|dw| / mean|w|): too small, as at
the schedule's peak learning rate, or too large, over the recent probes or in a single probed step."""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Option, Rule, WARNING
from mindspore_doctor.rules.training.common import (CONVERGED_LOSS_FRACTION, PERSISTENT_PROBES, converged, finite,
                                                    is_weight, measured_steps, param_location, recent_probes)
from mindspore_doctor.rules.training.frozen import FROZEN_UPDATE_RTOL
from mindspore_doctor.signals import StepSignals, TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _network_update_ratio(history: TrainingHistory, ratios: dict[str, float]) -> float:
    """Median update ratio over the weights (rank >= 2) of one probed step; 0 when none was measured."""
    weights = [v for n, v in ratios.items() if is_weight(history, n) and finite(v)]
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
    return peak / lr if finite(lr) and finite(peak) and 0 < lr < peak else 1.0


def _update_window(config: DoctorConfig) -> int:
    """Probes after step 1 that MSD210/211 take the median of: the first step of a momentum/Adam optimizer is not
    representative, and one or two probes are not a trend."""
    return max(3, config.persistent_probes)


def _update_probes_needed(config: DoctorConfig) -> int:
    """Probed steps MSD210/211 need before they judge: step 1 and ``_update_window`` after it."""
    return _update_window(config) + 1


def _update_probes(history: TrainingHistory, config: DoctorConfig) -> tuple[list[StepSignals], list[StepSignals], bool]:
    """(recent probes, those after step 1 with update ratios, whether there are enough of them)."""
    recent = recent_probes(history, _update_window(config))
    probes = [p for p in recent if p.update_ratio and p.step > 1]
    return recent, probes, len(probes) >= _update_window(config)


def _median_ratio(ratios: list[dict[str, float]], name: str) -> float | None:
    """Median of ``name``'s update ratio over the probes' ``ratios``; None unless every probe measured it."""
    values = [r.get(name) for r in ratios]
    return statistics.median(values) if all(finite(v) for v in values) else None


def _blown_up(history: TrainingHistory, name: str, config: DoctorConfig) -> bool:
    """Some probe saw an update of ``name`` above ``update_ratio_max``: small updates since are its after-effect
    (dead or saturated units), and "raise the learning rate" would be the wrong advice."""
    return any(finite(s.update_ratio.get(name)) and s.update_ratio[name] > config.update_ratio_max
               for s in measured_steps(history) if s.update_ratio)


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
UPDATE_RATIO_TOO_SMALL = Rule(
    "MSD210", "update-ratio-too-small", WARNING,
    "updates tiny relative to weights",
    options=(CONVERGED_LOSS_FRACTION, FROZEN_UPDATE_RTOL, UPDATE_RATIO_MIN, UPDATE_RATIO_PEER_FRACTION, PERSISTENT_PROBES),
    probe="optimizer", probes_needed=_update_probes_needed, transient=True,
)


@UPDATE_RATIO_TOO_SMALL.judge
def update_ratio_too_small(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD210: a weight's updates (median of the recent probes, as at the schedule's peak learning rate) below
    ``update_ratio_min``, when the network as a whole is that slow (the learning rate is too small), or when this
    layer lags ``update_ratio_peer_fraction`` behind a network that learns (its own group's rate is off)."""
    recent, probes, enough = _update_probes(history, config)
    if not enough or converged(history, probes[-1].step, config):
        return []
    scaled = [{n: v * _lr_scale(history, p, n) for n, v in p.update_ratio.items()} for p in probes]
    network = statistics.median(_network_update_ratio(history, ratios) for ratios in scaled)
    found = []
    for name in history.parameter_order:
        ratio = _median_ratio(scaled, name) if is_weight(history, name) else None
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
                location=param_location(name),
                step=recent[-1].step,
                evidence={"update_ratio": ratio, "threshold": config.update_ratio_min, "network_update_ratio": network},
                suggestion=("Check this parameter's group: its learning rate (or a huge weight decay) is far below "
                            "the rest of the network's." if lagging else
                            "Raise the learning rate (about 10x) or check weight decay / lr schedule."),
            )
        )
    return found


UPDATE_RATIO_MAX = Option(
    "update_ratio_max", 1e-1,
    "MSD211: mean|dw| / mean|w| above this (median of the recent probes) is too large.",
)
UPDATE_RATIO_BURST = Option(
    "update_ratio_burst", 0.5,
    "MSD211: a single probed step (the first included) moving the network's weights (median over them) by more than "
    "this fraction of themselves.",
)
UPDATE_RATIO_TOO_LARGE = Rule(
    "MSD211", "update-ratio-too-large", WARNING,
    "updates large relative to weights",
    options=(UPDATE_RATIO_MAX, UPDATE_RATIO_BURST, PERSISTENT_PROBES),
    probe="optimizer", probes_needed=_update_probes_needed, transient=True,
)


@UPDATE_RATIO_TOO_LARGE.judge
def update_ratio_too_large(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD211: a weight's updates above ``update_ratio_max`` (median of the recent probes), or a single probe
    moving most of the network by more than ``update_ratio_burst`` of itself."""
    recent, probes, enough = _update_probes(history, config)
    bursts = [p for p in recent if _network_update_ratio(history, p.update_ratio) > config.update_ratio_burst]
    found = []
    for name in history.parameter_order:
        if not is_weight(history, name):
            continue
        ratio = _median_ratio([p.update_ratio for p in probes], name) if enough else None
        # One step that moves the network's weights by a sizeable fraction of themselves is already too large
        # (Adam's first step moves every weight by about lr): judged on any probe, the first included, when it
        # holds for most weights. One small-init weight (an output head, an embedding table) moving by its own
        # size under Adam is normal.
        burst = max((p.update_ratio[name] for p in bursts if finite(p.update_ratio.get(name))), default=None)
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
                location=param_location(name),
                step=recent[-1].step,
                evidence={"update_ratio": ratio, "threshold": bound},
                suggestion="Lower the learning rate (about 10x) or add warm-up; large updates wipe out what the "
                "layer learned.",
            )
        )
    return found
