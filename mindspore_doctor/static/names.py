"""What a name in a cell's code refers to: the import that binds it (``F`` ->
``mindspore.mint.nn.functional``), and what ``self.<attr>`` holds. Object mode passes a ``Resolver`` that maps
``self.<attr>`` to the type name of the real child cell or primitive; source mode resolves it from the
``self.<attr> = Call(...)`` lines of ``__init__``."""
from __future__ import annotations

import ast
from functools import lru_cache
from typing import Callable

from mindspore_doctor.static.ast_nodes import callee_identifier, is_number, literal_number, norm_name, self_attribute


Resolver = Callable[[str], "str | None"]
"""Maps ``self.<attr>`` to the type name of what it holds (``"ReduceSum"``), or None."""
AttributeValue = Callable[[str], object]
"""Maps ``self.<attr>`` to the plain value one instance holds (``self.p`` -> 0.9), or None when unknown."""


MODULE_NAMES = frozenset({"ops", "F", "P", "mint", "ms", "mindspore", "nn", "np", "numpy", "C", "msops", "self"})


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
def file_imports(text: str) -> dict[str, str]:
    """``_imported_names`` of a file's text, parsed once per file (many classes share it); {} when it does not
    parse."""
    try:
        return _imported_names(ast.parse(text))
    except (SyntaxError, ValueError):
        return {}


def bind_names(tree: ast.AST, names: dict[str, str]) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            setattr(node, _IMPORTED, names[node.id])


def bind_imports(tree: ast.Module) -> None:
    """Mark the names of a parsed file with what its imports bind them to: the spelling alone does not say
    that ``F.softmax(x, 1)`` is a module function (not a method of ``F``) nor that ``nn.Dropout(0.9)`` after
    ``from mindspore.mint import nn`` drops 90 %."""
    bind_names(tree, _imported_names(tree))


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


# --- what a call in construct calls ------------------------------------------------------


def is_receiver_call(call: ast.Call) -> bool:
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
    if is_receiver_call(call):
        return call.func.value  # type: ignore[attr-defined]
    return call.args[0] if call.args else None


def number(node: ast.AST | None, attribute: AttributeValue | None = None) -> float | int | tuple | None:
    """A literal number (see ``literal_number``), or ``self.<attr>`` when ``attribute`` knows it holds one:
    a rate or axis kept in an attribute (``ops.dropout(h, p=self.recurrent_dropout)``)."""
    value = literal_number(node)
    attr = self_attribute(node) if node is not None and attribute is not None else None
    if value is None and attr is not None:
        held = attribute(attr)  # type: ignore[misc]
        held = tuple(held) if isinstance(held, list) else held
        value = held if is_number(held) else None
    return value
