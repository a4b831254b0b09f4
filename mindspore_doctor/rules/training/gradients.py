"""MSD207, MSD208: gradients that vanish in a layer (while its updates lag too), or explode over the network."""
from __future__ import annotations

import functools
import statistics
from typing import TYPE_CHECKING, Callable

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING
from mindspore_doctor.rules.training.common import (CONVERGED_LOSS_FRACTION, PERSISTENT_PROBES, converged, finite,
                                                    is_weight, measured_steps, param_location, persistent_count,
                                                    recent_probes, shared)
from mindspore_doctor.signals import StepSignals, TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _learning_peers(history: TrainingHistory, probe: StepSignals) -> float | None:
    """The update ratio the network's learning layers reach at ``probe``: the upper quartile over its weights."""
    ratios = sorted(v for n, v in probe.update_ratio.items() if is_weight(history, n) and finite(v))
    return ratios[round(0.75 * (len(ratios) - 1))] if ratios else None


def _median_gradient(history: TrainingHistory, probe: StepSignals) -> float:
    """The median weight's RMS gradient at ``probe`` (0.0 when none was measured)."""
    values = [v for n, v in probe.grad_rms.items() if is_weight(history, n) and finite(v)]
    return statistics.median(values) if values else 0.0


def _relative_update(probes: list[StepSignals], name: str,
                     reference: Callable[[StepSignals], float | None]) -> float | None:
    """Median over ``probes`` of ``name``'s update ratio / ``reference``'s; None when no probe measured both."""
    fractions = [p.update_ratio[name] / ref for p in probes
                 if finite(p.update_ratio.get(name)) and finite(ref := reference(p)) and ref > 0]
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
VANISHING_GRADIENT = Rule(
    "MSD207", "vanishing-gradient", WARNING,
    "gradients vanish in a layer",
    options=(CONVERGED_LOSS_FRACTION, VANISHING_GRAD_MEAN, VANISHING_GRAD_RATIO, NO_GRADIENT_FRACTION, VANISHING_UPDATE_FRACTION, PERSISTENT_PROBES),
    probe="optimizer", probes_needed=persistent_count, transient=True,
)


@VANISHING_GRADIENT.judge
def vanishing_gradient(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """A weight's RMS gradient below ``vanishing_grad_mean``, or the first layer's gradient norm below
    ``vanishing_grad_ratio`` of the last's, on ``persistent_probes`` probes, while its updates lag behind."""
    probes = recent_probes(history, config.persistent_probes)
    if len(probes) < config.persistent_probes or not probes[-1].grad_rms:
        return []
    found = []
    last = probes[-1]
    if converged(history, last.step, config):
        return []
    for name in history.parameter_order:
        if not is_weight(history, name):
            continue
        values = [p.grad_rms.get(name) for p in probes]
        if not all(finite(v) and v < config.vanishing_grad_mean for v in values):
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
                location=param_location(name),
                step=last.step,
                evidence={"grad_rms": values[-1], "threshold": config.vanishing_grad_mean,
                          "relative_update": relative, "median_grad_rms": median, "no_gradient": none},
                suggestion=_NO_GRADIENT_FIX if none else _VANISHING_FIX,
            )
        )
    weights = [n for n in history.parameter_order if is_weight(history, n) and n in last.grad_norm]
    if not found and len(weights) >= 2:
        first, final = weights[0], weights[-1]
        ratios = [p.grad_norm.get(first, 0.0) / p.grad_norm[final] for p in probes if p.grad_norm.get(final)]
        relative = _relative_update(probes, first, lambda p: p.update_ratio.get(final))
        if (len(ratios) == len(probes) and all(finite(r) and r < config.vanishing_grad_ratio for r in ratios)
                and _cannot_learn(relative, config)):
            found.append(
                VANISHING_GRADIENT.finding(
                    f"Gradients vanish towards the input: |g| of the first layer `{first}` is {ratios[-1]:.2g}x "
                    f"that of the last layer `{final}` (threshold {config.vanishing_grad_ratio:g})"
                    + ("." if relative is None else f", and its updates {relative:.2g}x."),
                    location=param_location(first),
                    step=last.step,
                    evidence={"first_last_ratio": ratios[-1], "first": first, "last": final,
                              "relative_update": relative},
                    suggestion="Add normalisation or residual connections; avoid saturating activations "
                    "(Sigmoid/Tanh) in deep stacks.",
                )
            )
    return found


def _global_grad_norms(history: TrainingHistory) -> list[tuple[int, float]]:
    """(step, global gradient norm) of each probe that measured a finite one (shared by MSD208's two forms)."""
    def derive() -> list[tuple[int, float]]:
        norms = [(s.step, s.global_grad_norm) for s in measured_steps(history) if s.grad_norm]
        return [(step, n) for step, n in norms if finite(n)]
    return shared(history, "global_grad_norms", derive)


EXPLODING_GRAD_GROWTH = Option(
    "exploding_grad_growth", 2.0,
    "MSD208: global gradient norm growing more than this per window.",
)
EXPLODING_GRAD_RATIO = Option(
    "exploding_grad_ratio", 70.0,
    "MSD208: last / first gradient-norm ratio above this is exploding.",
)
EXPLODING_GRADIENT = Rule(
    "MSD208", "exploding-gradient", ERROR,
    "global gradient norm explodes",
    options=(EXPLODING_GRAD_GROWTH, EXPLODING_GRAD_RATIO),
    probe="optimizer", probes_needed=lambda config: 2, transient=True,
)


@EXPLODING_GRADIENT.judge
def exploding_gradient(history: TrainingHistory, config: DoctorConfig, latest: bool = False) -> list[Finding]:
    """The global gradient norm grew > ``exploding_grad_growth``x on 3 probes in a row, or to
    ``exploding_grad_ratio``x its first value; ``latest``: judge the last probe only (is it still so)."""
    norms = _global_grad_norms(history)
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


EXPLODING_GRADIENT.judge_current(functools.partial(exploding_gradient, latest=True))
