"""MSD205, MSD215: the first losses of a freshly initialised network: near zero already, or far from ln(C).

A run that starts from trained weights (resumed, continued, fine-tuned; ``TrainingHistory.start``) is not judged:
its first losses show what the network learned before.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Option, Rule, WARNING
from mindspore_doctor.rules.training.common import finite, minimised_loss
from mindspore_doctor.signals import TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _trained_start(history: TrainingHistory) -> bool:
    """The run starts from trained weights (resumed, continued, fine-tuned): its first losses show what the network
    learned before, not what a fresh one does. Unknown counts as fresh: a rule stays quiet only on evidence."""
    return history.start is not None and history.start.fresh is False


def _start_evidence(history: TrainingHistory) -> dict[str, Any]:
    """Why the start was judged fresh, for the evidence of a rule that assumes it."""
    start = history.start
    if start is None:
        return {"fresh_start": None, "start_state": "not measured"}
    return {"fresh_start": start.fresh, "start_state": start.reason}


LOW_LOSS = Option(
    "low_loss", 1e-4,
    "MSD205: a loss below this within the first ``early_steps`` steps is suspicious.",
)
EARLY_STEPS = Option(
    "early_steps", 3,
    "MSD205/215: what counts as \"the first steps\".",
)
LABEL_COPY_TOLERANCE = Option(
    "label_copy_tolerance", 1e-4,
    "MSD205 (data check): an input feature that is an affine function of the regression target up to this relative "
    "RMS residual, sqrt(1 - r^2), is the target itself (float32 and standardised copies: ~1e-7; the last observed "
    "value of a smooth series before the one to forecast: >= 1e-2).",
)
LOSS_SUSPICIOUSLY_LOW = Rule(
    "MSD205", "loss-suspiciously-low", WARNING,
    "loss near zero within the first steps",
    options=(LOW_LOSS, EARLY_STEPS, LABEL_COPY_TOLERANCE),
)


@LOSS_SUSPICIOUSLY_LOW.judge
@minimised_loss
def loss_suspiciously_low(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """A loss near zero in the first steps of a fresh network; a resumed one may have learned it already."""
    if _trained_start(history):
        return []
    for s in history.steps:
        if s.step > config.early_steps:
            break
        if finite(s.loss) and abs(s.loss) < config.low_loss:
            return [
                LOSS_SUSPICIOUSLY_LOW.finding(
                    f"The loss is already {s.loss:.3g} at step {s.step}, before the model could have learned "
                    "anything: the labels may leak into the inputs, or the loss is not comparing predictions "
                    "with labels.",
                    step=s.step,
                    evidence={"loss": s.loss, "threshold": config.low_loss, **_start_evidence(history)},
                    suggestion="Check the label column is not also an input feature and that the loss receives "
                    "(logits, labels) in that order.",
                )
            ]
    return []


_CLASSIFICATION_HINT = "classification loss (SoftmaxCrossEntropyWithLogits / CrossEntropyLoss / NLLLoss)"

INITIAL_LOSS_FACTOR = Option(
    "initial_loss_factor", 3.0,
    "MSD215: first loss off ln(num_classes) by more than this factor.",
)
UNEXPECTED_INITIAL_LOSS = Rule(
    "MSD215", "unexpected-initial-loss", WARNING,
    "first loss far from ln(num_classes)",
    options=(EARLY_STEPS, INITIAL_LOSS_FACTOR),
)


@UNEXPECTED_INITIAL_LOSS.judge
def unexpected_initial_loss(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """The first loss of a fresh classifier far from ln(C); a resumed or fine-tuned one starts where it was."""
    classes = history.num_classes
    first = next((s for s in history.steps if s.loss is not None), None)
    if not classes or classes < 2 or first is None or not finite(first.loss) or _trained_start(history):
        return []
    step, loss = first.step, first.loss
    expected = math.log(classes)
    if expected / config.initial_loss_factor <= loss <= expected * config.initial_loss_factor:
        return []
    return [
        UNEXPECTED_INITIAL_LOSS.finding(
            f"The first loss is {loss:.4g}, but a freshly initialised {classes}-class classifier should start near "
            f"ln({classes}) = {expected:.3g} (off by more than {config.initial_loss_factor:g}x).",
            step=step,
            evidence={"first_loss": loss, "expected": expected, "num_classes": classes, **_start_evidence(history)},
            suggestion="A much larger loss means over-confident init (large final-layer weights or logits scaled up); "
            "a much smaller one means the loss is not a " + _CLASSIFICATION_HINT + " over these outputs.",
        )
    ]
