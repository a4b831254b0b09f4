"""The methods of a cell class, parsed once per class (object mode: the live class and its user-defined bases)
or per file (source mode), with the names of the file bound to what its imports say; the checks read them without
executing anything."""
from __future__ import annotations

import ast
import copy
import inspect
import linecache
import textwrap
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

from mindspore_doctor.library import is_mindspore_class
from mindspore_doctor.static.ast_nodes import callee_identifier, literal_constant, self_attribute
from mindspore_doctor.static.names import bind_imports, bind_names, file_imports


class ConstructUnavailable(Exception):
    """The construct of a cell class cannot be read or analysed; the message says why."""


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
            constant = literal_constant(value)
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
        bind_names(tree, file_imports("".join(linecache.getlines(file))) if file else {})
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
