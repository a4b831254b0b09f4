"""MSD201, MSD206: NaN/Inf in the loss, and the first gradient, weight or activation it appears in."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Rule
from mindspore_doctor.rules.training.common import measured_steps, param_location
from mindspore_doctor.signals import TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

NONFINITE_LOSS = Rule(
    "MSD201", "nonfinite-loss", ERROR,
    "loss is NaN or Inf",
)


@NONFINITE_LOSS.judge
def nonfinite_loss(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    for s in history.steps:
        if s.loss is not None and not math.isfinite(s.loss):
            return [
                NONFINITE_LOSS.finding(
                    f"The loss is {s.loss} at step {s.step}; training cannot recover from a non-finite loss.",
                    step=s.step,
                    evidence={"loss": s.loss, "step": s.step},
                    suggestion="Look at MSD206 for the first tensor that went non-finite and at the repro bundle "
                    "(repro_step<N>.npz) for the batch; guard divisions and logs with an epsilon, lower the "
                    "learning rate, or clip gradients.",
                )
            ]
    return []


NONFINITE_TENSOR = Rule(
    "MSD206", "nonfinite-tensor", ERROR,
    "NaN/Inf in a gradient, weight or activation",
    probe="any",
)


@NONFINITE_TENSOR.judge
def nonfinite_tensor(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    order = {name: i for i, name in enumerate(history.parameter_order)}
    for s in measured_steps(history):
        if not (s.grad_nonfinite or s.activations):
            continue
        if not (any(s.grad_nonfinite.values()) or any(s.weight_nonfinite.values())
                or any(a.nonfinite or not math.isfinite(a.mean_abs) for a in s.activations.values())):
            continue  # all finite: the common case, decided before sorting anything
        act = sorted(
            (a.order, path) for path, a in s.activations.items() if a.nonfinite or not math.isfinite(a.mean_abs)
        )
        weights = sorted((order.get(n, 1 << 30), n) for n, c in s.weight_nonfinite.items() if c)
        grads = sorted((order.get(n, 1 << 30), n) for n, c in s.grad_nonfinite.items() if c)
        if not (act or weights or grads):
            continue
        if act:
            where, what = {"cell": act[0][1]}, f"the output of `{act[0][1]}`"
        elif grads:
            where, what = param_location(grads[0][1]), f"the gradient of `{grads[0][1]}`"
        else:
            where, what = param_location(weights[0][1]), f"the weight `{weights[0][1]}`"
        return [
            NONFINITE_TENSOR.finding(
                f"NaN/Inf first appears in {what} at step {s.step} "
                f"({len(grads)} gradient(s), {len(weights)} weight(s), {len(act)} activation(s) non-finite).",
                location=where,
                step=s.step,
                evidence={
                    "nonfinite_activations": [p for _, p in act],
                    "nonfinite_gradients": [n for _, n in grads],
                    "nonfinite_weights": [n for _, n in weights],
                },
                suggestion="Guard the operation feeding this tensor (epsilon in divisions, clamp before log/sqrt), "
                "lower the learning rate, or clip gradients.",
            )
        ]
    return []
