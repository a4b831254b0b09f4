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
import copy
import inspect
import linecache
import re
import textwrap
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterator, Optional

from mindspore_doctor.library import is_mindspore_class

Resolver = Callable[[str], "str | None"]
"""Maps ``self.<attr>`` to the type name of what it holds (``"ReduceSum"``), or None."""
AttributeValue = Callable[[str], object]
"""Maps ``self.<attr>`` to the plain value one instance holds (``self.p`` -> 0.9), or None when unknown."""

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
    end_line: int = 0

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

    def attribute_constants(self) -> dict[str, object]:
        """``self.<attr>`` bound once in the class, in ``__init__``, to a literal (number, bool, tuple of ints)
        or to an ``__init__`` argument with a literal default: all source mode knows of an instance's plain
        values (a caller may pass another value; the file alone does not say which)."""
        stores: dict[str, list[ast.AST]] = {}
        for funcs in self.methods.values():
            for node in (n for func in funcs for n in ast.walk(func)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                    if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                for target in (t for top in targets for t in ast.walk(top)):
                    if isinstance(target, ast.Attribute) and (attr := self_attribute(target)):
                        stores.setdefault(attr, []).append(node)
        init = self.methods.get("__init__", [None])[0]
        if init is None:
            return {}
        args = init.args.posonlyargs + init.args.args
        defaults = dict(zip([a.arg for a in args][len(args) - len(init.args.defaults):], init.args.defaults))
        defaults.update({a.arg: d for a, d in zip(init.args.kwonlyargs, init.args.kw_defaults) if d is not None})
        found: dict[str, object] = {}
        for attr, nodes in stores.items():
            node = nodes[0]
            if len(nodes) != 1 or not isinstance(node, ast.Assign) or len(node.targets) != 1 or \
                    self_attribute(node.targets[0]) != attr or not any(n is node for n in ast.walk(init)):
                continue
            value = defaults.get(node.value.id) if isinstance(node.value, ast.Name) else node.value
            constant = _constant(value)
            if constant is not None:
                found[attr] = constant
        return found

    def bound_together(self) -> list[frozenset[str]]:
        """Attributes ``__init__`` binds to one object in one statement (``self.a = self.b = Mlp(...)``):
        sharing stated on purpose."""
        return [
            frozenset(attrs)
            for init in self.methods.get("__init__", [])
            for node in ast.walk(init)
            if isinstance(node, ast.Assign) and len(node.targets) > 1
            for attrs in [{self_attribute(t) for t in node.targets} - {None}]
            if len(attrs) > 1
        ]


def _constant(node: ast.AST | None) -> object:
    """A literal number, bool or tuple of ints, else None."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, bool) or _is_number(value) else None


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str) -> None:
        self.old = old

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == self.old:
            node.id = "self"
        return node


def _as_self(func: ast.FunctionDef) -> ast.FunctionDef:
    """A copy of ``func`` whose first argument is spelled ``self``: ``construct(s, x)`` and
    ``construct(cell, x)`` are the same method, and every reader below looks for ``self.<attr>``."""
    args = func.args.posonlyargs + func.args.args
    static = any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod") for d in func.decorator_list)
    if not args or args[0].arg == "self" or static:
        return func
    renamed = copy.deepcopy(func)
    first = (renamed.args.posonlyargs + renamed.args.args)[0]
    _Rename(first.arg).visit(renamed)
    first.arg = "self"
    return renamed


def _add_methods(source: ClassSource, classdef: ast.ClassDef) -> None:
    for item in classdef.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            source.methods.setdefault(item.name, []).append(_as_self(item))


def _is_library_class(cls: type) -> bool:
    return is_mindspore_class(cls) or getattr(cls, "__module__", None) == "pybind11_builtins"


# --- what the names of a file import ------------------------------------------------------

_IMPORTED = "msdoctor_imported"
"""Attribute ``bind_imports`` sets on an ``ast.Name``: the dotted path its import statement binds it to."""


def _imported_names(tree: ast.AST) -> dict[str, str]:
    """Names the import statements of ``tree`` bind -> what they import (``F`` -> ``mindspore.mint.nn.functional``,
    ``Dropout`` -> ``mindspore.mint.nn.Dropout``)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                names[alias.asname or root] = alias.name if alias.asname else root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names if a.name != "*")
    return names


@lru_cache(maxsize=256)
def _file_imports(text: str) -> dict[str, str]:
    """``_imported_names`` of a file's text, parsed once per file (many classes share it); {} when it does not
    parse."""
    try:
        return _imported_names(ast.parse(text))
    except (SyntaxError, ValueError):
        return {}


def _bind(tree: ast.AST, names: dict[str, str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            setattr(node, _IMPORTED, names[node.id])


def bind_imports(tree: ast.Module) -> None:
    """Mark the names of a parsed file with what its imports bind them to: the spelling alone does not say
    that ``F.softmax(x, 1)`` is a module function (not a method of ``F``) nor that ``nn.Dropout(0.9)`` after
    ``from mindspore.mint import nn`` drops 90 %."""
    _bind(tree, _imported_names(tree))


def _dotted_name(node: ast.expr) -> str | None:
    """``MF.softmax`` -> ``mindspore.mint.nn.functional.softmax`` when an import binds ``MF``, else the dotted
    text as written (``mint.nn.Dropout``); None for anything but a (dotted) name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([getattr(node, _IMPORTED, node.id), *reversed(parts)])


def from_mint(call: ast.Call) -> bool:
    """The callee is a ``mindspore.mint`` API, whose signatures follow PyTorch's (``mint.nn.Dropout(0.9)``:
    the first argument is the drop probability, not ``keep_prob``)."""
    name = _dotted_name(call.func)
    return name is not None and "mint" in name.split(".")


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
        file = inspect.getsourcefile(klass)
        _bind(tree, _file_imports("".join(linecache.getlines(file))) if file else {})
        classdef = tree.body[0]
        if not isinstance(classdef, ast.ClassDef):
            raise ConstructUnavailable(f"{klass.__name__}: source is not a class statement")
        if source.file is None:
            source.file, source.line = file, start
        _add_methods(source, classdef)
    if "construct" not in source.methods:
        raise ConstructUnavailable(f"{cls.__name__}.construct: no construct defined in Python source")
    return source


def module_classes(tree: ast.Module, file: str) -> Iterator[ClassSource]:
    """Classes of a parsed file that define ``construct`` (bases from the same file merged in)."""
    bind_imports(tree)
    classdefs = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for classdef in classdefs.values():
        source = ClassSource(classdef.name, file, line=classdef.lineno, end_line=classdef.end_lineno or 0)
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
    module = isinstance(owner, ast.Name) and (owner.id in MODULE_NAMES or hasattr(owner, _IMPORTED))
    return not module or isinstance(func.value, ast.Call)


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
    value = _constant(node)
    return value if _is_number(value) else None


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or (isinstance(value, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value))


def number(node: ast.AST | None, attribute: AttributeValue | None = None) -> float | int | tuple | None:
    """A literal number (see ``literal_number``), or ``self.<attr>`` when ``attribute`` knows it holds one:
    a rate or axis kept in an attribute (``ops.dropout(h, p=self.recurrent_dropout)``)."""
    value = literal_number(node)
    attr = self_attribute(node) if node is not None and attribute is not None else None
    if value is None and attr is not None:
        held = attribute(attr)  # type: ignore[misc]
        held = tuple(held) if isinstance(held, list) else held
        value = held if _is_number(held) else None
    return value


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
    by position: the value of ``name`` at ``line`` is its last assignment above that line. With ``live``
    (``live_nodes`` of one instance), assignments in branches that instance never takes are left out:
    ``if self.use_log_softmax: x = self.log_softmax(x)`` assigns nothing when the flag is off."""

    def __init__(self, func: ast.FunctionDef, live: set[ast.AST] | None = None) -> None:
        self._values: dict[str, list[tuple[int, ast.expr]]] = {}
        for node in ast.walk(func):
            if live is not None and node not in live:
                continue
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
class MaskCount:
    """A denominator that counts the entries of a mask (a sum or mean of a 0/1 tensor): the division is a
    masked mean, whose count is 0 only when nothing in what is counted is valid."""

    count: str
    """The reduction as written: ``mask.sum()``, ``self.mean(mask)``."""
    mask: str
    """The mask as written at the reduction: ``mask``, ``self.mask``."""
    evidence: str
    """What makes it a mask, as written: ``target != 0``, ``sequence_mask(seq_length, max_length)``, ``the
    argument `mask```."""
    axis: str | None
    """The axis counted over, as written, when the count is per row (``1``): one count per sample, 0 for a
    sample with no valid entry. None: one count over the whole tensor."""
    labels: str | None
    """The label argument the mask is computed from (``target``): a batch can hold no valid label."""
    mean: bool = False
    """The count is a mean (the fraction of valid entries), not a sum."""


@dataclass(frozen=True)
class DivisionSite:
    line: int
    expression: str
    denominator: str
    reason: str
    """Why the denominator can be zero, e.g. "`s` = `x.sum()` (a sum)"."""
    mask: MaskCount | None = None
    """Set when the denominator counts a mask (a masked mean)."""


@dataclass(frozen=True)
class _ZeroCause:
    text: str
    mask: MaskCount | None = None


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
    node = argument(call, 0, "axis", "dim") if _is_receiver_call(call) else argument(call, 1, "axis", "dim")
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
        return _ZeroCause(text, MaskCount(expr_text(call), expr_text(self._held(operand)), mask.evidence,
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
        if _is_receiver_call(node) and len(node.args) == 1:
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
    if _is_constructor(name) or _is_receiver_call(call):
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
        operands = [node.func.value] if _is_receiver_call(node) else []  # type: ignore[attr-defined]
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


# --- MSD101 / MSD109: how often construct calls a child, and where a value goes ---------------


def held_cells(func: ast.FunctionDef) -> dict[str, tuple[str, str]]:
    """Local names that hold a child cell: name -> (attr, how), how being "loop" (``for v in self.<attr>``,
    also through ``enumerate``: one element per step, in order), "item" (``v = self.<attr>[i]``) or
    "alias" (``v = self.<attr>``)."""
    held: dict[str, tuple[str, str]] = {}
    for node in ast.walk(func):
        if isinstance(node, (ast.For, ast.comprehension)):
            source, target = node.iter, node.target
            if isinstance(source, ast.Call) and callee_identifier(source) == "enumerate" and source.args:
                source = source.args[0]
                target = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
            attr = self_attribute(source)
            if attr and isinstance(target, ast.Name):
                held[target.id] = (attr, "loop")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            item = isinstance(value, ast.Subscript)
            attr = self_attribute(value.value if item else value)
            if attr:
                held[node.targets[0].id] = (attr, "item" if item else "alias")
    return held


def _loop_variables(func: ast.FunctionDef, attr: str) -> set[str]:
    """Local names that call ``self.<attr>`` (or one of its elements) when called."""
    return {name for name, (held, _) in held_cells(func).items() if held == attr}


def _calls_attribute(call: ast.Call, attr: str, loop_names: set[str]) -> bool:
    """``self.<attr>(...)``, ``self.<attr>[i](...)``, or ``v(...)`` for ``v`` an element iterated from it."""
    func = call.func
    if isinstance(func, ast.Subscript):
        func = func.value
    return self_attribute(func) == attr or (isinstance(func, ast.Name) and func.id in loop_names)


def call_sites(source: ClassSource, attr: str) -> list[tuple[ast.FunctionDef, ast.Call]]:
    """Every call of ``self.<attr>`` (or of an element of it) in the methods reachable from construct."""
    return [
        (func, node)
        for func in reachable_methods(source)
        for loop_names in [_loop_variables(func, attr)]
        for node in ast.walk(func)
        if isinstance(node, ast.Call) and _calls_attribute(node, attr, loop_names)
    ]


def attribute_loads(source: ClassSource, attr: str) -> list[tuple[ast.FunctionDef, ast.Attribute]]:
    """Every read of ``self.<attr>`` in the methods reachable from construct."""
    return [
        (func, node) for func in reachable_methods(source) for node in ast.walk(func)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and self_attribute(node) == attr
    ]


def output_discarded(source: ClassSource, attr: str, decide: "Decide | None" = None) -> bool:
    """Every reference to ``self.<attr>`` in the methods reachable from construct is a call whose result is
    dropped: a bare expression statement, or assigned to a name nothing reads (``aux = self.aux_head(h)``).
    With ``decide``, only the branches this instance takes count."""
    live = {func: live_nodes(func, decide) for func in reachable_methods(source)} if decide is not None else None
    references = [(f, n) for f, n in attribute_loads(source, attr) if live is None or n in live[f]]

    def dropped(func: ast.FunctionDef, node: ast.Attribute) -> bool:
        flow = function_flow(func)
        call = flow.parents.get(node)
        if not isinstance(call, ast.Call) or call.func is not node:
            return False
        statement = flow.parents.get(call)
        if isinstance(statement, ast.Expr):
            return True
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and \
                isinstance(statement.targets[0], ast.Name):
            name = statement.targets[0].id
            loop = flow.parents.get(statement)
            while loop is not None and not isinstance(loop, (ast.For, ast.While)):
                loop = flow.parents.get(loop)
            carried = loop is not None and any(  # read by the next iteration
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(loop))
            readers = flow.readers(name, statement.end_lineno or statement.lineno, live[func] if live else None,
                                   statement)
            return not carried and not readers
        return False

    return bool(references) and all(dropped(func, node) for func, node in references)


def call_count(source: ClassSource, attr: str, decide: "Decide | None" = None) -> int:
    """Calls of ``self.<attr>`` one forward pass through construct makes: call sites summed, helper methods
    followed, the branches of an ``if``/``else`` (or an early ``return``) counted as alternatives, and only
    the branch ``decide`` picks when it knows the test's truth for this instance."""

    def taken(test: ast.expr) -> bool | None:
        return decide(test) if decide is not None else None

    def in_method(name: str, stack: tuple[str, ...]) -> int:
        func = source.methods[name][0]
        return statements(func.body, _loop_variables(func, attr), stack + (name,))

    def statements(body: list[ast.stmt], loops: set[str], stack: tuple[str, ...]) -> int:
        total = 0
        for index, stmt in enumerate(body):
            if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return):
                rest = stmt.orelse + body[index + 1:]
                truth = taken(stmt.test)
                branches = [statements(b, loops, stack) for b, keep in ((stmt.body, truth is not False),
                                                                        (rest, truth is not True)) if keep]
                return total + expression(stmt.test, loops, stack) + max(branches)
            total += expression(stmt, loops, stack)
        return total

    def expression(node: ast.AST, loops: set[str], stack: tuple[str, ...]) -> int:
        if isinstance(node, (ast.If, ast.IfExp)):
            truth = taken(node.test)
            body, orelse = (node.body, node.orelse) if isinstance(node, ast.If) else ([node.body], [node.orelse])
            branches = [statements(b, loops, stack) for b, keep in ((body, truth is not False),
                                                                    (orelse, truth is not True)) if keep]
            return expression(node.test, loops, stack) + max(branches)
        own = 0
        if isinstance(node, ast.Call):
            helper = self_attribute(node.func)
            if _calls_attribute(node, attr, loops):
                own = 1
            elif helper in source.methods and helper not in stack:
                own = in_method(helper, stack)
        return own + sum(expression(child, loops, stack) for child in ast.iter_child_nodes(node))

    return in_method("construct", ())


class FunctionFlow:
    """Where values go inside one method: each node's parent, and which loads of a local name read
    which binding of it (by line: a load reads the last binding that ends above it)."""

    def __init__(self, func: ast.FunctionDef) -> None:
        self.func = func
        self.parents: dict[ast.AST, ast.AST] = {
            child: node for node in ast.walk(func) for child in ast.iter_child_nodes(node)
        }
        self._loads: dict[str, list[ast.Name]] = {}
        self._bound: dict[str, list[tuple[int, ast.AST]]] = {}
        for arg in func.args.posonlyargs + func.args.args + func.args.kwonlyargs:
            self._bound.setdefault(arg.arg, []).append((func.lineno, func))
        for node in ast.walk(func):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                self._loads.setdefault(node.id, []).append(node)
            elif isinstance(node, ast.Name):
                self._bound.setdefault(node.id, []).append((self._binding_line(node), node))
                if isinstance(self.parents.get(node), ast.AugAssign):  # `x += y` reads x too
                    self._loads.setdefault(node.id, []).append(node)

    def statement_of(self, node: ast.AST) -> ast.AST:
        while not isinstance(node, ast.stmt) and node in self.parents:
            node = self.parents[node]
        return node

    def _binding_line(self, target: ast.Name) -> int:
        statement = self.statement_of(target)
        header = isinstance(statement, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith))
        return target.lineno if header else getattr(statement, "end_lineno", target.lineno)

    def _branches(self, node: ast.AST) -> dict[ast.AST, str]:
        """The ``if`` statements around ``node``, each with the branch ("body"/"orelse") it sits in."""
        found = {}
        while node in self.parents:
            parent = self.parents[node]
            if isinstance(parent, (ast.If, ast.IfExp)) and node is not parent.test:
                body = parent.body if isinstance(parent.body, list) else [parent.body]
                found[parent] = "body" if node in body else "orelse"
            node = parent
        return found

    def _exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        """``a`` and ``b`` sit in different branches of one ``if``: never both run."""
        branches = self._branches(b)
        return any(branches.get(test, side) != side for test, side in self._branches(a).items())

    def readers(self, name: str, bound_at: int, live: set[ast.AST] | None = None,
                binding: ast.AST | None = None) -> list[ast.Name]:
        """Loads of ``name`` that read its binding ending at line ``bound_at`` (the ``binding`` node, when
        given, also excludes loads and later bindings in the other branch of an ``if`` around it); only the
        ``live`` nodes (bindings and loads in branches the instance takes) when given."""

        def counts(node: ast.AST) -> bool:
            return (live is None or node in live) and (binding is None or not self._exclusive(binding, node))

        later = [line for line, node in self._bound.get(name, ()) if line > bound_at and counts(node)]
        until = min(later) if later else float("inf")
        return [load for load in self._loads.get(name, ()) if bound_at < load.lineno <= until and counts(load)]

    def argument_readers(self, index: int | None, keyword_name: str | None = None,
                         live: set[ast.AST] | None = None) -> list[ast.Name]:
        """Loads of the ``index``-th argument after ``self`` (or of the one named ``keyword_name``)."""
        names = [a.arg for a in self.func.args.posonlyargs + self.func.args.args][1:]
        if keyword_name is None and (index is None or index >= len(names)):
            return []
        return self.readers(keyword_name or names[index], self.func.lineno, live)


@lru_cache(maxsize=2048)
def function_flow(func: ast.FunctionDef) -> FunctionFlow:
    return FunctionFlow(func)


class _Unknown(Exception):
    """An expression depends on something only known at run time."""


_PLAIN = (bool, int, float, str, type(None))


def static_truth(test: ast.expr, attribute: Callable[[str], object]) -> bool | None:
    """The truth of an ``if`` test built only from instance attributes and constants (``self.bn is None``,
    ``self.stride == 1 and self.use_res``), or None when it depends on run-time values. ``attribute``
    returns ``self.<name>``'s value or raises LookupError when it is not known statically."""

    def value(node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple):
            return tuple(value(e) for e in node.elts)
        attr = self_attribute(node)
        if attr is not None:
            try:
                return attribute(attr)
            except LookupError:
                raise _Unknown from None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not truth(node.operand)
        if isinstance(node, ast.BoolOp):
            results = [truth(v) for v in node.values]
            return all(results) if isinstance(node.op, ast.And) else any(results)
        if isinstance(node, ast.Compare):
            left = value(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                right = value(right_node)
                if not _compare(op, left, right):
                    return False
                left = right
            return True
        raise _Unknown

    def truth(node: ast.expr) -> bool:
        held = value(node)
        if isinstance(held, (*_PLAIN, tuple)):
            return bool(held)
        if hasattr(held, "construct") and not hasattr(held, "__len__"):
            return True  # a cell
        raise _Unknown

    try:
        return truth(test)
    except _Unknown:
        return None


def _compare(op: ast.cmpop, left: object, right: object) -> bool:
    if isinstance(op, ast.Is):
        return left is right
    if isinstance(op, ast.IsNot):
        return left is not right
    if not isinstance(left, (*_PLAIN, tuple)) or not isinstance(right, (*_PLAIN, tuple)):
        raise _Unknown
    try:
        return {ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right, ast.Lt: lambda: left < right,
                ast.LtE: lambda: left <= right, ast.Gt: lambda: left > right, ast.GtE: lambda: left >= right,
                ast.In: lambda: left in right, ast.NotIn: lambda: left not in right}[type(op)]()
    except (KeyError, TypeError):
        raise _Unknown from None


Decide = Callable[[ast.expr], "bool | None"]
"""Truth of an ``if`` test for one instance (``static_truth`` bound to its attributes), None when unknown."""


def _always_leaves(statement: ast.stmt, decide: Decide) -> bool:
    """``statement`` ends the function on every path this instance takes: a ``return``/``raise``, or an ``if``
    whose taken branches (both when the test is not known) all end so."""
    if isinstance(statement, (ast.Return, ast.Raise)):
        return True
    if isinstance(statement, ast.If):
        truth = decide(statement.test)
        branches = [b for b, keep in ((statement.body, truth is not False), (statement.orelse, truth is not True))
                    if keep]
        return all(b and _always_leaves(b[-1], decide) for b in branches)
    return False


def _taken_statements(body: list[ast.stmt], decide: Decide) -> list[ast.stmt]:
    """The statements of a block up to the first that always leaves the function: what follows
    ``if self.reduction == "mean": return loss.mean()`` never runs for an instance whose reduction is "mean"."""
    for index, statement in enumerate(body):
        if _always_leaves(statement, decide):
            return body[:index + 1]
    return body


def live_nodes(func: ast.FunctionDef, decide: Decide) -> set[ast.AST]:
    """The nodes of ``func`` outside branches ``decide`` shows are never taken by this instance, and outside
    the statements after an ``if`` whose taken branch returns (the graph compiler folds both away)."""
    live: set[ast.AST] = set()
    pending: list[ast.AST] = [func]
    while pending:
        node = pending.pop()
        live.add(node)
        if isinstance(node, (ast.If, ast.IfExp)):
            truth = decide(node.test)
            if truth is not None:
                branch = node.body if truth else node.orelse
                pending.append(node.test)
                pending += _taken_statements(branch, decide) if isinstance(branch, list) else [branch]
                continue
        for name, value in ast.iter_fields(node):
            if isinstance(value, list) and value and all(isinstance(v, ast.stmt) for v in value):
                pending += _taken_statements(value, decide)
            elif isinstance(value, list):
                pending += [v for v in value if isinstance(v, ast.AST)]
            elif isinstance(value, ast.AST):
                pending.append(value)
    return live
