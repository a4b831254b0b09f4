"""What the training rules share: the probes they read, when the loss counts as converged, the minimised loss.

Every rule of the package is a pure function ``(TrainingHistory, DoctorConfig) -> list[Finding]``; these helpers
read the history for them. The two options here are read by rules of several modules.
"""
from __future__ import annotations

import functools
import math
import statistics
from typing import TYPE_CHECKING, Any, Callable

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Option
from mindspore_doctor.signals import StepSignals, TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

TrainingRule = Callable[[TrainingHistory, "DoctorConfig"], list[Finding]]

PERSISTENT_PROBES = Option(
    "persistent_probes", 2,
    "MSD115/207/209/212/213/218: a probe signal must hold on this many consecutive probed steps (MSD210/211 take "
    "the median of this many probes after step 1, at least 3).",
)
CONVERGED_LOSS_FRACTION = Option(
    "converged_loss_fraction", 0.05,
    "MSD207/MSD210: once the loss is below this fraction of its initial value, small gradients and updates mean the "
    "model has converged, and are not reported.",
)


def param_location(name: str) -> dict[str, str]:
    return {"parameter": name, "cell": name.rsplit(".", 1)[0] if "." in name else ""}


def is_weight(history: TrainingHistory, name: str) -> bool:
    """Matrices and kernels, not biases or normalisation scales (rank >= 2; unknown shape counts)."""
    shape = history.parameter_shapes.get(name)
    return shape is None or len(shape) >= 2


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def finite_losses(history: TrainingHistory) -> list[tuple[int, float]]:
    return [(step, loss) for step, loss in history.losses if math.isfinite(loss)]


def recent_probes(history: TrainingHistory, count: int) -> list[StepSignals]:
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


def persistent(history: TrainingHistory, config: DoctorConfig, measured: str) -> list[StepSignals]:
    """The last ``persistent_probes`` probes that measured the signal field ``measured``; [] when fewer did."""
    probes = [p for p in recent_probes(history, config.persistent_probes) if getattr(p, measured)]
    return probes if len(probes) >= config.persistent_probes else []


def persistent_count(config: DoctorConfig) -> int:
    """How many probed steps a rule that reads ``persistent_probes`` of them needs (its ``Rule.probes_needed``)."""
    return config.persistent_probes


def converged(history: TrainingHistory, step: int, config: DoctorConfig) -> bool:
    """The loss around ``step`` is below ``converged_loss_fraction`` of where it started: small gradients
    and updates are then what learning looks like, not a problem."""
    losses = [v for s, v in finite_losses(history) if s <= step]
    if len(losses) < 2:
        return False
    start, now = statistics.median(losses[:5]), statistics.median(losses[-5:])
    return start > 0 and now < config.converged_loss_fraction * start


def minimised_loss(rule: TrainingRule) -> TrainingRule:
    """A rule that expects the loss to be minimised: silent on an adversarial loss (``TrainingHistory.adversarial``).
    A GAN's generator and discriminator are each trained against the other, so each loss rises whenever the other
    player improves, and swings or plateaus in a healthy game; ``rules/adversarial.py`` judges what goes wrong there."""
    @functools.wraps(rule)
    def judge(history: TrainingHistory, config: DoctorConfig, *args: Any, **kwargs: Any) -> list[Finding]:
        return [] if history.adversarial else rule(history, config, *args, **kwargs)
    return judge
