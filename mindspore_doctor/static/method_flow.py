"""Where values go inside one method (local names, parents, readers of a binding), and which branches one
instance takes (``if`` tests decided from its attributes): the data flow the construct checks share."""
from __future__ import annotations

import ast
from functools import lru_cache
from typing import Callable

from mindspore_doctor.static.ast_nodes import self_attribute


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


PLAIN = (bool, int, float, str, type(None))
"""Plain values: what an ``if`` test compares, what an instance holds besides cells, parameters and tensors."""


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
        if isinstance(held, (*PLAIN, tuple)):
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
    if not isinstance(left, (*PLAIN, tuple)) or not isinstance(right, (*PLAIN, tuple)):
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
