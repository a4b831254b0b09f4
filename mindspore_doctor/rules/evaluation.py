"""MSD401-MSD405, MSD407: judge evaluation signals (plain numbers) against DoctorConfig thresholds.

Signals come from ``probes/evaluation.py`` (the Doctor's epoch-end evaluation)
or from ``sanity()``; every rule here is a pure function over them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from mindspore_doctor.analysis.budget import REMEDIES, SHIFT, gap_noise, measured
from mindspore_doctor.findings import Finding
from mindspore_doctor.signals import EvalRecord, Metric
from mindspore_doctor.rule import CHECK_SKIPPED, ERROR, Option, Rule, WARNING

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _noise(baseline: Metric, samples: int | None) -> float:
    """Two standard errors of an accuracy measured on ``samples`` samples (0 when unknown or not an accuracy)."""
    if not samples or not baseline.higher_is_better:
        return 0.0
    p = min(max(baseline.value, 0.0), 1.0)
    return 2.0 * math.sqrt(p * (1.0 - p) / samples)


def _beats(model: Metric, baseline: Metric, margin: float, samples: int | None = None) -> bool:
    """Is the model better than the baseline by ``margin`` of the headroom (accuracy) or of the error?

    With ``samples``, an accuracy must also beat the baseline by more than its sampling noise.
    """
    if model.higher_is_better:
        return model.value > baseline.value + max(margin * (1.0 - baseline.value), _noise(baseline, samples))
    return model.value < baseline.value * (1.0 - margin)


def _describe(metric: Metric) -> str:
    return f"{metric.name} {metric.value:.1%}" if metric.higher_is_better else f"{metric.name} {metric.value:.3g}"


# --- MSD401 -------------------------------------------------------------------------------


def _se(*scaled: tuple[float | None, float]) -> float:
    """Standard error of a sum of independent, scaled losses: (standard error, scale) pairs; unknown counts as 0."""
    return math.sqrt(sum((scale * (se or 0.0)) ** 2 for se, scale in scaled))


def _sigmas(excess: float, se: float, last: EvalRecord) -> str:
    """"3.4 standard errors (± 0.031 over 256 eval samples)"; "" when the noise is unknown."""
    if not se:
        return ""
    samples = f" over {last.eval_samples} eval samples" if last.eval_samples else ""
    return f"{excess / se:.1f} standard errors (± {se:.3g}{samples})"


OVERFIT_PATIENCE = Option(
    "overfit_patience", 2,
    "MSD401: consecutive evaluations with rising eval loss (while train loss falls) that mean overfitting, and "
    "evaluations without a new best eval loss that mean it stopped improving (the gap test).",
)
OVERFIT_MIN_RISE = Option(
    "overfit_min_rise", 0.1,
    "MSD401: rising eval loss must end at least this fraction above its best (a healthy run's eval loss wanders by "
    "a few percent once it has converged).",
)
OVERFIT_GAP_RATIO = Option(
    "overfit_gap_ratio", 2.0,
    "MSD401: eval loss at or above this multiple of train loss, once eval loss stopped improving (no new best for "
    "``overfit_patience`` evaluations).",
)
OVERFIT_NOISE_SIGMAS = Option(
    "overfit_noise_sigmas", 3.0,
    "MSD401: a rise of the eval loss above its best, and its gap above the train loss, must exceed this many "
    "standard errors of the losses (per-sample loss std / sqrt(samples)): on a 114-sample eval split one "
    "evaluation's mean loss moves by ~1 standard error, and the best of many evaluations sits 1-2 below the truth.",
)
OVERFITTING = Rule(
    "MSD401", "overfitting", WARNING,
    "eval loss rising while train loss falls",
    options=(OVERFIT_PATIENCE, OVERFIT_MIN_RISE, OVERFIT_GAP_RATIO, OVERFIT_NOISE_SIGMAS),
)


@OVERFITTING.judge
def overfitting(records: Sequence[EvalRecord], config: DoctorConfig) -> list[Finding]:
    """Eval loss rising for ``overfit_patience`` evaluations while train loss falls (ending at least
    ``overfit_min_rise`` and ``overfit_noise_sigmas`` standard errors above its best), or, once stalled (no new
    best for ``overfit_patience`` evaluations), an eval loss at least ``overfit_gap_ratio`` x the train loss and
    ``overfit_noise_sigmas`` standard errors above it.

    The standard errors (``eval_loss_se``, ``train_loss_se``) keep both tests quiet on a small eval split,
    whose mean loss moves by its sampling noise from one evaluation to the next.
    """
    rows = [r for r in records if _finite(r.train_loss) and _finite(r.eval_loss)]
    k, z = config.overfit_patience, config.overfit_noise_sigmas
    for end in range(k, len(rows)):
        window = rows[end - k : end + 1]
        eval_rising = all(b.eval_loss > a.eval_loss for a, b in zip(window, window[1:]))
        train_falling = all(b.train_loss < a.train_loss for a, b in zip(window, window[1:]))
        best = min(rows[: end + 1], key=lambda r: r.eval_loss)
        last = window[-1]
        rise, se = last.eval_loss - best.eval_loss, _se((last.eval_loss_se, 1.0), (best.eval_loss_se, 1.0))
        if (eval_rising and train_falling and last.eval_loss >= (1 + config.overfit_min_rise) * best.eval_loss
                and rise > z * se):
            noise = _sigmas(rise, se, last)
            return [_overfit_finding(
                f"The eval loss rose for {k} evaluations in a row (from {window[0].eval_loss:.4g} to "
                f"{last.eval_loss:.4g} at epoch {last.epoch}) while the train loss kept falling "
                f"({window[0].train_loss:.4g} -> {last.train_loss:.4g}): training went past its best point "
                f"(epoch {best.epoch}, eval loss {best.eval_loss:.4g}; now {last.eval_loss / best.eval_loss - 1:.0%} "
                f"above it{', ' + noise if noise else ''}).",
                last, best, "rising", se)]
    if len(rows) > k:
        best = min(rows, key=lambda r: r.eval_loss)
        last = rows[-1]
        stalled = all(r is not best for r in rows[len(rows) - k:])  # no new best in the last k evaluations
        gap = last.eval_loss / last.train_loss if last.train_loss > 0 else math.inf
        excess = last.eval_loss - last.train_loss
        se = _se((last.eval_loss_se, 1.0), (last.train_loss_se, 1.0))
        if stalled and gap >= config.overfit_gap_ratio and excess > z * se:
            noise = _sigmas(excess, se, last)
            return [_overfit_finding(
                f"The eval loss ({last.eval_loss:.4g}) is {gap:.3g}x the train loss ({last.train_loss:.4g}) at "
                f"epoch {last.epoch} and has not improved since epoch {best.epoch} ({best.eval_loss:.4g})"
                + (f"; the gap is {noise}." if noise else "."),
                last, best, "gap", se)]
    return []


def _overfit_finding(message: str, last: EvalRecord, best: EvalRecord, kind: str, se: float) -> Finding:
    return OVERFITTING.finding(message, step=None, location={"epoch": last.epoch},
        evidence={"kind": kind, "epoch": last.epoch, "train_loss": last.train_loss, "eval_loss": last.eval_loss,
                  "best_epoch": best.epoch, "best_eval_loss": best.eval_loss, "standard_error": se,
                  "eval_samples": last.eval_samples},
        suggestion=f"Keep the checkpoint of epoch {best.epoch} (early stopping); add data or augmentation, "
        "weight decay or dropout, or use a smaller model.",
    )


# --- MSD402 / MSD404 ----------------------------------------------------------------------


UNDERFIT_MARGIN = Option(
    "underfit_margin", 0.2,
    "MSD402: train metric within this fraction of the headroom above the trivial baseline is underfitting.",
)
UNDERFITTING = Rule(
    "MSD402", "underfitting", WARNING,
    "train metric close to a trivial baseline",
    options=(UNDERFIT_MARGIN,),
)


@UNDERFITTING.judge
def underfitting(train_metric: Metric | None, baseline: Metric | None, config: DoctorConfig,
                 epoch: int | None = None) -> list[Finding]:
    """MSD402: after training, the train metric is still close to the trivial predictor's."""
    if train_metric is None or baseline is None or not _finite(train_metric.value) or not _finite(baseline.value):
        return []
    if _beats(train_metric, baseline, config.underfit_margin):
        return []
    return [UNDERFITTING.finding(
        f"After training, the model's train {_describe(train_metric)} is close to a trivial predictor's "
        f"({_describe(baseline)}; needs to beat it by {config.underfit_margin:.0%} of the headroom): the model "
        "underfits even the training data.",
        location={"epoch": epoch} if epoch is not None else None,
        evidence={"metric": train_metric.name, "train": train_metric.value, "baseline": baseline.value,
                  "margin": config.underfit_margin},
        suggestion="Train longer or with a higher learning rate, use a bigger model, reduce regularisation; "
        "if it cannot fit one batch either (MSD403), check that labels match the inputs.",
    )]


BASELINE_MARGIN = Option(
    "baseline_margin", 0.05,
    "MSD404: metric must beat the trivial baseline by this fraction of the headroom (accuracy) / of the baseline "
    "error.",
)
WORSE_THAN_BASELINE = Rule(
    "MSD404", "worse-than-baseline", ERROR,
    "metric not better than a trivial predictor",
    options=(BASELINE_MARGIN,),
)


@WORSE_THAN_BASELINE.judge
def worse_than_baseline(metric: Metric | None, baseline: Metric | None, config: DoctorConfig,
                        data: str = "eval", epoch: int | None = None, samples: int | None = None) -> list[Finding]:
    """MSD404: the model's metric is not better than the majority class / mean predictor's.

    ``samples``: how many samples the metric was measured on (an accuracy must beat the
    baseline by more than two standard errors).
    """
    if metric is None or baseline is None or not _finite(baseline.value):
        return []
    if _finite(metric.value) and _beats(metric, baseline, config.baseline_margin, samples):
        return []
    trivial = baseline.trivial or ("predicting the majority class" if baseline.higher_is_better
                                   else "predicting the label mean")
    return [WORSE_THAN_BASELINE.finding(
        f"On the {data} data the model's {_describe(metric)} is not better than {trivial} "
        f"({_describe(baseline)}).",
        location={"data": data, **({"epoch": epoch} if epoch is not None else {})},
        evidence={"metric": metric.name, "model": metric.value, "baseline": baseline.value, "data": data,
                  "margin": config.baseline_margin, "samples": samples},
        suggestion="Check that the labels belong to the inputs (run sanity(): can it overfit one batch?), that "
        "the loss matches the task, and that eval data is preprocessed like the train data.",
    )]


# --- MSD405 -------------------------------------------------------------------------------


MODE_SWITCH_MAX_CHANGE = Option(
    "mode_switch_max_change", 2.0,
    "MSD405: L2 change of the outputs between train and eval mode on one batch, over the smaller output norm, above "
    "this.",
)
MODE_SWITCH_INCONSISTENCY = Rule(
    "MSD405", "mode-switch-inconsistency", WARNING,
    "outputs change drastically between modes",
    options=(MODE_SWITCH_MAX_CHANGE,),
)


@MODE_SWITCH_INCONSISTENCY.judge
def mode_switch_inconsistency(relative_change: float | None, cells: Sequence[str], config: DoctorConfig,
                              epoch: int | None = None) -> list[Finding]:
    """MSD405: outputs on one batch change by more than ``mode_switch_max_change`` between train and eval mode.

    ``cells``: the mode-dependent cells (BatchNorm, Dropout) that can explain the change.
    """
    if relative_change is None or (math.isfinite(relative_change) and relative_change <= config.mode_switch_max_change):
        return []
    named = ", ".join(f"`{c}`" for c in cells[:4]) or "no BatchNorm/Dropout found"
    return [MODE_SWITCH_INCONSISTENCY.finding(
        f"The network's outputs on the same batch differ by {relative_change:.3g}x their size between train and "
        f"eval mode (threshold {config.mode_switch_max_change:g}); mode-dependent cells: {named}.",
        location={"cell": cells[0]} if cells else None,
        evidence={"relative_change": relative_change, "cells": list(cells), "epoch": epoch},
        suggestion="BatchNorm moving statistics far from the batch statistics (momentum too high/low, tiny or "
        "unshuffled batches, or eval data preprocessed differently) or a very high dropout rate; check the "
        "BatchNorm momentum (MindSpore: weight of the OLD statistics, default 0.9) and the batch size.",
    )]


# --- MSD407 -------------------------------------------------------------------------------


SHIFT_MARGIN = Option(
    "shift_margin", 0.25,
    "MSD407: the error on ``target_eval_dataset`` must exceed the eval error by more than this fraction of the "
    "eval error (and by more than two standard errors of the difference).",
)
DISTRIBUTION_SHIFT = Rule(
    "MSD407", "distribution-shift", WARNING,
    "error on the test distribution above the eval error",
    options=(SHIFT_MARGIN,),
)


@DISTRIBUTION_SHIFT.judge
def distribution_shift(records: Sequence[EvalRecord], config: DoctorConfig) -> list[Finding]:
    """MSD407 on the last evaluation: the error on ``target_eval_dataset`` (validation data drawn from the test
    distribution; ``EvalRecord.target_eval_metric``) exceeds the eval error by more than ``shift_margin`` of the
    eval error and by more than two standard errors of the difference (sample counts: ``target_eval_samples``,
    else taken as ``eval_samples``). An unknown noise (an MSE under another loss) counts as none."""
    last = records[-1] if records else None
    target_metric = getattr(last, "target_eval_metric", None)
    if last is None or target_metric is None or last.eval_metric is None:
        return []
    evaluated = measured(last, "eval", last.eval_samples)
    shifted = measured(last, "target_eval", evaluated.samples)
    eval_error, target_error, eval_n = evaluated.error, shifted.error, evaluated.samples
    if eval_error is None or target_error is None:
        return []
    gap = target_error - eval_error
    noise = gap_noise(evaluated, shifted)
    if gap <= config.shift_margin * eval_error or gap <= (noise or 0.0):
        return []
    accuracy = last.eval_metric.higher_is_better

    def show(x: float) -> str:
        return f"{x:.1%}" if accuracy else f"{x:.4g}"

    def over(n: int | None) -> str:
        return f" over {n} samples" if n else ""

    what = "error" if accuracy else last.eval_metric.name
    def diff(x: float) -> str:
        return f"{x * 100:.1f} points" if accuracy else f"{x:.4g}"

    noisy = f"the noise (± {diff(noise)}, two standard errors) and " if noise else ""
    return [DISTRIBUTION_SHIFT.finding(
        f"The {what} on target_eval_dataset ({show(target_error)}{over(getattr(last, 'target_eval_samples', None))}) "
        f"exceeds the {what} on eval_dataset ({show(eval_error)}{over(eval_n)}) by {diff(gap)} at epoch "
        f"{last.epoch}, more than {noisy}the margin ({config.shift_margin:.0%} of the eval {what}): the test "
        "distribution differs from the data the model was trained and validated on.",
        location={"epoch": last.epoch, "data": "target_eval"},
        evidence={"metric": what, "eval_error": eval_error, "target_eval_error": target_error, "gap": gap,
                  "noise": noise, "margin": config.shift_margin, "eval_samples": eval_n,
                  "target_eval_samples": getattr(last, "target_eval_samples", None), "epoch": last.epoch},
        suggestion=" ".join(REMEDIES[SHIFT]),
    )]


def evaluation_findings(records: Sequence[EvalRecord], config: DoctorConfig,
                        mode_change: tuple[float, Sequence[str]] | None = None,
                        metric_skipped: str = "") -> list[Finding]:
    """MSD401 over all records, MSD402/MSD404/MSD407 on the last one, MSD405 on ``mode_change`` (relative change,
    mode-dependent cells): what the Doctor reports at the end of training. ``metric_skipped``: why no metric
    could be measured (MSD002 for MSD402/404), "" when it could.

    The train metric is measured in eval mode; when the two modes disagree (MSD405) a poor train metric
    is that disagreement again, not underfitting, so MSD402 is left out.
    """
    last = records[-1] if records else None
    switch = mode_switch_inconsistency(*mode_change, config, epoch=last and last.epoch) if mode_change else []
    if metric_skipped:
        codes = [UNDERFITTING.code, WORSE_THAN_BASELINE.code]
        switch.append(CHECK_SKIPPED.finding(f"{', '.join(codes)} skipped: {metric_skipped}",
                                            location={"check": "evaluation-metric"}, evidence={"codes": codes}))
    if last is None:
        return switch
    return [
        *overfitting(records, config),
        *([] if switch else underfitting(last.train_metric, last.train_baseline, config, epoch=last.epoch)),
        *worse_than_baseline(last.eval_metric, last.baseline, config, data="eval", epoch=last.epoch,
                             samples=last.eval_samples),
        *distribution_shift(records, config),
        *switch,
    ]


# --- MSD403 (sanity's overfit-one-batch run) ---------------------------------------------

OVERFIT_BATCH_SIZE = Option(
    "overfit_batch_size", 8,
    "MSD403: samples in the one batch the sanity check must overfit.",
)
OVERFIT_STEPS = Option(
    "overfit_steps", 150,
    "MSD403: step budget to drive the loss on that batch near zero.",
)
OVERFIT_LOSS_RATIO = Option(
    "overfit_loss_ratio", 0.05,
    "MSD403: the batch is fitted when its loss falls to this fraction of its initial loss (or below 1e-3).",
)
CANNOT_OVERFIT_BATCH = Rule(
    "MSD403", "cannot-overfit-batch", ERROR,
    "model cannot fit one small batch",
    options=(OVERFIT_BATCH_SIZE, OVERFIT_STEPS, OVERFIT_LOSS_RATIO),
)


@CANNOT_OVERFIT_BATCH.judge
def batch_not_fitted(overfit: dict[str, Any], lr: float | None = None,
                     suggested_lr: float | None = None) -> list[Finding]:
    """MSD403 from ``sanity()``'s overfit-one-batch run (``samples``, ``steps``, ``initial_loss``, ``final_loss``,
    ``best_loss``, ``target``, ``fitted``): a model that cannot memorise a handful of samples has a bug."""
    if overfit["fitted"]:
        return []
    samples, steps, first, last, best, target = (overfit[k] for k in (
        "samples", "steps", "initial_loss", "final_loss", "best_loss", "target"))
    return [CANNOT_OVERFIT_BATCH.finding(
        f"The model could not fit one batch of {samples} samples: after {steps} steps the loss is "
        f"{last:.4g} (from {first:.4g}; best {best:.4g}), target {target:.3g}.",
        evidence={"samples": samples, "steps": steps, "initial_loss": first, "final_loss": last,
                  "best_loss": best, "target": target, "lr": lr, "suggested_lr": suggested_lr},
        suggestion="A model that cannot memorise 8 samples has a bug: check the labels match the inputs, that "
        "no weight is frozen (MSD102), the loss gets logits (MSD107), and the learning rate is not tiny.",
    )]


RULES = (OVERFITTING, UNDERFITTING, CANNOT_OVERFIT_BATCH, WORSE_THAN_BASELINE, MODE_SWITCH_INCONSISTENCY,
         DISTRIBUTION_SHIFT)
