"""What the training rules share: the probes they read, when the loss counts as converged, the minimised loss.

Every rule of the package is a pure function ``(TrainingHistory, DoctorConfig) -> list[Finding]``; these helpers
read the history for them. The two options here are read by rules of several modules.

The rules re-run on every probed step (issue 26: a probe step's host work should cost next to nothing), and several
derive the same quantities from one history: its finite losses, its recent probes, whether the loss converged.
Inside ``shared_work()`` (the training session opens it around each evaluation) each is derived once per history
object and handed to every rule that asks (``shared``); outside it, each rule derives its own. Windows over the loss
are judged with numpy (``window_medians``, ``row_medians``) to the last bit of what the plain-Python loops computed.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import math
import statistics
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterator, TypeVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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


_T = TypeVar("_T")
_SHARED: contextvars.ContextVar[dict[int, tuple[TrainingHistory, dict[Hashable, Any]]] | None] = \
    contextvars.ContextVar("training_rules_shared", default=None)


@contextlib.contextmanager
def shared_work() -> Iterator[None]:
    """While open, what the rules derive from one history object is derived once (``shared``). The histories judged
    inside must not change until it closes: the session opens it around one evaluation, where none does."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared(history: TrainingHistory, key: Hashable, derive: Callable[[], _T]) -> _T:
    """``derive()``, computed once per ``history`` and ``key`` inside ``shared_work()`` (every time outside it). What
    it returns is shared by the rules that ask: they read it, never change it."""
    memo = _SHARED.get()
    if memo is None:
        return derive()
    entry = memo.get(id(history))
    if entry is None or entry[0] is not history:
        entry = memo[id(history)] = (history, {})  # holds the history: its id is not reused while open
    values = entry[1]
    if key not in values:
        values[key] = derive()
    return values[key]


def median(values: Any) -> float:
    """``statistics.median`` of a 1-D float array, bit for bit: sorted stably, as ``sorted`` does (equal values, -0.0
    and 0.0 too, keep their order), then the middle value or (lower + upper) / 2. Like ``row_medians`` it leaves
    numpy's overflow warnings on (a Python float overflows to inf silently): the rules call both under
    ``np.errstate(all="ignore")``."""
    ordered = np.sort(np.asarray(values, dtype=float), kind="stable")
    n = len(ordered)
    if n == 0:
        raise statistics.StatisticsError("no median for empty data")
    return float(ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2)


def row_medians(rows: np.ndarray) -> np.ndarray:
    """``statistics.median`` of each row of a 2-D float array (rows of at least one value), bit for bit: each row
    sorted stably, as ``sorted`` does, then its middle value or (lower + upper) / 2."""
    ordered = np.sort(rows, axis=1, kind="stable")
    mid = rows.shape[1] // 2
    return ordered[:, mid] if rows.shape[1] % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2


def window_medians(values: Any, width: int) -> np.ndarray:
    """``statistics.median`` of every run of ``width`` consecutive values (``width`` >= 1), all at once and bit for
    bit (``row_medians``)."""
    return row_medians(sliding_window_view(np.asarray(values, dtype=float), width))


def param_location(name: str) -> dict[str, str]:
    return {"parameter": name, "cell": name.rsplit(".", 1)[0] if "." in name else ""}


def is_weight(history: TrainingHistory, name: str) -> bool:
    """Matrices and kernels, not biases or normalisation scales (rank >= 2; unknown shape counts)."""
    shape = history.parameter_shapes.get(name)
    return shape is None or len(shape) >= 2


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def finite_losses(history: TrainingHistory) -> list[tuple[int, float]]:
    """(step, loss) of every step with a finite loss, in order (shared: read it, do not change it)."""
    isfinite = math.isfinite
    return shared(history, "finite_losses", lambda: [(s.step, loss) for s in history.steps
                                                     if (loss := s.loss) is not None and isfinite(loss)])


def measured_steps(history: TrainingHistory) -> list[StepSignals]:
    """The steps that carry any in-graph statistic (gradients, updates, non-finite counts, activations), in order:
    a rule that reads one of them filters these, not every step (shared: read it, do not change it)."""
    return shared(history, "measured_steps", lambda: [
        s for s in history.steps
        if s.grad_norm or s.activations or s.grad_nonfinite or s.weight_nonfinite or s.update_ratio])


def finite_loss_values(history: TrainingHistory) -> np.ndarray:
    """The values of ``finite_losses`` as an array (shared: read it, do not change it)."""
    return shared(history, "finite_loss_values",
                  lambda: np.array([v for _, v in finite_losses(history)], dtype=float))


def _broken_step(measured: list[StepSignals]) -> int | None:
    """The first of the ``measured`` steps whose update left a non-finite weight (MSD206), or None."""
    return next((s.step for s in measured if s.weight_nonfinite and any(s.weight_nonfinite.values())), None)


def recent_probes(history: TrainingHistory, count: int) -> list[StepSignals]:
    """The last ``count`` probed steps that ran on finite weights, however far apart the probes are.

    Once NaN/Inf reached the weights (MSD206), every later statistic is an after-effect: ReLUs output 0,
    gradients read 0; judging them would bury the cause under "dead" and "vanishing" findings. The probe
    whose update made the weights non-finite still counts: its forward and backward ran before the update.
    """
    return shared(history, ("recent_probes", count), lambda: _recent_probes(history, count))


def _recent_probes(history: TrainingHistory, count: int) -> list[StepSignals]:
    measured = measured_steps(history)
    broken = shared(history, "broken_step", lambda: _broken_step(measured))
    probed: list[StepSignals] = []
    for s in reversed(measured):  # from the end: never misses a probe
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
    return shared(history, ("converged", step, config.converged_loss_fraction),
                  lambda: _converged(history, step, config))


def _converged(history: TrainingHistory, step: int, config: DoctorConfig) -> bool:
    losses = finite_losses(history)
    first = list(itertools.islice((v for s, v in losses if s <= step), 5))  # the first 5 up to ``step``
    if len(first) < 2:
        return False
    last = list(itertools.islice((v for s, v in reversed(losses) if s <= step), 5))[::-1]  # and the last 5
    start, now = statistics.median(first), statistics.median(last)
    return start > 0 and now < config.converged_loss_fraction * start


def minimised_loss(rule: TrainingRule) -> TrainingRule:
    """A rule that expects the loss to be minimised: silent on an adversarial loss (``TrainingHistory.adversarial``).
    A GAN's generator and discriminator are each trained against the other, so each loss rises whenever the other
    player improves, and swings or plateaus in a healthy game; ``rules/adversarial.py`` judges what goes wrong there."""
    @functools.wraps(rule)
    def judge(history: TrainingHistory, config: DoctorConfig, *args: Any, **kwargs: Any) -> list[Finding]:
        return [] if history.adversarial else rule(history, config, *args, **kwargs)
    return judge
