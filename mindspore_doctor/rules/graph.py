"""Rules on the construct graph: unsafe divisions (MSD106), loss/activation mismatch (MSD107),
disconnected cells (MSD110), silent broadcasting between output and label (MSD114).

Pure functions of plain signals (names, shapes, class names) and DoctorConfig.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import math

from mindspore_doctor.findings import Finding
from mindspore_doctor.static.signals import (
    BroadcastSignal,
    DivisionSignal,
    MaskedMean,
    OutputActivationSignal,
    UnusedMemberSignal,
)
from mindspore_doctor.rule import ERROR, Rule, WARNING

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _masked_mean_finding(s: DivisionSignal, m: MaskedMean) -> Finding:
    """A masked mean. Counted over the whole batch, the count is 0 only when nothing in the batch is valid (an
    empty batch, an empty training mask): the canonical masked mean, ``info`` with the guard to write. Counted
    per row (an empty document) or from labels that may all be missing in a batch, 0/0 happens in real data:
    the catalog's warning."""
    guarded = f"ops.maximum({s.denominator}, {'1e-8' if m.mean else '1'})"
    counted = f"{'mean' if m.mean else 'count'} of the mask `{m.mask}` ({m.evidence})"
    if m.axis is not None:
        severity, why = "warning", (f"taken per row (axis {m.axis}): a row with no valid entry (an all-padding "
                                    "sequence, an empty document) gives 0/0 = NaN, which then spreads through the "
                                    "gradients.")
    elif m.labels is not None:
        severity, why = "warning", (f"over the whole batch, computed from the labels `{m.labels}`: a batch in which "
                                    "no label is valid (all missing or ignored) gives 0/0 = NaN, which then spreads "
                                    "through the gradients.")
    else:
        severity, why = "info", ("over the whole batch: a masked mean, whose count is 0 only when nothing is valid at "
                                 "all (an empty batch or mask). Worth a guard, not a bug.")
    what = f"a {counted}" if severity == "info" else f"and {s.reason}: it is a {counted}"
    return UNSAFE_DIVISION.finding(
        f"`{s.owner}` divides by `{s.denominator}` in `{s.expression}`, {what} {why}",
        location=s.location,
        severity=severity,
        evidence={"denominator": s.denominator, "why": s.reason, "instances": s.instances, "masked_mean": True,
                  "mask": m.mask, "mask_evidence": m.evidence, "per_row_axis": m.axis, "label_argument": m.labels},
        suggestion=f"Write `{guarded}` as the denominator (nothing valid then averages to 0 instead of NaN)"
        + (", or drop empty rows in the data pipeline." if m.axis is not None else "."),
    )


UNSAFE_DIVISION = Rule(
    "MSD106", "unsafe-division", WARNING,
    "division whose denominator can be zero",
)


@UNSAFE_DIVISION.judge
def division_findings(signals: list[DivisionSignal], config: DoctorConfig) -> list[Finding]:
    """MSD106: a division whose denominator can be zero and carries no epsilon."""
    return [
        _masked_mean_finding(s, s.masked) if s.masked is not None else UNSAFE_DIVISION.finding(
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
_MEANT_ACTIVATIONS = {"NLLLoss": {"LogSoftmax"}, "BCELoss": {"Sigmoid", "Softmax"}, "log": {"Sigmoid", "Softmax"}}
"""The activation a loss needs before it: one its hand-written wrapper defines and never applies is the cause."""


def _activation_problem(act: str, loss: str) -> tuple[str, str] | None:
    """(what is wrong, how to fix it) when ``act`` is the wrong input for ``loss``."""
    if act == "softmax" and loss in _LOGITS_LOSSES:
        return (f"ends in Softmax (probabilities) but `{loss}` applies its own softmax to logits: "
                "the softmax is applied twice, gradients shrink and the loss plateaus.",
                "Remove the final Softmax from the network (keep it only for inference), or use `nn.NLLLoss` "
                "after `nn.LogSoftmax`.")
    if act == "sigmoid" and loss == "BCEWithLogitsLoss":
        return ("ends in Sigmoid (probabilities) but `BCEWithLogitsLoss` applies its own sigmoid: "
                "the sigmoid is applied twice and outputs are squashed into (0.5, 0.73).",
                "Remove the final Sigmoid, or switch the loss to `nn.BCELoss`.")
    if act == "logits" and loss == "BCELoss":
        return ("ends in a linear layer (logits) but `BCELoss` expects probabilities in [0, 1]: "
                "negative or >1 inputs give NaN/garbage losses.",
                "Use `nn.BCEWithLogitsLoss` on the logits (numerically stable), or add a Sigmoid.")
    if loss == "NLLLoss" and act in ("logits", "softmax", "sigmoid"):
        kind = {"logits": "a linear layer (logits)", "softmax": "Softmax (probabilities)", "sigmoid": "Sigmoid"}[act]
        return (f"ends in {kind} but `NLLLoss` expects log-probabilities (LogSoftmax output): "
                "the loss is unbounded below and training optimises the wrong objective.",
                "Add `nn.LogSoftmax(axis=-1)` as the last layer, or use `nn.CrossEntropyLoss` on the logits.")
    if act == "logits" and loss == "log":
        return ("ends in a linear layer (logits, of any sign) but `ops.log` needs positive inputs such as "
                "probabilities: a negative output gives NaN and the loss is not a likelihood.",
                "Apply `ops.sigmoid` (or `ops.softmax`) before the log, or better use "
                "`ops.binary_cross_entropy_with_logits` / `ops.cross_entropy` on the logits (numerically stable).")
    return None


def _subject(s: OutputActivationSignal) -> str:
    if not s.loss_cell:
        return f"The network output (`{s.layer}`)"
    if s.in_loss:
        return f"`{s.layer}`, applied by the loss `{s.loss_cell}` before `{s.call}`,"
    return f"The network output (`{s.layer}`), passed unchanged by the loss `{s.loss_cell}` to `{s.call}`,"


def loss_activation_findings(signal: OutputActivationSignal, config: DoctorConfig) -> list[Finding]:
    """MSD107: probabilities into a logits loss, or logits into a probability loss (or ``ops.log``)."""
    s = signal
    problem = _activation_problem(s.activation, s.loss)
    if problem is None:
        return []
    meant = [(attr, kind) for attr, kind in s.unused if kind in _MEANT_ACTIVATIONS.get(s.loss, ())]
    off = [(path, kind, test) for path, kind, test in s.switched_off if kind in _MEANT_ACTIVATIONS.get(s.loss, ())]
    evidence = {"output_activation": s.activation, "loss": s.loss, "layer": s.layer}
    if off:
        evidence["switched_off"] = [{"cell": path, "type": kind, "condition": test} for path, kind, test in off]
    if s.loss_cell:
        evidence.update(loss_cell=s.loss_cell, call=s.call, applied_in_loss=s.in_loss,
                        unused_activations=[attr for attr, _ in meant])
    return [
        LOSS_ACTIVATION_MISMATCH.finding(
            f"{_subject(s)} {problem[0]}"
            + "".join(f" `{s.loss_cell}` defines `self.{attr}` ({kind}) but never applies it." for attr, kind in meant)
            + "".join(f" `{path}` ({kind}) is applied only when `{test}`, which is false on this network, so the "
                      "training path skips it." for path, kind, test in off),
            location=s.location,
            evidence=evidence,
            suggestion=(f"Apply `self.{meant[0][0]}` in `{s.loss_cell}` before `{s.call}`, or: " if meant else "")
            + (f"Set `{off[0][2]}` when training with `{s.loss}`, or: " if off and not meant else "")
            + problem[1],
        )
    ]


LOSS_ACTIVATION_MISMATCH = Rule(
    "MSD107", "loss-activation-mismatch", ERROR,
    "probabilities fed to a logits loss, or the reverse",
)


@LOSS_ACTIVATION_MISMATCH.judge
def loss_input_findings(signals: list[OutputActivationSignal], config: DoctorConfig) -> list[Finding]:
    """MSD107 over everything one loss is handed: the first mismatch only, as one finding per loss (`ops.log(p)`
    and `ops.log(1 - p)` are one mistake)."""
    found = (findings for signal in signals if (findings := loss_activation_findings(signal, config)))
    return next(found, [])


DISCONNECTED_CELL = Rule(
    "MSD110", "disconnected-cell", WARNING,
    "cell or parameter not on the path to the loss",
)


@DISCONNECTED_CELL.judge
def disconnected_findings(signals: list[UnusedMemberSignal], config: DoctorConfig) -> list[Finding]:
    """MSD110: a cell or parameter defined on the network but never used on the path from construct."""
    return [
        DISCONNECTED_CELL.finding(
            f"{s.kind.capitalize()} `{s.name}` ({s.type_name}) is "
            + ("called by construct but its output is never used" if s.discarded else "defined but never used by construct")
            + ": it gets no gradient, its weights stay at their initial values and still count in the model size and "
            "checkpoint.",
            location=s.location,
            evidence={"kind": s.kind, "type": s.type_name, "discarded": s.discarded},
            suggestion=(f"Use the output of `{s.name.rsplit('.', 1)[-1]}` (return it, or add it to the loss)"
                        if s.discarded else f"Call `{s.name.rsplit('.', 1)[-1]}` in construct")
            + " if it belongs on the path to the loss, or delete it.",
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


SILENT_BROADCAST = Rule(
    "MSD114", "silent-broadcast", ERROR,
    "loss inputs broadcast to a larger shape",
)


@SILENT_BROADCAST.judge
def broadcast_findings(signal: BroadcastSignal, config: DoctorConfig) -> list[Finding]:
    """MSD114: an elementwise loss whose output and label shapes broadcast to a larger shape."""
    out, label = tuple(signal.output_shape), tuple(signal.label_shape)
    if not signal.elementwise or out == label:
        return []
    joint = broadcast_shape(out, label)
    if joint is None or math.prod(joint) <= max(math.prod(out), math.prod(label)):
        return []
    return [
        SILENT_BROADCAST.finding(
            f"`{signal.loss}` compares the network output of shape {out} with labels of shape {label}; they "
            f"broadcast silently to {joint}, so every output is compared with every label and the loss is wrong "
            "without any error.",
            location=signal.location,
            evidence={"output_shape": list(out), "label_shape": list(label), "broadcast_shape": list(joint)},
            suggestion=f"Make both shapes equal: reshape the output to {label} (or squeeze the label to {out}) "
            "before the loss.",
        )
    ]


RULES = (UNSAFE_DIVISION, LOSS_ACTIVATION_MISMATCH, DISCONNECTED_CELL, SILENT_BROADCAST)
