"""Small readers of Python AST nodes, with no knowledge of cells: a call's callee and arguments, ``self.<attr>``,
literal numbers, one spelling for an op name."""
from __future__ import annotations

import ast
from typing import Iterator


def norm_name(name: str) -> str:
    """``reduce_sum`` / ``ReduceSum`` -> ``reducesum``: one spelling for functional and primitive ops."""
    return name.replace("_", "").lower() if not name.startswith("__") else name


def expr_text(node: ast.AST) -> str:
    return ast.unparse(node)


def literal_constant(node: ast.AST | None) -> object:
    """A literal number, bool or tuple of ints, else None."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, bool) or is_number(value) else None


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


def literal_number(node: ast.AST | None) -> float | int | tuple | None:
    """A literal int/float/tuple of ints (``-1`` included), else None."""
    value = literal_constant(node)
    return value if is_number(value) else None


def is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or (isinstance(value, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value))


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
