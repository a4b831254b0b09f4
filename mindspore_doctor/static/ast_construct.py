"""AST analysis of ``nn.Cell`` classes, shared by the object checks and ``--no-import``.

A :class:`ClassSource` is the parsed methods of one cell class. The functions
below read it without executing anything: which ``self.<attr>`` the path from
``construct`` touches, which divisions have a denominator that can be zero,
which Dropout/Softmax/BatchNorm constructors and functional calls carry
literal rates or axes. Object mode passes a ``resolve`` callback that maps
``self.<attr>`` to the type name of the real child cell or primitive; source
mode resolves it from the ``self.<attr> = Call(...)`` lines of ``__init__``.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator

Resolver = Callable[[str], "str | None"]
"""Maps ``self.<attr>`` to the type name of what it holds (``"ReduceSum"``), or None."""

MODULE_NAMES = frozenset({"ops", "F", "P", "mint", "ms", "mindspore", "nn", "np", "numpy", "C", "msops", "self"})
DYNAMIC_SELF_ACCESS = frozenset(
    {
        "__dict__", "_cells", "_params", "cells", "name_cells", "cells_and_names", "get_parameters",
        "trainable_params", "untrainable_params", "parameters_and_names", "parameters_dict",
    }
)
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


class ConstructUnavailable(Exception):
    """The construct of a cell class cannot be read or analysed; the message says why."""


def norm_name(name: str) -> str:
    """``reduce_sum`` / ``ReduceSum`` -> ``reducesum``: one spelling for functional and primitive ops."""
    return name.replace("_", "").lower() if not name.startswith("__") else name


def expr_text(node: ast.AST) -> str:
    return ast.unparse(node)


# --- parsed classes ---------------------------------------------------------------


@dataclass(frozen=True)
class InitAssignment:
    """``self.<attr> = <callee>(...)`` in ``__init__``."""

    attr: str
    callee: str
    call: ast.Call
    line: int


@dataclass
class ClassSource:
    name: str
    file: str | None
    methods: dict[str, list[ast.FunctionDef]] = field(default_factory=dict)
    """Method name -> its definitions along the class hierarchy (own first)."""
    line: int = 0

    @property
    def construct(self) -> ast.FunctionDef:
        return self.methods["construct"][0]

    def init_assignments(self) -> dict[str, InitAssignment]:
        found: dict[str, InitAssignment] = {}
        for init in self.methods.get("__init__", []):
            for node in ast.walk(init):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                    for target in node.targets:
                        attr = self_attribute(target)
                        callee = callee_identifier(node.value)
                        if attr and callee and attr not in found:
                            found[attr] = InitAssignment(attr, callee, node.value, node.lineno)
        return found


def _add_methods(source: ClassSource, classdef: ast.ClassDef) -> None:
    for item in classdef.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            source.methods.setdefault(item.name, []).append(item)


def _is_library_class(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module.split(".")[0] in ("mindspore", "pybind11_builtins")


@lru_cache(maxsize=512)
def class_source(cls: type) -> ClassSource:
    """Parse ``cls`` and its user-defined bases once per class (cached: many instances, few classes)."""
    source = ClassSource(cls.__name__, None)
    for klass in cls.__mro__:
        if _is_library_class(klass) or klass is object:
            continue
        try:
            lines, start = inspect.getsourcelines(klass)
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError) as exc:
            raise ConstructUnavailable(f"{klass.__name__}: source not available ({exc})") from None
        except SyntaxError as exc:
            raise ConstructUnavailable(f"{klass.__name__}: source cannot be parsed ({exc.msg})") from None
        ast.increment_lineno(tree, start - 1)
        classdef = tree.body[0]
        if not isinstance(classdef, ast.ClassDef):
            raise ConstructUnavailable(f"{klass.__name__}: source is not a class statement")
        if source.file is None:
            source.file, source.line = inspect.getsourcefile(klass), start
        _add_methods(source, classdef)
    if "construct" not in source.methods:
        raise ConstructUnavailable(f"{cls.__name__}.construct: no construct defined in Python source")
    return source


def module_classes(tree: ast.Module, file: str) -> Iterator[ClassSource]:
    """Classes of a parsed file that define ``construct`` (bases from the same file merged in)."""
    classdefs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for classdef in classdefs.values():
        source = ClassSource(classdef.name, file, line=classdef.lineno)
        chain, seen = [classdef], {classdef.name}
        while chain:
            current = chain.pop(0)
            _add_methods(source, current)
            for base in current.bases:
                if isinstance(base, ast.Name) and base.id in classdefs and base.id not in seen:
                    seen.add(base.id)
                    chain.append(classdefs[base.id])
        if "construct" in source.methods:
            yield source


# --- small AST helpers -----------------------------------------------------------


def self_attribute(node: ast.AST) -> str | None:
    """``self.x`` (or ``super().x``) -> ``"x"``."""
    if isinstance(node, ast.Attribute):
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "self":
            return node.attr
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            return node.attr
    return None


def callee_identifier(call: ast.Call) -> str | None:
    """Last name of what is called: ``ops.ReduceSum(...)`` -> ``ReduceSum``, ``x.sum()`` -> ``sum``."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_receiver_call(call: ast.Call) -> bool:
    """``x.sum()`` (method on a value), as opposed to ``ops.sum(x)`` or ``self.sum(x)``."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return not (isinstance(owner, ast.Name) and owner.id in MODULE_NAMES) or isinstance(func.value, ast.Call)


def op_name(call: ast.Call, resolve: Resolver) -> str | None:
    """Normalised operation a call performs: ``self.sum(x)`` resolves through ``resolve``;
    ``ops.Div()(a, b)`` is ``div``."""
    if isinstance(call.func, ast.Call):
        inner = callee_identifier(call.func)
        return norm_name(inner) if inner else None
    attr = self_attribute(call.func)
    if attr is not None:
        resolved = resolve(attr)
        return norm_name(resolved or attr)
    name = callee_identifier(call)
    return norm_name(name) if name else None


def first_operand(call: ast.Call) -> ast.expr | None:
    if _is_receiver_call(call):
        return call.func.value  # type: ignore[attr-defined]
    return call.args[0] if call.args else None


def literal_number(node: ast.AST | None) -> float | int | tuple | None:
    """A literal int/float/tuple of ints (``-1`` included), else None."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) or (isinstance(value, tuple) and all(isinstance(v, int) for v in value)):
        return value
    return None


def keyword(call: ast.Call, *names: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg in names:
            return kw.value
    return None


def argument(call: ast.Call, position: int, *names: str) -> ast.expr | None:
    """Argument by keyword, else by position."""
    found = keyword(call, *names)
    if found is not None:
        return found
    return call.args[position] if len(call.args) > position else None


def calls_in(nodes: list[ast.AST]) -> Iterator[ast.Call]:
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Call):
                yield node


# --- data flow inside one method ---------------------------------------------------


class LocalValues:
    """Assignments to local names of one function, looked up flow-insensitively but
    by position: the value of ``name`` at ``line`` is its last assignment above that line."""

    def __init__(self, func: ast.FunctionDef) -> None:
        self._values: dict[str, list[tuple[int, ast.expr]]] = {}
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self._add(node.targets[0].id, node.lineno, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self._add(node.target.id, node.lineno, node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                combined = ast.BinOp(left=ast.Name(node.target.id, ast.Load()), op=node.op, right=node.value)
                ast.copy_location(combined, node)
                self._add(node.target.id, node.lineno, combined)
        for values in self._values.values():
            values.sort(key=lambda item: item[0])

    def _add(self, name: str, line: int, value: ast.expr) -> None:
        self._values.setdefault(name, []).append((line, value))

    def value_of(self, name: str, line: int) -> ast.expr | None:
        before = [value for at, value in self._values.get(name, []) if at < line]
        return before[-1] if before else None


# --- MSD106: divisions whose denominator can be zero ---------------------------------


@dataclass(frozen=True)
class DivisionSite:
    line: int
    expression: str
    denominator: str
    reason: str
    """Why the denominator can be zero, e.g. "`s` = `x.sum()` (a sum)"."""


def _is_epsilon(node: ast.expr) -> bool:
    value = literal_number(node)
    if isinstance(value, (int, float)):
        return value != 0
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "eps" in name.lower()


class _ZeroAnalysis:
    def __init__(self, locals_: LocalValues, resolve: Resolver) -> None:
        self.locals, self.resolve = locals_, resolve

    def reason(self, node: ast.expr, line: int, depth: int = 0) -> str | None:
        if depth > 25:
            return None
        if isinstance(node, ast.Name):
            value = self.locals.value_of(node.id, line)
            if value is None:
                return None
            why = self.reason(value, value.lineno, depth + 1)
            return f"`{node.id}` = `{expr_text(value)}` ({why.split(' (', 1)[-1]}" if why else None
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
                return f"`{expr_text(node)}` ({_producer_kind(name)} can be 0)"
            if name in PASS_THROUGH:
                operand = first_operand(node)
                return self.reason(operand, line, depth + 1) if operand is not None else None
        return None


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
        if _is_receiver_call(node) and len(node.args) == 1:
            return node.func.value, node.args[0]  # type: ignore[attr-defined]
        if len(node.args) >= 2:
            return node.args[0], node.args[1]
        other = keyword(node, "other", "y", "x2")
        if node.args and other is not None:
            return node.args[0], other
    return None


def unsafe_divisions(source: ClassSource, resolve: Resolver) -> list[DivisionSite]:
    """Divisions in the methods reachable from ``construct`` whose denominator can be zero."""
    sites: list[DivisionSite] = []
    for func in reachable_methods(source):
        analysis = _ZeroAnalysis(LocalValues(func), resolve)
        for node in ast.walk(func):
            operands = _division_operands(node, resolve)
            if operands is None:
                continue
            why = analysis.reason(operands[1], node.lineno)
            if why:
                sites.append(DivisionSite(node.lineno, expr_text(node), expr_text(operands[1]), why))
    return sorted(sites, key=lambda s: s.line)


# --- MSD110: which self attributes the path from construct uses ----------------------


@dataclass(frozen=True)
class AttributeUse:
    names: frozenset[str]
    dynamic: str | None
    """Why the use cannot be known statically (``getattr(self, ...)``...), else None."""


def reachable_methods(source: ClassSource) -> list[ast.FunctionDef]:
    """``construct`` and every method (or property) it reaches through ``self.<name>``."""
    seen: set[str] = set()
    pending = ["construct"]
    reached: list[ast.FunctionDef] = []
    while pending:
        name = pending.pop()
        if name in seen or name not in source.methods:
            continue
        seen.add(name)
        for func in source.methods[name]:
            reached.append(func)
            for node in ast.walk(func):
                attr = self_attribute(node)
                if attr in source.methods:
                    pending.append(attr)
    return reached


def _dynamic_access(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id in ("getattr", "vars", "setattr", "hasattr") and node.args:
            if isinstance(node.args[0], ast.Name) and node.args[0].id == "self":
                return f"`{node.func.id}(self, ...)` at line {node.lineno}"
    if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id == "super"):
        if any(isinstance(arg, ast.Name) and arg.id == "self" for arg in node.args):
            return f"`self` passed to `{expr_text(node.func)}` at line {node.lineno}"
    attr = self_attribute(node)
    if attr in DYNAMIC_SELF_ACCESS:
        return f"`self.{attr}` at line {node.lineno}"
    return None


def attribute_uses(source: ClassSource) -> AttributeUse:
    names: set[str] = set()
    dynamic = None
    for func in reachable_methods(source):
        for node in ast.walk(func):
            attr = self_attribute(node)
            if attr is not None and not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)):
                names.add(attr)
            dynamic = dynamic or _dynamic_access(node)
    return AttributeUse(frozenset(names), dynamic)


def init_references(source: ClassSource) -> set[str]:
    """``self.<attr>`` read in ``__init__`` (a cell handed to another cell is used through it)."""
    return {
        attr
        for init in source.methods.get("__init__", [])
        for node in ast.walk(init)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and (attr := self_attribute(node))
    }


# --- MSD104 / MSD105 / MSD113: literal rates and axes at call sites --------------------


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


def _is_constructor(name: str) -> bool:
    return name[:1].isupper()


def dropout_call(call: ast.Call) -> DropoutCall | None:
    """``nn.Dropout(keep_prob=0.1)``, ``nn.Dropout(p=0.9)``, ``ops.dropout(x, p=0.9)``... with literal rates."""
    name = callee_identifier(call)
    if name is None or norm_name(name) not in ("dropout", "dropout1d", "dropout2d", "dropout3d"):
        return None
    site = dict(line=call.lineno, text=expr_text(call), callee=name)
    if not _is_constructor(name):  # functional: ops.dropout(input, p=0.5, ...)
        rate = literal_number(argument(call, 1, "p"))
        return DropoutCall(**site, drop_rate=float(rate), via_keep_prob=False) if isinstance(rate, (int, float)) else None
    p = literal_number(keyword(call, "p"))
    if name != "Dropout":  # nn.Dropout2d(p=0.5)
        p = literal_number(argument(call, 0, "p"))
    if isinstance(p, (int, float)):
        return DropoutCall(**site, drop_rate=float(p), via_keep_prob=False)
    keep = literal_number(argument(call, 0, "keep_prob"))
    if isinstance(keep, (int, float)):
        return DropoutCall(**site, drop_rate=round(1.0 - keep, 6), via_keep_prob=True)
    return None


def softmax_call(call: ast.Call) -> AxisCall | None:
    """``nn.Softmax(axis=0)``, ``ops.softmax(x, axis=0)``, ``x.softmax(0)``... with a literal axis."""
    name = callee_identifier(call)
    if name is None or norm_name(name) not in ("softmax", "logsoftmax"):
        return None
    if _is_constructor(name) or _is_receiver_call(call):
        node = argument(call, 0, "axis", "dim")
    else:
        node = argument(call, 1, "axis", "dim")
    axis = literal_number(node) if node is not None else -1
    if axis is None or isinstance(axis, float):
        return None
    return AxisCall(call.lineno, expr_text(call), name, axis, norm_name(name) == "logsoftmax")


def batchnorm_call(call: ast.Call) -> BatchNormCall | None:
    name = callee_identifier(call)
    if name is None or not name.startswith("BatchNorm"):
        return None
    node = keyword(call, "use_batch_statistics")
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return BatchNormCall(call.lineno, expr_text(call), name, node.value)
    return None


def find_calls(nodes: list[ast.AST], parse: Callable[[ast.Call], CallSite | None]) -> list:
    """Every call under ``nodes`` that ``parse`` recognises (``self.x(...)`` calls are left to objects)."""
    sites = [site for call in calls_in(nodes) if self_attribute(call.func) is None and (site := parse(call))]
    return sorted(sites, key=lambda site: site.line)


# --- MSD107 / MSD114: what construct returns, and how a loss combines its inputs --------------


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
