"""Rules on single layers: Dropout rates (MSD104), BatchNorm statistics mode (MSD105), Softmax axis (MSD113).

Pure functions: the signals name the layer (``name``: a cell path, or ``Class.attr``
in source mode) and where it is; no MindSpore object reaches this module. MSD105's training part (cells left in
eval mode while the network trains) is judged in ``rules/training``, which imports ``TRAIN_MODE_MISUSE`` from here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.static.signals import BatchNormSignal, DropoutSignal, SoftmaxAxisSignal
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _pct(rate: float) -> str:
    return f"{rate * 100:.0f}"


MAX_DROP_RATE = Option(
    "max_drop_rate", 0.5,
    "MSD104: a Dropout dropping more than this fraction of its inputs is suspicious.",
)
DROPOUT_RATE_SUSPICIOUS = Rule(
    "MSD104", "dropout-rate-suspicious", WARNING,
    "Dropout drops more than half its inputs",
    options=(MAX_DROP_RATE,),
)


@DROPOUT_RATE_SUSPICIOUS.judge
def dropout_findings(signals: list[DropoutSignal], config: DoctorConfig) -> list[Finding]:
    """MSD104: a Dropout that drops more than ``config.max_drop_rate`` of its inputs."""
    found = []
    for s in signals:
        if s.drop_rate <= config.max_drop_rate:
            continue
        keep = round(1.0 - s.drop_rate, 6)
        if s.via_keep_prob:
            message = (
                f"`{s.name}` drops {_pct(s.drop_rate)} % of activations (keep_prob={keep:g}). In MindSpore "
                f"keep_prob is the probability to keep; did you mean p={keep:g}?"
            )
            suggestion = f"Write `nn.Dropout(p={keep:g})` (p is the drop probability; `keep_prob` is deprecated)."
        else:
            message = (
                f"`{s.name}` drops {_pct(s.drop_rate)} % of activations (p={s.drop_rate:g}): p is the probability "
                f"to drop, so only {_pct(keep)} % of the signal gets through; did you mean p={keep:g}?"
            )
            suggestion = f"Use a drop probability of at most {config.max_drop_rate:g} (typically 0.1-0.5), e.g. p={keep:g}."
        found.append(
            DROPOUT_RATE_SUSPICIOUS.finding(
                message,
                location=s.location,
                evidence={"drop_rate": s.drop_rate, "keep_prob": keep, "via_keep_prob": s.via_keep_prob,
                          "max_drop_rate": config.max_drop_rate},
                suggestion=suggestion,
            )
        )
    return found


TRAIN_MODE_MISUSE = Rule(
    "MSD105", "train-mode-misuse", WARNING,
    "train/eval mode wrong for the phase, or BatchNorm fixed against it",
)


@TRAIN_MODE_MISUSE.judge
def batchnorm_findings(signals: list[BatchNormSignal], config: DoctorConfig) -> list[Finding]:
    """MSD105 (static part): BatchNorm whose statistics source is fixed against the train/eval mode."""
    found = []
    for s in signals:
        untracked = s.setting.startswith("track_running_stats")
        if s.use_batch_statistics:
            message = (
                f"`{s.name}` has {s.setting}: in eval/predict mode it still normalises with the "
                "statistics of the current batch, so predictions depend on what else is in the batch (a batch of "
                "one is normalised to ~0) and "
                + ("no moving mean/variance is kept for inference." if untracked else
                   "the moving mean/variance learned in training are never used.")
            )
        else:
            message = (
                f"`{s.name}` has {s.setting}: in training mode it normalises with the moving "
                "mean/variance, which are then never updated, so the layer never adapts to the data and trains "
                "against its initial statistics (mean 0, variance 1)."
            )
        found.append(
            TRAIN_MODE_MISUSE.finding(
                message,
                location=s.location,
                evidence={"use_batch_statistics": s.use_batch_statistics, "setting": s.setting},
                suggestion=f"Leave `{'track_running_stats=True' if untracked else 'use_batch_statistics=None'}` (the "
                "default) so that `set_train(True)` uses batch statistics and `set_train(False)` uses the moving "
                "statistics.",
            )
        )
    return found


def _over_batch_axis(axis: int | tuple) -> bool:
    return axis == 0 or (isinstance(axis, tuple) and 0 in axis)


SOFTMAX_WRONG_AXIS = Rule(
    "MSD113", "softmax-wrong-axis", ERROR,
    "Softmax over the batch axis",
)


@SOFTMAX_WRONG_AXIS.judge
def softmax_axis_findings(signals: list[SoftmaxAxisSignal], config: DoctorConfig) -> list[Finding]:
    """MSD113: Softmax/LogSoftmax normalising over axis 0, the batch axis of an (N, C) head."""
    found = []
    for s in signals:
        if not _over_batch_axis(s.axis):
            continue
        op = "LogSoftmax" if s.log else "Softmax"
        found.append(
            SOFTMAX_WRONG_AXIS.finding(
                f"`{s.name}` ({op}) normalises over axis {s.axis}, the batch axis: each class score is "
                "normalised across the samples of the batch instead of across the classes, so outputs depend on "
                "the other samples and do not sum to 1 per sample.",
                location=s.location,
                evidence={"axis": s.axis, "op": op},
                suggestion=f"Use `axis=-1` (the class axis of (N, C) logits) for the {op}.",
            )
        )
    return found


RULES = (DROPOUT_RATE_SUSPICIOUS, TRAIN_MODE_MISUSE, SOFTMAX_WRONG_AXIS)
