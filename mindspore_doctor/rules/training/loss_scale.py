"""MSD214: the loss-scale cell overflows on too many steps (each skips its weight update)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Option, Rule, WARNING
from mindspore_doctor.signals import TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

OVERFLOW_RATE = Option(
    "overflow_rate", 0.1,
    "MSD214: fraction of loss-scale overflow steps that is too many.",
)
LOSS_SCALE_OVERFLOW = Rule(
    "MSD214", "loss-scale-overflow", WARNING,
    "loss-scale overflow on many steps",
    options=(OVERFLOW_RATE,),
)


@LOSS_SCALE_OVERFLOW.judge
def loss_scale_overflow(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    flags = [(s.step, s.overflow, s.loss_scale) for s in history.steps if s.overflow is not None]
    # Dynamic loss scaling overflows on purpose while it calibrates: count from the first clean step.
    start = next((i for i, (_, o, _) in enumerate(flags) if not o), None)
    counted = flags[start:] if start is not None and start < len(flags) // 2 else flags
    if len(counted) < 10:
        return []
    rate = sum(1 for _, o, _ in counted if o) / len(counted)
    if rate <= config.overflow_rate:
        return []
    step, _, scale = counted[-1]
    return [
        LOSS_SCALE_OVERFLOW.finding(
            f"The loss-scale cell overflowed on {rate:.0%} of {len(counted)} steps (threshold "
            f"{config.overflow_rate:.0%}); those steps skip the weight update. Current loss scale: {scale}.",
            step=step,
            evidence={"overflow_rate": rate, "steps": len(counted), "loss_scale": scale},
            suggestion="Use DynamicLossScaleManager instead of a fixed scale, or a smaller fixed loss_scale; "
            "check for fp16 overflow in the forward pass (keep BatchNorm/Softmax in fp32).",
        )
    ]
