"""MSD106: the divisions in a cell's construct whose denominator can be zero (a sum, a norm, a mask's count
with no epsilon), and the masked means among them."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable

from mindspore_doctor.static.ast_nodes import argument, expr_text, keyword, literal_number, self_attribute
from mindspore_doctor.static.class_source import ClassSource, reachable_methods
from mindspore_doctor.static.method_flow import Decide, LocalValues, live_nodes
from mindspore_doctor.static.names import Resolver, first_operand, is_receiver_call, op_name
from mindspore_doctor.static.signals import MaskedMean


ZERO_PRODUCERS = frozenset(
    {"sum", "reducesum", "mean", "reducemean", "norm", "lpnorm", "vectornorm", "countnonzero",
     "relu", "relu6", "var", "variance", "std", "reducestd"}
)
PASS_THROUGH = frozenset(
    {"sqrt", "square", "pow", "abs", "cast", "astype", "reshape", "expanddims", "unsqueeze", "squeeze",
     "view", "broadcastto", "tile", "float", "stopgradient"}
)
ZERO_GUARDS = frozenset({"maximum", "clipbyvalue", "clamp", "clip", "exp", "softplus", "sigmoid"})
DIVISIONS = frozenset({"div", "realdiv", "truediv", "truedivide", "divide", "__truediv__"})


@dataclass(frozen=True)
class DivisionSite:
    line: int
    expression: str
    denominator: str
    reason: str
    """Why the denominator can be zero, e.g. "`s` = `x.sum()` (a sum)"."""
    mask: MaskedMean | None = None
    """Set when the denominator counts a mask (a masked mean)."""


@dataclass(frozen=True)
class _ZeroCause:
    text: str
    mask: MaskedMean | None = None


def _is_epsilon(node: ast.expr) -> bool:
    value = literal_number(node)
    if isinstance(value, (int, float)):
        return value != 0
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "eps" in name.lower()


MASK_COUNTS = frozenset({"sum", "reducesum", "mean", "reducemean", "countnonzero"})
"""Reductions that count (or average) the entries of a mask."""
MASK_MAKERS = frozenset(
    {"equal", "eq", "notequal", "ne", "greater", "gt", "greaterequal", "ge", "less", "lt", "lessequal", "le",
     "logicaland", "logicalor", "logicalnot", "logicalxor", "isfinite", "isnan", "isinf", "isclose", "sequencemask"}
)
"""Ops whose result is a bool tensor: comparisons, logical ops, ``ops.sequence_mask``."""
MASK_PRESERVING = frozenset(
    {"cast", "astype", "float", "int", "half", "bool", "to", "expanddims", "unsqueeze", "squeeze", "reshape", "view",
     "broadcastto", "tile", "stopgradient", "transpose", "swapaxes", "permute", "flatten", "expand", "expandas",
     "repeat", "repeatinterleave"}
)
"""Ops that keep a mask a mask (a cast to float, a reshape, a broadcast)."""
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
_LABEL_NAME = re.compile(r"label|target|^y$|^y_|^gts?$|truth", re.IGNORECASE)
HeldMask = Callable[[str], "str | None"]
"""``self.<attr>`` -> "nonempty" (a 0/1 tensor with a valid entry: its count is never 0), "mask" (a 0/1 tensor), or
None (not a mask, or not known)."""


@dataclass(frozen=True)
class _Mask:
    evidence: str
    labels: str | None = None
    nonempty: bool = False


class _MaskTrace:
    """Is a value a mask (a bool or 0/1 tensor), and is it computed from the labels? Followed back through local
    names, casts and reshapes to what made it: a comparison, a logical op, a name that says so, a 0/1 tensor the
    cell holds."""

    def __init__(self, func: ast.FunctionDef, values: "LocalValues", resolve: Resolver, labels: frozenset[str],
                 held: HeldMask | None) -> None:
        self.arguments = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs} - {"self"}
        self.values, self.resolve, self.labels, self.held = values, resolve, labels, held

    def label_behind(self, node: ast.AST, line: int, depth: int = 0) -> str | None:
        """The first label argument ``node`` is computed from, through local names."""
        if depth > 25:
            return None
        for name in (n for n in ast.walk(node) if isinstance(n, ast.Name)):
            value = self.values.value_of(name.id, line)
            if value is not None:
                found = self.label_behind(value, value.lineno, depth + 1)
                if found:
                    return found
            elif name.id in self.labels:
                return name.id
        return None

    def of(self, node: ast.expr, line: int, depth: int = 0) -> _Mask | None:
        if depth > 25:
            return None
        if isinstance(node, ast.Name):
            value = self.values.value_of(node.id, line)
            found = self.of(value, value.lineno, depth + 1) if value is not None else None
            if found is None and value is None and node.id in self.arguments and _MASK_NAME.search(node.id):
                return _Mask(f"the argument `{node.id}`", node.id if node.id in self.labels else None)
            if found is None and _MASK_NAME.search(node.id):
                return _Mask(f"`{expr_text(value)}`" if value is not None else f"`{node.id}`",
                             self.label_behind(value, value.lineno) if value is not None else None)
            return found
        if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return _Mask(f"`{expr_text(node)}`", self.label_behind(node, line))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.Mult)):
            left, right = self.of(node.left, line, depth + 1), self.of(node.right, line, depth + 1)
            if left is not None and right is not None:
                return _Mask(f"`{expr_text(node)}`", left.labels or right.labels)
            return None
        if isinstance(node, ast.Subscript):
            return self.of(node.value, line, depth + 1)
        attr = self_attribute(node)
        if attr is not None:
            held = self.held(attr) if self.held is not None else None
            if held is not None or _MASK_NAME.search(attr):
                return _Mask(f"`self.{attr}`" + (", a 0/1 tensor the cell holds" if held else ""),
                             nonempty=held == "nonempty")
            return None
        if isinstance(node, ast.Call):
            name = op_name(node, self.resolve) or ""
            if name in MASK_MAKERS or _MASK_NAME.search(name):
                return _Mask(f"`{expr_text(node)}`", self.label_behind(node, line))
            operand = first_operand(node)
            if name in MASK_PRESERVING and operand is not None:
                return self.of(operand, line, depth + 1)
        return None


def _counted_axis(call: ast.Call) -> str | None:
    """The axis a reduction counts over, as written, when it keeps one count per row; None when it reduces the
    whole tensor (no axis, ``axis=None``, ``axis=()``)."""
    node = argument(call, 0, "axis", "dim") if is_receiver_call(call) else argument(call, 1, "axis", "dim")
    if node is None or (isinstance(node, ast.Constant) and node.value is None) or \
            (isinstance(node, (ast.Tuple, ast.List)) and not node.elts):
        return None
    return expr_text(node)


class _ZeroAnalysis:
    def __init__(self, locals_: LocalValues, resolve: Resolver, masks: _MaskTrace) -> None:
        self.locals, self.resolve, self.masks = locals_, resolve, masks

    def reason(self, node: ast.expr, line: int, depth: int = 0) -> _ZeroCause | None:
        if depth > 25:
            return None
        if isinstance(node, ast.Name):
            value = self.locals.value_of(node.id, line)
            if value is None:
                return None
            why = self.reason(value, value.lineno, depth + 1)
            return _ZeroCause(f"`{node.id}` = `{expr_text(value)}` ({why.text.split(' (', 1)[-1]}", why.mask) \
                if why else None
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Add):
                if _is_epsilon(node.left) or _is_epsilon(node.right):
                    return None
                return self.reason(node.left, line, depth + 1) or self.reason(node.right, line, depth + 1)
            if isinstance(node.op, ast.Mult):
                return self.reason(node.left, line, depth + 1) or self.reason(node.right, line, depth + 1)
            if isinstance(node.op, (ast.Div, ast.Pow)):
                return self.reason(node.left, line, depth + 1)
            return None
        if isinstance(node, (ast.UnaryOp, ast.Subscript)):
            return self.reason(node.operand if isinstance(node, ast.UnaryOp) else node.value, line, depth + 1)
        if isinstance(node, ast.IfExp):
            return self.reason(node.body, line, depth + 1) or self.reason(node.orelse, line, depth + 1)
        if isinstance(node, ast.Call):
            name = op_name(node, self.resolve)
            if name in ZERO_GUARDS or name == "divnonan":
                return None
            if name in ZERO_PRODUCERS:
                return self._produced(node, name, line)
            if name in PASS_THROUGH:
                operand = first_operand(node)
                return self.reason(operand, line, depth + 1) if operand is not None else None
        return None

    def _produced(self, call: ast.Call, name: str, line: int) -> _ZeroCause | None:
        """A sum, mean, norm... that can be 0; a count of a mask that is known to hold a valid entry cannot."""
        text = f"`{expr_text(call)}` ({_producer_kind(name)} can be 0)"
        operand = first_operand(call)
        mask = self.masks.of(operand, line) if name in MASK_COUNTS and operand is not None else None
        if mask is None:
            return _ZeroCause(text)
        if mask.nonempty:
            return None
        return _ZeroCause(text, MaskedMean(expr_text(call), expr_text(self._held(operand)), mask.evidence,
                                          _counted_axis(call), mask.labels, "mean" in name))

    def _held(self, node: ast.expr) -> ast.expr:
        """The mask under its casts and reshapes (``mask`` in ``mask.astype(x.dtype)``)."""
        while isinstance(node, ast.Call) and op_name(node, self.resolve) in MASK_PRESERVING and \
                first_operand(node) is not None:
            node = first_operand(node)  # type: ignore[assignment]
        return node


def _producer_kind(name: str) -> str:
    for stem, kind in (("relu", "a ReLU output"), ("norm", "a norm"), ("count", "a count"), ("mean", "a mean"),
                       ("sum", "a sum"), ("var", "a variance"), ("std", "a standard deviation")):
        if stem in name:
            return kind
    return "it"


def _division_operands(node: ast.AST, resolve: Resolver) -> tuple[ast.expr, ast.expr] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return node.left, node.right
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div):
        return node.target, node.value  # type: ignore[return-value]
    if isinstance(node, ast.Call) and op_name(node, resolve) in DIVISIONS:
        if is_receiver_call(node) and len(node.args) == 1:
            return node.func.value, node.args[0]  # type: ignore[attr-defined]
        if len(node.args) >= 2:
            return node.args[0], node.args[1]
        other = keyword(node, "other", "y", "x2")
        if node.args and other is not None:
            return node.args[0], other
    return None


def label_arguments(func: ast.FunctionDef, loss: bool) -> frozenset[str]:
    """Arguments of ``func`` that carry labels: named so (``label``, ``target``, ``y``...), and for the
    ``construct`` of a loss the argument after the prediction (``WithLossCell`` and ``Model`` call
    ``loss(output, label)``)."""
    names = [a.arg for a in func.args.posonlyargs + func.args.args][1:]
    by_name = {n for n in names if _LABEL_NAME.search(n)}
    return frozenset(by_name | (set(names[1:2]) if loss and func.name == "construct" else set()))


def unsafe_divisions(source: ClassSource, resolve: Resolver, decide: "Decide | None" = None,
                     held: HeldMask | None = None, loss: bool = False) -> list[DivisionSite]:
    """Divisions in the methods reachable from ``construct`` whose denominator can be zero; with ``decide``
    (one instance's branch truths), only those on the branches it takes. ``held`` says which ``self.<attr>``
    are 0/1 tensors; ``loss``: the class is a loss (its arguments after the prediction are labels)."""
    sites: list[DivisionSite] = []
    for func in reachable_methods(source):
        live = live_nodes(func, decide) if decide is not None else None
        values = LocalValues(func, live)
        masks = _MaskTrace(func, values, resolve, label_arguments(func, loss), held)
        analysis = _ZeroAnalysis(values, resolve, masks)
        for node in ast.walk(func):
            operands = _division_operands(node, resolve) if live is None or node in live else None
            if operands is None:
                continue
            why = analysis.reason(operands[1], node.lineno)
            if why:
                sites.append(DivisionSite(node.lineno, expr_text(node), expr_text(operands[1]), why.text, why.mask))
    return sorted(sites, key=lambda s: s.line)
