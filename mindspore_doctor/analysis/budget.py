"""The bias-variance budget of a run: where the error of the last evaluation goes.

The troubleshooting guide decomposes the test error into irreducible error + avoidable bias + variance +
distribution shift + validation-set overfitting, each with its remedies in priority order. From the last
``EvalRecord`` (errors: 1 - accuracy, or the MSE for regression)::

    target error                 target_error= (e.g. human level); unknown: the trivial predictor's error bounds
                                 the irreducible error from above
    avoidable bias               train error - target error (target unknown: at most the train error)
    variance                     eval error - train error
    distribution shift           target-eval error - eval error (``target_eval_dataset``: validation data drawn
                                 from the test distribution)
    validation-set overfitting   holdout error - (target-eval or eval) error (``holdout_dataset``: a test set
                                 used for nothing else)

The dominant term is the largest *measured* one that exceeds its sampling noise (``NOISE_SIGMAS`` standard
errors: of an accuracy on the samples it was measured on; of an MSE, the loss's standard error when the loss is
that MSE); its remedies are the guide's, in the guide's order. A bound is never dominant: without
``target_error`` the avoidable bias is only "at most the train error", which a healthy run's 2 % train error
satisfies as well as an underfit's 30 %, so it cannot say the model underfits (its note says to set
``target_error=``); when no measured term exceeds its noise, none is dominant. Pure: plain numbers in, a dict out
(``report.meta["error_budget"]``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from mindspore_doctor.signals import EvalRecord, Metric

TARGET, BIAS, VARIANCE, SHIFT, VALIDATION = TERMS = (
    "target error", "avoidable bias", "variance", "distribution shift", "validation-set overfitting")

NOISE_SIGMAS = 2.0
"""A term is told from noise when it exceeds this many standard errors (about 95 % two-sided)."""

REMEDIES: dict[str, tuple[str, ...]] = {
    BIAS: (
        "Use a bigger model (more units or layers).",
        "Reduce regularisation (weight decay, dropout, augmentation strength).",
        "Error analysis: look at the training samples the model gets wrong and what they share.",
        "Try a newer model architecture.",
        "Tune the hyperparameters (learning rate and its schedule, batch size, optimizer).",
        "Add input features that carry the information the labels need.",
    ),
    VARIANCE: (
        "Add more training data.",
        "Add normalisation layers (BatchNorm, LayerNorm).",
        "Augment the training data.",
        "Add regularisation (weight decay, dropout, early stopping).",
        "Error analysis: look at the eval samples the model gets wrong (the error-analysis tables).",
        "Tune the hyperparameters.",
        "Use a smaller model.",
    ),
    SHIFT: (
        "Error analysis of the target-eval errors against the eval errors: find what the target distribution has "
        "that the training data lacks.",
        "Collect more training data like the target distribution, or synthesise it.",
        "Domain adaptation.",
    ),
    VALIDATION: (
        "Use a larger validation set.",
        "Take a fresh validation set: this one has been tuned on until it flatters the model.",
    ),
}
"""The guide's remedies for each term, in its order of priority."""


def metric_error(metric: Metric | None) -> float | None:
    """The error a metric stands for: 1 - accuracy, the MSE as it is; None when unknown or not finite."""
    if metric is None or metric.value is None or not math.isfinite(metric.value):
        return None
    return 1.0 - metric.value if metric.higher_is_better else float(metric.value)


def error_se(metric: Metric | None, samples: int | None, loss: float | None = None,
             loss_se: float | None = None) -> float | None:
    """Standard error of ``metric_error(metric)``: sqrt(p (1 - p) / n) for an accuracy over ``samples`` (counted
    in samples, not tokens or labels: conservative); for an MSE, ``loss_se`` when the loss is that MSE (within
    5 %); None when it cannot be told."""
    error = metric_error(metric)
    if error is None:
        return None
    if metric.higher_is_better:
        if not samples:
            return None
        p = min(max(error, 0.0), 1.0)
        return math.sqrt(p * (1.0 - p) / samples)
    if loss is None or loss_se is None or not math.isfinite(loss) or not math.isfinite(loss_se):
        return None
    return float(loss_se) if abs(loss - error) <= 0.05 * max(abs(error), 1e-12) else None


@dataclass(frozen=True)
class ErrorEstimate:
    """An error measured on one set: its value, standard error (``error_se``), sample count, and whether it is
    1 - accuracy (a proportion) or an MSE."""

    error: float | None
    se: float | None
    samples: int | None
    accuracy: bool


def estimate(metric: Metric | None, samples: int | None, loss: float | None = None,
             loss_se: float | None = None) -> ErrorEstimate:
    return ErrorEstimate(metric_error(metric), error_se(metric, samples, loss, loss_se), samples,
                         bool(metric is not None and metric.higher_is_better))


def measured(record: EvalRecord, prefix: str, samples: int | None) -> ErrorEstimate:
    """The error of the ``prefix`` ("train", "eval", "target_eval", "holdout") data of ``record``; its sample count
    is ``samples`` when the record lacks ``<prefix>_samples``."""
    return estimate(getattr(record, f"{prefix}_metric", None), getattr(record, f"{prefix}_samples", None) or samples,
                    getattr(record, f"{prefix}_loss", None), getattr(record, f"{prefix}_loss_se", None))


def gap_noise(first: ErrorEstimate, second: ErrorEstimate) -> float | None:
    """``NOISE_SIGMAS`` standard errors of ``second.error - first.error``: for two accuracies the two-proportion
    test's (pooled error: a perfect split still has noise); otherwise the two standard errors combined (an MSE's:
    the loss's when the loss is that MSE); None when one is unknown."""
    if (first.accuracy and second.accuracy and first.samples and second.samples and first.error is not None
            and second.error is not None):
        n1, n2 = first.samples, second.samples
        pooled = min(max((first.error * n1 + second.error * n2) / (n1 + n2), 0.0), 1.0)
        return NOISE_SIGMAS * math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if first.se is None or second.se is None:
        return None
    return NOISE_SIGMAS * math.sqrt(first.se ** 2 + second.se ** 2)


def _row(term: str, value: float | None, noise: float | None, note: str, bound: str | None = None) -> dict[str, Any]:
    return {"term": term, "value": value, "bound": bound, "note": note, "noise": noise}


def told(row: dict[str, Any]) -> bool:
    """A budget row that is measured (not a bound) and above its noise."""
    return row["bound"] is None and row["value"] is not None and row["value"] > (row["noise"] or 0.0)


def validation_overfitting(holdout: ErrorEstimate, reference: ErrorEstimate, name: str) -> dict[str, Any]:
    """The validation-set overfitting row: how much worse the model does on a held-out set used for nothing else
    than on the set it was chosen on (``name``: "eval", "target-eval"). The budget's last row, and what tune's
    MSD406 measures once a study has a held-out split (the best of many trials scored on one validation set
    flatters it: ``rules.tuning.selection_optimism`` is the expected size of this term)."""
    if holdout.error is None or reference.error is None:
        return _row(VALIDATION, None, None, "not measured (give holdout_dataset=, a test set used for nothing else)")
    return _row(VALIDATION, holdout.error - reference.error, gap_noise(reference, holdout),
                f"holdout error - {name} error")


def error_budget(records: Sequence[EvalRecord], *, target_error: float | None = None) -> dict[str, Any] | None:
    """The budget of the last evaluation (``report.meta["error_budget"]``); None without an eval metric.

    ::

        {"metric": "error" | "mse", "target", "target_source": "target_error" | "unknown", "baseline_error",
         "train_error", "eval_error", "target_eval_error", "holdout_error",
         "rows": [{"term", "value", "bound": "upper" | "lower" | None, "note", "noise"}],
         "dominant": term | None, "remedies": [...]}

    ``rows`` hold the terms in ``TERMS`` order; ``value`` None: not measured (the note says what would measure
    it); ``noise``: ``NOISE_SIGMAS`` standard errors of the term (None: unknown). ``dominant``: the largest
    measured term (``bound`` None) above its noise; None when there is none. The train sample's size is
    ``train_samples`` when the record has it, else taken as the eval sample's (both are read within
    ``eval_max_batches``); likewise for the target-eval and holdout sets.
    """
    if not records:
        return None
    last = records[-1]
    evaluated = measured(last, "eval", last.eval_samples)
    eval_error = evaluated.error
    if eval_error is None:
        return None
    trained, shifted, held = (measured(last, prefix, evaluated.samples)
                              for prefix in ("train", "target_eval", "holdout"))
    train_error, shift_error = trained.error, shifted.error
    baseline_error = metric_error(last.baseline)
    metric = "error" if last.eval_metric.higher_is_better else "mse"
    known = target_error is not None and math.isfinite(target_error)
    trivial = (last.baseline.trivial if last.baseline is not None and last.baseline.trivial
               else "the trivial predictor")

    bias_noise = None if trained.se is None else NOISE_SIGMAS * trained.se
    rows = []
    if known:
        rows.append(_row(TARGET, float(target_error), None, "given (target_error=)"))
    else:
        rows.append(_row(TARGET, baseline_error, None,
                         f"unknown (set target_error=, e.g. human-level error); the error of {trivial} bounds "
                         "the irreducible error from above" if baseline_error is not None else
                         "unknown (set target_error=, e.g. human-level error)",
                         bound="upper" if baseline_error is not None else None))
    if train_error is None:
        rows.append(_row(BIAS, None, None, "no train metric (give the evaluation the train dataset)"))
    elif known:
        rows.append(_row(BIAS, train_error - target_error, bias_noise, "train error - target error"))
    else:
        rows.append(_row(BIAS, train_error, bias_noise,
                         "at most the train error: the target error is unknown, so the bias cannot be judged "
                         "(set target_error=, e.g. human-level error, to judge it)", bound="upper"))
    rows.append(_row(VARIANCE, None if train_error is None else eval_error - train_error,
                     gap_noise(trained, evaluated),
                     "eval error - train error" if train_error is not None else "no train metric"))
    rows.append(_row(SHIFT, None if shift_error is None else shift_error - eval_error, gap_noise(evaluated, shifted),
                     "target-eval error - eval error" if shift_error is not None else
                     "not measured (give target_eval_dataset=, validation data from the test distribution)"))
    if shift_error is not None:
        rows.append(validation_overfitting(held, shifted, "target-eval"))
    else:
        rows.append(validation_overfitting(held, evaluated, "eval"))
    candidates = [row for row in rows[1:] if told(row)]
    dominant = max(candidates, key=lambda row: row["value"])["term"] if candidates else None
    return {
        "metric": metric, "target": float(target_error) if known else None,
        "target_source": "target_error" if known else "unknown", "baseline_error": baseline_error,
        "train_error": train_error, "eval_error": eval_error, "target_eval_error": shift_error,
        "holdout_error": held.error, "rows": rows, "dominant": dominant,
        "remedies": list(REMEDIES.get(dominant, ())),
    }
