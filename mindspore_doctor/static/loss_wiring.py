"""MSD107 / MSD114: what a cell's construct returns, what a hand-written loss hands its prediction to (a library
loss, ``ops.log``) with the activations applied on the way, and whether a loss combines its two inputs
elementwise."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Optional

from mindspore_doctor.static.ast_nodes import expr_text, literal_number
from mindspore_doctor.static.method_flow import Decide, LocalValues, live_nodes
from mindspore_doctor.static.names import Resolver, first_operand, is_receiver_call, op_name


def returned_values(func: ast.FunctionDef) -> list[ast.expr]:
    """Expressions of the ``return`` statements of ``func`` (not of nested functions)."""
    found: list[ast.expr] = []
    pending: list[ast.AST] = list(func.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(node.value)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def combines_arguments_elementwise(func: ast.FunctionDef) -> bool:
    """True when construct(self, a, b) adds/subtracts/multiplies/divides something derived from ``a``
    with something derived from ``b`` (``logits - labels``): such a loss broadcasts its inputs."""
    params = [a.arg for a in func.args.args[1:3]]
    if len(params) < 2:
        return False
    derived = [{params[0]}, {params[1]}]
    assigns = [n for n in ast.walk(func) if isinstance(n, ast.Assign)]
    for _ in range(3):  # a few rounds of propagation through local assignments
        for node in assigns:
            used = _names_in(node.value)
            targets = set().union(*(_names_in(t) for t in node.targets))
            for mine, other in ((derived[0], derived[1]), (derived[1], derived[0])):
                if used & mine and not used & other:
                    mine |= targets
    for node in ast.walk(func):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Sub, ast.Add, ast.Mult, ast.Div)):
            left, right = _names_in(node.left), _names_in(node.right)
            if (left & derived[0] and right & derived[1]) or (left & derived[1] and right & derived[0]):
                return True
    return False


LOSS_SINKS = {
    "nllloss": "NLLLoss", "bceloss": "BCELoss", "binarycrossentropy": "BCELoss",
    "bcewithlogitsloss": "BCEWithLogitsLoss", "binarycrossentropywithlogits": "BCEWithLogitsLoss",
    "crossentropyloss": "CrossEntropyLoss", "crossentropy": "CrossEntropyLoss",
    "softmaxcrossentropywithlogits": "SoftmaxCrossEntropyWithLogits", "log": "log",
}
"""Ops (normalised) a hand-written loss hands its prediction to -> the library loss they are; ``log``:
``ops.log`` (it needs probabilities)."""
PREDICTION_ACTIVATIONS = frozenset({"sigmoid", "softmax", "logsoftmax"})
_PREDICTION_PRESERVING = frozenset(
    {"reshape", "view", "squeeze", "expanddims", "unsqueeze", "flatten", "cast", "astype", "float", "transpose",
     "permute", "gather", "gatherelements", "gatherd", "gathernd", "sum", "reducesum", "mean", "reducemean",
     "clip", "clamp", "clipbyvalue", "maximum", "minimum", "stopgradient", "split", "chunk"}
)
"""Ops that keep what a value is (logits, probabilities): reshaping, splitting, picking, clipping, summing
picked entries."""


@dataclass(frozen=True)
class PredictionUse:
    """A loss's prediction reaching a library loss (or ``ops.log``) inside the loss's construct."""

    line: int
    call: str
    """The call that receives it: ``self.nll(log_probs, labels)``."""
    sink: str
    """A value of ``LOSS_SINKS``."""
    applied: tuple[tuple[str, str], ...]
    """Activations applied on the way, argument first: (normalised op, call text)."""


def _is_small(node: ast.expr) -> bool:
    """An epsilon: a literal of magnitude at most 0.01, or a name spelled ``eps``."""
    value = literal_number(node)
    if isinstance(value, (int, float)):
        return 0 < abs(value) <= 0.01
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "eps" in name.lower()


Paths = Optional[frozenset[tuple[tuple[str, str], ...]]]
"""Activations applied on each path from a loss's prediction to a value; None: a path not followed."""


class _PredictionTrace:
    """Follows an expression of a loss's construct back to its prediction argument (the first after ``self``,
    what ``WithLossCell`` passes the network output as) through local names."""

    def __init__(self, func: ast.FunctionDef, resolve: Resolver, live: set[ast.AST] | None = None) -> None:
        args = func.args.posonlyargs + func.args.args
        self.argument = args[1].arg if len(args) > 1 else None
        self.values, self.resolve = LocalValues(func, live), resolve

    def paths(self, node: ast.expr | None, line: int, depth: int = 0) -> Paths:
        """The activations applied between the argument and ``node``, one tuple per path that reaches it; empty
        when ``node`` does not depend on the argument; None when it does through anything else (an ``exp``, a
        product of the prediction with itself, a helper): what it is then is unknown."""
        if node is None or depth > 40:
            return None
        if isinstance(node, ast.Name):
            value = self.values.value_of(node.id, line)
            if value is not None:
                return self.paths(value, value.lineno, depth + 1)
            return frozenset({()}) if node.id == self.argument else frozenset()
        if isinstance(node, ast.Subscript):
            return self.paths(node.value, line, depth + 1)
        if isinstance(node, ast.UnaryOp):
            keeps = isinstance(node.op, (ast.USub, ast.UAdd))
            return self.paths(node.operand, line, depth + 1) if keeps else frozenset()
        if isinstance(node, (ast.IfExp, ast.Tuple, ast.List)):
            parts = [node.body, node.orelse] if isinstance(node, ast.IfExp) else node.elts
            return self._union(parts, line, depth)
        if isinstance(node, ast.BinOp):
            return self._binary(node, line, depth)
        if isinstance(node, ast.Call):
            return self._call(node, line, depth)
        return frozenset()  # constants, attributes, comparisons: not the prediction's values

    def _union(self, nodes: list, line: int, depth: int) -> Paths:
        found: set = set()
        for node in nodes:
            paths = self.paths(node, line, depth + 1)
            if paths is None:
                return None
            found |= paths
        return frozenset(found)

    def _binary(self, node: ast.BinOp, line: int, depth: int) -> Paths:
        left, right = self.paths(node.left, line, depth + 1), self.paths(node.right, line, depth + 1)
        if left is None or right is None or (left and right):
            return None
        if not left and not right:
            return frozenset()
        keeps = (
            isinstance(node.op, ast.Mult)  # a mask, a one-hot pick, a scale
            or (isinstance(node.op, ast.Div) and bool(left))  # a temperature
            or (isinstance(node.op, (ast.Add, ast.Sub)) and _is_small(node.right if left else node.left))  # + eps
            or (isinstance(node.op, ast.Sub) and bool(right) and literal_number(node.left) == 1)  # 1 - p
        )
        return (left or right) if keeps else None

    def _call(self, node: ast.Call, line: int, depth: int) -> Paths:
        name = op_name(node, self.resolve)
        operands = [node.func.value] if is_receiver_call(node) else []  # type: ignore[attr-defined]
        operands += [*node.args, *(kw.value for kw in node.keywords)]
        if name in PREDICTION_ACTIVATIONS:
            inner = self.paths(first_operand(node), line, depth + 1)
            return frozenset(path + ((name, expr_text(node)),) for path in inner) if inner else inner
        found = self._union(operands, line, depth)
        return found if name in _PREDICTION_PRESERVING or not found else None


def prediction_uses(func: ast.FunctionDef, resolve: Resolver, decide: "Decide | None" = None) -> list[PredictionUse]:
    """Where a loss's construct hands its prediction to a library loss (``self.nll(x, y)``, ``ops.nll_loss``,
    ``ops.binary_cross_entropy``...) or to ``ops.log``, with the activations applied on the way. Left out: a
    call reached through something not followed, and one reached by paths that disagree on the last
    activation. With ``decide``, only the branches the instance takes (``if self.use_log_softmax:``) count."""
    live = live_nodes(func, decide) if decide is not None else None
    trace = _PredictionTrace(func, resolve, live)
    if trace.argument is None:
        return []
    uses = []
    for call in (node for node in ast.walk(func) if isinstance(node, ast.Call) and (live is None or node in live)):
        sink = LOSS_SINKS.get(op_name(call, resolve) or "")
        paths = trace.paths(first_operand(call), call.lineno) if sink else None
        if paths and len({path[-1][0] if path else "" for path in paths}) == 1:
            uses.append(PredictionUse(call.lineno, expr_text(call), sink, min(paths)))  # type: ignore[arg-type]
    return sorted(uses, key=lambda use: use.line)
