"""MSD212, MSD213, MSD216: the activation probes' samples: dead ReLUs, saturated Sigmoid/Tanh, activations that
grow through the network."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Option, Rule, WARNING
from mindspore_doctor.rules.training.common import (PERSISTENT_PROBES, TrainingRule, finite, persistent,
                                                    persistent_count, recent_probes)
from mindspore_doctor.signals import DEAD_AT_ZERO, StepSignals, TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


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
        probes = persistent(history, config, "activations")
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
DEAD_RELU = Rule(
    "MSD212", "dead-relu", WARNING,
    "ReLU outputs almost all zero",
    options=(DEAD_RELU_FRACTION, DEAD_UNIT_FRACTION, DEAD_UNIT_Z, PERSISTENT_PROBES),
    probe="activations", probes_needed=persistent_count, transient=True,
)
dead_relu = DEAD_RELU.judge(_activation_fraction_rule(
    DEAD_RELU,
    DEAD_AT_ZERO,
    (("dead_fraction", "dead_relu_fraction", "outputs are <= 0", ""),
     ("dead_unit_fraction", "dead_unit_fraction", "units are <= 0 on every sample of the batch (dead units)",
      "dead_unit_z")),
    "Lower the learning rate, use He init and a small positive bias, or LeakyReLU/GELU; check the input is "
    "normalised.",
))


SATURATED_FRACTION = Option(
    "saturated_fraction", 0.999,
    "MSD213: fraction of Sigmoid/Tanh outputs in the flat tails.",
)
SATURATED_ACTIVATION = Rule(
    "MSD213", "saturated-activation", WARNING,
    "Sigmoid/Tanh outputs in the flat tails",
    options=(SATURATED_FRACTION, PERSISTENT_PROBES),
    probe="activations", probes_needed=persistent_count, transient=True,
)
saturated_activation = SATURATED_ACTIVATION.judge(_activation_fraction_rule(
    SATURATED_ACTIVATION,
    ("sigmoid", "tanh"),
    (("saturated_fraction", "saturated_fraction", "inputs sit in the flat tails (zero gradient)", ""),),
    "Normalise the inputs, add BatchNorm/LayerNorm before the activation, use Glorot init or ReLU.",
))


ACTIVATION_EXPLODE = Option(
    "activation_explode", 10.0,
    "MSD216: mean |activation| at or above this and growing through the network.",
)
ACTIVATION_EXPLODING = Rule(
    "MSD216", "activation-exploding", WARNING,
    "activations large and growing through the network",
    options=(ACTIVATION_EXPLODE,),
    probe="activations", transient=True,
)


@ACTIVATION_EXPLODING.judge
def activation_exploding(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    probes = recent_probes(history, 1)
    if not probes or not probes[-1].activations:
        return []
    ordered = sorted(probes[-1].activations.items(), key=lambda kv: kv[1].order)
    means = [(path, a.mean_abs) for path, a in ordered if finite(a.mean_abs)]
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
