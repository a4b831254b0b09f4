"""How the methods ``construct`` reaches use each ``self.<attr>``: read at all (MSD110), called how often per
forward pass (MSD101), called with the output dropped, held in a local name, and where a child is called (MSD109)."""
from __future__ import annotations

import ast
from dataclasses import dataclass

from mindspore_doctor.static.ast_nodes import callee_identifier, expr_text, self_attribute
from mindspore_doctor.static.class_source import ClassSource, reachable_methods
from mindspore_doctor.static.method_flow import Decide, function_flow, live_nodes


DYNAMIC_SELF_ACCESS = frozenset(
    {
        "__dict__", "_cells", "_params", "cells", "name_cells", "cells_and_names", "get_parameters",
        "trainable_params", "untrainable_params", "parameters_and_names", "parameters_dict",
    }
)


# --- MSD110: which self attributes the path from construct uses ----------------------


@dataclass(frozen=True)
class AttributeUse:
    names: frozenset[str]
    dynamic: str | None
    """Why the use cannot be known statically (``getattr(self, ...)``...), else None."""


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
