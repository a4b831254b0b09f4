"""Who holds the parameters: frozen or unheld weights (MSD102), an optimizer holding parameters that are not the
network's (MSD103).

Pure functions of the plain signals of ``static/parameters.py`` (``ParamSignal``) and
``static/optimizer_settings.py`` (``OptimizerSignal``), and ``DoctorConfig``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding, Severity
from mindspore_doctor.rule import ERROR, Rule, WARNING
from mindspore_doctor.rules.parameters.wording import cell_text
from mindspore_doctor.static.signals import BUFFER, TRAINABLE_LOOKING, OptimizerSignal, ParamSignal

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _subtree_totals(params: list[ParamSignal], is_frozen) -> dict[str, list[int]]:
    """Per cell path: [frozen, total] trainable-looking parameters in its subtree."""
    totals: dict[str, list[int]] = {}
    for p in params:
        parts = p.cell.split(".") if p.cell else []
        frozen = is_frozen(p)
        for depth in range(len(parts) + 1):
            entry = totals.setdefault(".".join(parts[:depth]), [0, 0])
            entry[0] += frozen
            entry[1] += 1
    return totals


def _parent(path: str) -> str | None:
    return None if not path else path.rpartition(".")[0]


def _frozen_groups(params: list[ParamSignal], is_frozen) -> list[tuple[str, list[ParamSignal], bool]]:
    """Group frozen parameters: (cell, params, whole_cell) per largest fully-frozen subtree, else per owning cell."""
    totals = _subtree_totals(params, is_frozen)

    def fully(path: str | None) -> bool:
        return path is not None and totals[path][0] == totals[path][1]

    groups: dict[str, list[ParamSignal]] = {}
    for p in (p for p in params if is_frozen(p)):
        top = p.cell
        while fully(_parent(top)):
            top = _parent(top)
        groups.setdefault(top if fully(top) else p.cell, []).append(p)
    return [(cell, members, fully(cell)) for cell, members in groups.items()]


def _shown(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


_FREEZE_FIX = ("Unfreeze them (`param.requires_grad = True`) and build the optimizer from `net.trainable_params()`; "
               "to fine-tune, load the pretrained checkpoint (`ms.load_param_into_net`) before freezing.")


_HELD_FROZEN = ("frozen (requires_grad=False) yet held by the optimizer",
                "its weight decay still changes {them}: neither trained nor fixed", Severity.ERROR,
                "Build the optimizer from the trainable parameters only: "
                "`filter(lambda p: p.requires_grad, net.get_parameters())` or `net.trainable_params()`.")


def _judge_frozen(members: list[ParamSignal], whole: bool) -> tuple[str, str, Severity, str]:
    """(what, consequence, severity, fix) for a group of frozen parameters.

    Freezing random weights never helps (error); freezing loaded weights and leaving them out of the optimizer
    is transfer learning (info); a frozen parameter the optimizer still holds is inconsistent (error).
    """
    if any(p.in_optimizer for p in members):
        return _HELD_FROZEN
    states = {p.at_init for p in members}
    if False in states:
        return ("frozen (requires_grad=False) with loaded, trained values and left out of the optimizer",
                "deliberate transfer learning: fixed while the rest trains", Severity.INFO,
                "Nothing to fix if this is fine-tuning; suppress MSD102 for this cell to hide it.")
    if True in states:
        return ("frozen (requires_grad=False) while still at their random initialisation",
                "{they} will never learn, and pass random features on", Severity.ERROR, _FREEZE_FIX)
    return ("frozen (requires_grad=False)", "{they} will not learn", Severity.ERROR if whole else Severity.WARNING,
            "Set `param.requires_grad = True` (and pass `net.trainable_params()` to the optimizer) unless freezing "
            "is intended; if it is, suppress MSD102 for this cell.")


def _judge_fixed(members: list[ParamSignal], whole: bool) -> tuple[str, str, Severity, str]:
    """A frozen fixed layer (a deterministic kernel) is a constant by design (info), unless the optimizer holds it."""
    if any(p.in_optimizer for p in members):
        return _HELD_FROZEN
    return ("frozen (requires_grad=False) with fixed values on a regular grid (`arange`, a hand-written kernel), "
            "neither a random init nor trained weights", "a constant layer by design", Severity.INFO,
            "Nothing to fix if the layer is meant to be constant (mindyolo's DFL projection); suppress MSD102 "
            "for this cell to hide it.")


def _frozen_findings(params: list[ParamSignal], is_frozen, judge) -> list[Finding]:
    found = []
    for cell, members, whole in _frozen_groups(params, is_frozen):
        what, consequence, severity, fix = judge(members, whole)
        names = [p.name for p in members]
        plural = len(names) > 1
        if whole:
            text = f"All {len(names)} weight{'s' if plural else ''} of {cell_text(cell)} {'are' if plural else 'is'} {what} ({_shown(names)})"
        else:
            text = f"{_shown(names)} in {cell_text(cell)} {'are' if plural else 'is'} {what}"
        consequence = consequence.format(they="they" if plural else "it", them="them" if plural else "it")
        location = {**members[0].location, "cell": cell} if not plural else {"cell": cell, "parameter": None}
        found.append(
            FROZEN_PARAMETER.finding(
                f"{text}; {consequence}.",
                location=location,
                evidence={"parameters": names, "count": len(names), "whole_cell": whole,
                          "at_init": [p.at_init for p in members], "in_optimizer": [p.in_optimizer for p in members]},
                suggestion=fix,
                severity=severity,
            )
        )
    return found


FROZEN_PARAMETER = Rule(
    "MSD102", "frozen-parameter", WARNING,
    "weight frozen or not held by the optimizer",
)


@FROZEN_PARAMETER.judge
def frozen_parameter(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD102: trainable-looking weights with requires_grad=False, or trainable ones the optimizer does not hold.

    Frozen fixed layers (a deterministic kernel) are judged apart, so they neither hide nor join the frozen
    random weights around them.
    """
    looking = [p for p in params if p.role in TRAINABLE_LOOKING]
    found = _frozen_findings([p for p in looking if not p.fixed], lambda p: not p.requires_grad, _judge_frozen)
    found += _frozen_findings(looking, lambda p: p.fixed, _judge_fixed)
    trainable = [p for p in params if p.role != BUFFER and p.requires_grad and p.in_optimizer is not None]
    found += _frozen_findings(
        trainable,
        lambda p: not p.in_optimizer,
        lambda members, whole: (
            "trainable but not held by the optimizer",
            "{they} will not learn: freezing by leaving {them} out of the optimizer is inconsistent with "
            "requires_grad=True", Severity.ERROR,
            "Build the optimizer from `net.trainable_params()` of the network you train (after any freezing or "
            "wrapping), so every trainable parameter is updated; to freeze on purpose set `requires_grad = False`."),
    )
    return found


FOREIGN_OPTIMIZER_PARAMETER = Rule(
    "MSD103", "foreign-optimizer-parameter", ERROR,
    "optimizer holds parameters not in the network",
)


@FOREIGN_OPTIMIZER_PARAMETER.judge
def foreign_optimizer_parameter(opt: OptimizerSignal, config: DoctorConfig) -> list[Finding]:
    """MSD103: the optimizer updates Parameters that are not objects of the trained network."""
    if not opt.foreign:
        return []
    shown = ", ".join(f"`{n}`" for n in opt.foreign[:5]) + (" ..." if len(opt.foreign) > 5 else "")
    why = ""
    if opt.foreign_same_name:
        why = (
            f" {len(opt.foreign_same_name)} of them have the same name as a network parameter but are different "
            "objects: the optimizer was built from another instance of the network."
        )
    return [
        FOREIGN_OPTIMIZER_PARAMETER.finding(
            f"{opt.cls} holds {len(opt.foreign)} of {opt.held} parameters that are not in the network: {shown}.{why} "
            "Training updates those copies, never the network's own weights.",
            location={"parameter": opt.foreign[0]},
            evidence={
                "optimizer": opt.cls,
                "foreign": list(opt.foreign),
                "same_name": list(opt.foreign_same_name),
                "held": opt.held,
            },
            suggestion="Create the optimizer from the very network you train: "
            "`opt = nn.Momentum(net.trainable_params(), ...)` with the same `net` object passed to the train cell/Model.",
        )
    ]
