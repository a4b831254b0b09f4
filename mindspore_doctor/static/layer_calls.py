"""MSD104 / MSD105 / MSD113: Dropout, Softmax and BatchNorm constructors and functional calls, with the rates,
axes and statistics settings written at the call (literal, or held in ``self.<attr>``)."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable

from mindspore_doctor.static.ast_nodes import argument, calls_in, callee_identifier, expr_text, keyword, norm_name, \
    self_attribute
from mindspore_doctor.static.names import AttributeValue, from_mint, is_receiver_call, number


@dataclass(frozen=True)
class CallSite:
    line: int
    text: str
    callee: str


@dataclass(frozen=True)
class DropoutCall(CallSite):
    drop_rate: float
    via_keep_prob: bool


@dataclass(frozen=True)
class AxisCall(CallSite):
    axis: int | tuple
    log: bool


@dataclass(frozen=True)
class BatchNormCall(CallSite):
    use_batch_statistics: bool
    setting: str
    """The argument that fixes it, as written: ``use_batch_statistics=True``, ``track_running_stats=False``."""


def _is_constructor(name: str) -> bool:
    return name[:1].isupper()


def dropout_call(call: ast.Call, attribute: AttributeValue | None = None) -> DropoutCall | None:
    """``nn.Dropout(keep_prob=0.1)``, ``nn.Dropout(p=0.9)``, ``ops.dropout(x, p=0.9)``, ``mint.nn.Dropout(0.9)``...
    with literal rates, or rates held in ``self.<attr>`` when ``attribute`` knows the instance's value."""
    name = callee_identifier(call)
    if name is None or norm_name(name) not in ("dropout", "dropout1d", "dropout2d", "dropout3d"):
        return None
    site = dict(line=call.lineno, text=expr_text(call), callee=name)
    if not _is_constructor(name):  # functional: ops.dropout(input, p=0.5, ...)
        rate = number(argument(call, 1, "p"), attribute)
        return DropoutCall(**site, drop_rate=float(rate), via_keep_prob=False) if isinstance(rate, (int, float)) else None
    p = number(keyword(call, "p"), attribute)
    if name != "Dropout" or from_mint(call):  # nn.Dropout2d(p=0.5), mint.nn.Dropout(0.5)
        p = number(argument(call, 0, "p"), attribute)
    if isinstance(p, (int, float)):
        return DropoutCall(**site, drop_rate=float(p), via_keep_prob=False)
    keep = number(argument(call, 0, "keep_prob"), attribute)
    if isinstance(keep, (int, float)):
        return DropoutCall(**site, drop_rate=round(1.0 - keep, 6), via_keep_prob=True)
    return None


def softmax_call(call: ast.Call, attribute: AttributeValue | None = None) -> AxisCall | None:
    """``nn.Softmax(axis=0)``, ``ops.softmax(x, axis=0)``, ``x.softmax(0)``... with a literal axis, or one held
    in ``self.<attr>`` when ``attribute`` knows the instance's value."""
    name = callee_identifier(call)
    if name is None or norm_name(name) not in ("softmax", "logsoftmax"):
        return None
    if _is_constructor(name) or is_receiver_call(call):
        node = argument(call, 0, "axis", "dim")
    else:
        node = argument(call, 1, "axis", "dim")
    axis = number(node, attribute) if node is not None else -1
    if axis is None or isinstance(axis, float):
        return None
    return AxisCall(call.lineno, expr_text(call), name, axis, norm_name(name) == "logsoftmax")


def fixed_statistics(value: Callable[[str], object]) -> tuple[bool, str] | None:
    """(normalises with batch statistics, the setting as written) for a BatchNorm whose statistics source is fixed
    against the train/eval mode, ``value`` giving its arguments by name: ``use_batch_statistics`` True or False
    (nn), ``track_running_stats=False`` (mint: no running statistics are kept, so eval uses the batch's too).
    None when the mode decides."""
    batch = value("use_batch_statistics")
    if isinstance(batch, bool):
        return batch, f"use_batch_statistics={batch}"
    if value("track_running_stats") is False:
        return True, "track_running_stats=False"
    return None


def batchnorm_call(call: ast.Call, attribute: AttributeValue | None = None) -> BatchNormCall | None:
    """``nn.BatchNorm2d(c, use_batch_statistics=True)``, ``mint.nn.BatchNorm2d(c, track_running_stats=False)``,
    the flag literal or held in ``self.<attr>``."""
    name = callee_identifier(call)
    if name is None or not name.startswith("BatchNorm"):
        return None

    def value(flag: str) -> object:
        node = keyword(call, flag)
        attr = self_attribute(node) if node is not None and attribute is not None else None
        return node.value if isinstance(node, ast.Constant) else attribute(attr) if attr is not None else None  # type: ignore[misc]

    fixed = fixed_statistics(value)
    return BatchNormCall(call.lineno, expr_text(call), name, *fixed) if fixed else None


CallParser = Callable[[ast.Call, "AttributeValue | None"], "CallSite | None"]
"""``dropout_call``, ``softmax_call``...: a call -> its parsed site, or None when not recognised."""


def find_calls(nodes: list[ast.AST], parse: CallParser,
               attribute: Callable[[ast.Call], "AttributeValue | None"] = lambda call: None) -> list:
    """Every call under ``nodes`` that ``parse`` recognises (``self.x(...)`` calls are left to objects),
    ``self.<attr>`` operands read through ``attribute(call)``: the values of the instance it runs on."""
    sites = [site for call in calls_in(nodes)
             if self_attribute(call.func) is None and (site := parse(call, attribute(call)))]
    return sorted(sites, key=lambda site: site.line)
