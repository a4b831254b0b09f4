"""Rules on the construct graph: unsafe divisions (MSD106), loss/activation mismatch (MSD107),
disconnected cells (MSD110), silent broadcasting between output and label (MSD114).

Pure functions of plain signals (names, shapes, class names) and DoctorConfig.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding


@dataclass(frozen=True)
class DivisionSignal:
    owner: str
    """The cell path (or class name in source mode) whose construct divides."""
    expression: str
    denominator: str
    reason: str
    location: dict[str, Any] = field(default_factory=dict)
    instances: int = 1


@dataclass(frozen=True)
class OutputActivationSignal:
    activation: str
    """``softmax`` | ``log_softmax`` | ``sigmoid`` | ``logits`` (a linear layer) | ``unknown``."""
    layer: str
    """Cell path (or op) producing the network output."""
    loss: str
    """Loss class name."""
    location: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UnusedMemberSignal:
    name: str
    kind: str
    """``cell`` or ``parameter``."""
    type_name: str
    location: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BroadcastSignal:
    output_shape: tuple[int, ...]
    label_shape: tuple[int, ...]
    loss: str
    elementwise: bool
    location: dict[str, Any] = field(default_factory=dict)


def division_findings(signals: list[DivisionSignal], config: DoctorConfig) -> list[Finding]:
    """MSD106: a division whose denominator can be zero and carries no epsilon."""
    return [
        make_finding(
            "MSD106",
            f"`{s.owner}` divides by `{s.denominator}` in `{s.expression}`, and {s.reason} with no epsilon: "
            "a zero denominator gives Inf/NaN that then spreads through the gradients.",
            location=s.location,
            evidence={"denominator": s.denominator, "why": s.reason, "instances": s.instances},
            suggestion=f"Divide by `({s.denominator} + eps)` (e.g. eps=1e-6), or `ops.maximum({s.denominator}, eps)`, "
            "or use `ops.DivNoNan()` where a 0/0 should give 0.",
        )
        for s in signals
    ]


_LOGITS_LOSSES = {"SoftmaxCrossEntropyWithLogits", "CrossEntropyLoss"}


def loss_activation_findings(signal: OutputActivationSignal, config: DoctorConfig) -> list[Finding]:
    """MSD107: probabilities into a logits loss, or logits into a probability loss."""
    act, loss = signal.activation, signal.loss
    problem = None
    if act == "softmax" and loss in _LOGITS_LOSSES:
        problem = (f"ends in Softmax (probabilities) but `{loss}` applies its own softmax to logits: "
                   "the softmax is applied twice, gradients shrink and the loss plateaus.",
                   "Remove the final Softmax from the network (keep it only for inference), or use `nn.NLLLoss` "
                   "after `nn.LogSoftmax`.")
    elif act == "sigmoid" and loss == "BCEWithLogitsLoss":
        problem = ("ends in Sigmoid (probabilities) but `BCEWithLogitsLoss` applies its own sigmoid: "
                   "the sigmoid is applied twice and outputs are squashed into (0.5, 0.73).",
                   "Remove the final Sigmoid, or switch the loss to `nn.BCELoss`.")
    elif act == "logits" and loss == "BCELoss":
        problem = ("ends in a linear layer (logits) but `BCELoss` expects probabilities in [0, 1]: "
                   "negative or >1 inputs give NaN/garbage losses.",
                   "Use `nn.BCEWithLogitsLoss` on the logits (numerically stable), or add a Sigmoid.")
    elif loss == "NLLLoss" and act in ("logits", "softmax", "sigmoid"):
        kind = {"logits": "a linear layer (logits)", "softmax": "Softmax (probabilities)", "sigmoid": "Sigmoid"}[act]
        problem = (f"ends in {kind} but `NLLLoss` expects log-probabilities (LogSoftmax output): "
                   "the loss is unbounded below and training optimises the wrong objective.",
                   "Add `nn.LogSoftmax(axis=-1)` as the last layer, or use `nn.CrossEntropyLoss` on the logits.")
    if problem is None:
        return []
    return [
        make_finding(
            "MSD107",
            f"The network output (`{signal.layer}`) {problem[0]}",
            location=signal.location,
            evidence={"output_activation": act, "loss": loss, "layer": signal.layer},
            suggestion=problem[1],
        )
    ]


def disconnected_findings(signals: list[UnusedMemberSignal], config: DoctorConfig) -> list[Finding]:
    """MSD110: a cell or parameter defined on the network but never used on the path from construct."""
    return [
        make_finding(
            "MSD110",
            f"{s.kind.capitalize()} `{s.name}` ({s.type_name}) is defined but never used by construct: it gets no "
            "gradient, its weights stay at their initial values and still count in the model size and checkpoint.",
            location=s.location,
            evidence={"kind": s.kind, "type": s.type_name},
            suggestion=f"Call `{s.name.rsplit('.', 1)[-1]}` in construct if it belongs on the path to the loss, "
            "or delete it.",
        )
        for s in signals
    ]


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes, or None when they do not broadcast."""
    out = []
    for x, y in zip((1,) * (len(b) - len(a)) + tuple(a), (1,) * (len(a) - len(b)) + tuple(b)):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(out)


def broadcast_findings(signal: BroadcastSignal, config: DoctorConfig) -> list[Finding]:
    """MSD114: an elementwise loss whose output and label shapes broadcast to a larger shape."""
    out, label = tuple(signal.output_shape), tuple(signal.label_shape)
    if not signal.elementwise or out == label:
        return []
    joint = broadcast_shape(out, label)
    if joint is None or math.prod(joint) <= max(math.prod(out), math.prod(label)):
        return []
    return [
        make_finding(
            "MSD114",
            f"`{signal.loss}` compares the network output of shape {out} with labels of shape {label}; they "
            f"broadcast silently to {joint}, so every output is compared with every label and the loss is wrong "
            "without any error.",
            location=signal.location,
            evidence={"output_shape": list(out), "label_shape": list(label), "broadcast_shape": list(joint)},
            suggestion=f"Make both shapes equal: reshape the output to {label} (or squeeze the label to {out}) "
            "before the loss.",
        )
    ]
