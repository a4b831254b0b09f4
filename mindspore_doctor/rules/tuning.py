"""The search space from the diagnosis, and whether a study's winner can be trusted (MSD406).

Pure judgement over finding codes and numbers: ``tune`` (``mindspore_doctor/tuner``) measures, this module decides
which knobs to turn and how far, so that a run that diverged searches lower learning rates, one that overfits more
regularisation, one that underfits more capacity and less regularisation. The sets of codes it reads (``LR_TOO_HIGH``,
``FATAL``, ...) are built from the rules that define those codes.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Iterable

from mindspore_doctor.analysis.budget import estimate, told, validation_overfitting
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Rule, WARNING
from mindspore_doctor.signals import Metric
from mindspore_doctor.rules import evaluation
from mindspore_doctor.rules.layers import DROPOUT_RATE_SUSPICIOUS
from mindspore_doctor.rules.training import (EXPLODING_GRADIENT, LOSS_DIVERGING, LOSS_NOT_DECREASING, LOSS_OSCILLATING,
                                             NONFINITE_LOSS, NONFINITE_TENSOR, UPDATE_RATIO_TOO_LARGE,
                                             UPDATE_RATIO_TOO_SMALL, WEIGHTS_NOT_UPDATING)


def _codes(*rules: Rule) -> frozenset[str]:
    return frozenset(rule.code for rule in rules)


LR_TOO_HIGH = _codes(NONFINITE_LOSS, LOSS_DIVERGING, LOSS_OSCILLATING, NONFINITE_TENSOR, EXPLODING_GRADIENT,
                     UPDATE_RATIO_TOO_LARGE)
"""Symptoms of a learning rate too high: search below the default, with warm-up."""
LR_TOO_LOW = _codes(LOSS_NOT_DECREASING, WEIGHTS_NOT_UPDATING, UPDATE_RATIO_TOO_SMALL)
"""Symptoms of a learning rate too low: search above the default."""
OVERFITTING = _codes(evaluation.OVERFITTING)
UNDERFITTING = _codes(evaluation.UNDERFITTING, evaluation.CANNOT_OVERFIT_BATCH, evaluation.WORSE_THAN_BASELINE)
DROPOUT_TOO_HIGH = _codes(DROPOUT_RATE_SUSPICIOUS)
FATAL = _codes(NONFINITE_LOSS, LOSS_DIVERGING, NONFINITE_TENSOR)
"""A trial showing one of these is pruned at that step: nothing it trains afterwards is worth the time."""
LR_SPAN = 10.0
"""Without a symptom, the learning rate is searched within this factor either side of the centre."""
PRUNE_QUANTILE = 0.25
"""A learning curve in the worst quarter of the others at the same epoch (and clearly so) is hopeless."""


@dataclass(frozen=True)
class Knob:
    """One hyperparameter's range: ``float``/``int`` between ``low`` and ``high`` (``log``: log-uniform), or
    ``categorical`` among ``choices``; ``why`` says which finding (or default) chose it."""

    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = field(default_factory=tuple)
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Knob":
        return cls(**{**data, "choices": tuple(data.get("choices", ()))})

    @classmethod
    def parse(cls, name: str, spec: Any) -> "Knob":
        """A user's range: ``(low, high)``, ``(low, high, "log")``, a list of choices, or a ``Knob``."""
        if isinstance(spec, Knob):
            knob = spec
        elif isinstance(spec, list):
            knob = cls("categorical", choices=tuple(spec), why="given")
        elif isinstance(spec, tuple) and len(spec) in (2, 3) and all(isinstance(v, (int, float)) for v in spec[:2]):
            low, high = spec[0], spec[1]
            log = len(spec) == 3 and spec[2] == "log"
            if len(spec) == 3 and spec[2] not in ("log", "linear"):
                raise ValueError(f"space[{name!r}]: the third item is 'log' or 'linear', not {spec[2]!r}")
            kind = "int" if isinstance(low, int) and isinstance(high, int) and not isinstance(low, bool) else "float"
            knob = cls(kind, float(low), float(high), log, why="given")
        else:
            raise ValueError(f"space[{name!r}]: give (low, high), (low, high, 'log') or a list of choices, "
                             f"not {spec!r}")
        if knob.kind == "categorical" and not knob.choices:
            raise ValueError(f"space[{name!r}]: no choices")
        if knob.kind != "categorical" and not (knob.low is not None and knob.high is not None
                                               and knob.low < knob.high):
            raise ValueError(f"space[{name!r}]: low must be below high, got {knob.low} and {knob.high}")
        if knob.log and knob.low is not None and knob.low <= 0:
            raise ValueError(f"space[{name!r}]: a log range needs low > 0, got {knob.low}")
        return knob


def parse_space(space: dict[str, Any]) -> dict[str, Knob]:
    """A user-given space (name -> range), checked; an empty one is refused."""
    if not isinstance(space, dict):
        raise ValueError(f"the search space must be a dict name -> range or choices, or 'auto'; got "
                         f"{type(space).__name__}")
    if not space:
        raise ValueError("the search space is empty: give at least one hyperparameter range, or space='auto'")
    return {str(name): Knob.parse(str(name), spec) for name, spec in space.items()}


def auto_space(codes: Iterable[str], *, learning_rate: float | None, lr_suggestion: float | None = None,
               has_dropout: bool = False, batch_sizes: tuple[int, ...] = ()) -> dict[str, Knob]:
    """The knobs a run with these findings is most sensitive to, and their ranges.

    The learning rate always: log-uniform around the LR range test's suggestion (or the configured rate), moved
    below it after divergence symptoms (with a warm-up knob), above it after slow-progress ones. Weight decay
    always; dropout when the network has Dropout. Overfitting widens regularisation upwards; underfitting lowers
    it and adds a width multiplier (capacity, for a ``build`` that reads it). Batch size only where the data is
    built per trial (``batch_sizes``).
    """
    codes = set(codes)
    centre = lr_suggestion or learning_rate or 1e-3
    source = "the LR range test's suggestion" if lr_suggestion else "the configured learning rate"
    space: dict[str, Knob] = {}
    high_lr, low_lr = sorted(codes & LR_TOO_HIGH), sorted(codes & LR_TOO_LOW)
    if high_lr and not lr_suggestion:
        space["learning_rate"] = Knob("float", centre / 1000.0, centre, True,
                                      why=f"{', '.join(high_lr)}: below {source} ({centre:.3g})")
    elif low_lr and not high_lr and not lr_suggestion:
        space["learning_rate"] = Knob("float", centre, centre * 100.0, True,
                                      why=f"{', '.join(low_lr)}: above {source} ({centre:.3g})")
    else:
        space["learning_rate"] = Knob("float", centre / LR_SPAN, centre * LR_SPAN, True,
                                      why=f"around {source} ({centre:.3g})")
    if high_lr:
        space["warmup_ratio"] = Knob("float", 0.0, 0.3, why=f"{', '.join(high_lr)}: a warm-up may tame the start")
    overfit, underfit = sorted(codes & OVERFITTING), sorted(codes & UNDERFITTING)
    if overfit:
        space["weight_decay"] = Knob("float", 1e-5, 1e-1, True, why=f"{', '.join(overfit)}: more regularisation")
    elif underfit:
        space["weight_decay"] = Knob("float", 1e-8, 1e-4, True, why=f"{', '.join(underfit)}: less regularisation")
    else:
        space["weight_decay"] = Knob("float", 1e-6, 1e-2, True, why="the usual range")
    if has_dropout:
        if codes & DROPOUT_TOO_HIGH or underfit:
            space["dropout"] = Knob("float", 0.0, 0.3, why=f"{', '.join(sorted(codes & DROPOUT_TOO_HIGH) or underfit)}: "
                                    "lower drop rates")
        elif overfit:
            space["dropout"] = Knob("float", 0.1, 0.6, why=f"{', '.join(overfit)}: more dropout")
        else:
            space["dropout"] = Knob("float", 0.0, 0.5, why="the network has Dropout")
    if underfit:
        space["width_multiplier"] = Knob("categorical", choices=(1, 2, 4), why=f"{', '.join(underfit)}: more capacity")
    if batch_sizes:
        space["batch_size"] = Knob("categorical", choices=tuple(batch_sizes), why="the data is built per trial")
    return space


def accuracy_error(accuracy: float, samples: int) -> float:
    """One standard error of an accuracy measured on ``samples`` (binomial; at least that of one sample)."""
    p = min(max(accuracy, 0.0), 1.0)
    return math.sqrt(max(p * (1.0 - p), 1.0 / samples) / samples)


def score_noise(metric: str, value: float, samples: int | None) -> float:
    """Two standard errors of a score: what one trial's score may differ from another's by chance. Known for
    accuracies; 0 for other metrics (losses, MSE), whose error the score alone does not tell."""
    return 2.0 * accuracy_error(value, samples) if samples and metric.endswith("accuracy") else 0.0


def hopeless(value: float, others: list[float], higher_is_better: bool, noise: float = 0.0) -> bool:
    """A trial's score at one epoch against the other trials' at the same epoch: in their worst quarter, and
    further past its edge than ``noise`` (``score_noise``), so a trial is not stopped for being
    unlucky on a small validation set."""
    if not math.isfinite(value):
        return True
    if not others:
        return False
    ranked = sorted(others, reverse=not higher_is_better)  # worst first
    edge = ranked[int(PRUNE_QUANTILE * (len(ranked) - 1))]
    return value < edge - noise if higher_is_better else value > edge + noise


def selection_optimism(best: float, samples: int, trials: int) -> float:
    """Expected excess of the best of ``trials`` accuracies over its true value when each is measured on the same
    ``samples`` and all are equally good: one standard error of the accuracy times the expected maximum of
    ``trials`` standard normals (Blom's approximation; 1.4 for 8 trials, 2.0 for 30)."""
    if samples <= 0 or trials < 2:
        return 0.0
    expected_max = NormalDist().inv_cdf((trials - 0.375) / (trials + 0.25))
    return accuracy_error(best, samples) * expected_max


OPTIMISM_TOLERANCE = 0.01
"""MSD406: the expected selection optimism of the best accuracy (absolute) worth a warning."""
TUNING_OPTIMISTIC_BEST = Rule(
    "MSD406", "tuning-optimistic-best", WARNING,
    "best of many trials scored on one small validation set",
)


@TUNING_OPTIMISTIC_BEST.judge
def optimistic_best(metric: str, best: float, samples: int | None, trials: int, holdout: float | None = None,
                    holdout_samples: int | None = None) -> list[Finding]:
    """MSD406: the best validation accuracy of many trials on a small validation set overstates the model.

    With the best trial's held-out accuracy (``holdout`` on ``holdout_samples``), the error budget's
    validation-set overfitting term (``analysis.budget.validation_overfitting``) measures what is otherwise only
    expected: a warning when it exceeds its noise (or its noise is unknown), info when the held-out split shows
    none."""
    if not samples or not metric.endswith("accuracy"):
        return []
    optimism = selection_optimism(best, samples, trials)
    if optimism < OPTIMISM_TOLERANCE:
        return []
    message = (f"The best {metric} {best:.1%} was picked among {trials} trials measured on the same {samples} "
               f"validation samples; by chance alone the best of {trials} such scores reads about {optimism:.1%} "
               f"above its true value.")
    evidence = {"best": best, "samples": samples, "trials": trials, "optimism": optimism, "holdout": holdout,
                "holdout_samples": holdout_samples}
    suggestion = ("Report the held-out score (tune(..., holdout_ds=...)), validate on more samples, or run fewer "
                  "trials.")
    if holdout is None:
        return [TUNING_OPTIMISTIC_BEST.finding(message + " No held-out split was given to check it.",
                                               location={"check": "tune"}, evidence=evidence, suggestion=suggestion)]
    row = validation_overfitting(estimate(Metric(metric, holdout, higher_is_better=True), holdout_samples),
                                 estimate(Metric(metric, best, higher_is_better=True), samples), "validation")
    gap, noise = row["value"], row["noise"]
    evidence.update(validation_overfitting=gap, noise=noise)
    if noise is not None and not told(row):
        return [TUNING_OPTIMISTIC_BEST.finding(
            message + f" The held-out split does not show it: the best trial scores {holdout:.1%} there, within "
            f"noise of its validation score (validation-set overfitting {gap:+.1%}, noise {noise:.1%} on "
            f"{holdout_samples} held-out samples).",
            location={"check": "tune"}, evidence=evidence, severity="info",
            suggestion="Report the held-out score, not the validation score, as the model's.")]
    measured = (f"{gap:+.1%} validation-set overfitting, above its noise {noise:.1%}" if noise is not None else
                f"{gap:+.1%} validation-set overfitting; its noise is unknown")
    return [TUNING_OPTIMISTIC_BEST.finding(
        message + f" On the held-out split the best trial scores {holdout:.1%} ({measured}).",
        location={"check": "tune"}, evidence=evidence, suggestion=suggestion)]


RULES = (TUNING_OPTIMISTIC_BEST,)
