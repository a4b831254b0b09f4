"""Source locations of cells, and inline suppressions.

A static finding names a cell path (``head.dropout``) or a parameter; the user
wants the line that BUILT that cell (``self.dropout = nn.Dropout(p=0.9)``), so
that an editor can jump to it and a ``# msdoctor: ignore[MSD104]`` comment on
that line silences it. Lines come from the AST of the parent cell's class
(parsed once per file), never from executing anything.

Suppression comments:
``# msdoctor: ignore`` (every code), ``# msdoctor: ignore[MSD104]``,
``# msdoctor: ignore[MSD104, MSD110]`` (codes, prefixes such as ``MSD1`` or
slugs), anywhere on the statement the finding points at.
"""
from __future__ import annotations

import ast
import io
import inspect
import os
import re
import sysconfig
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from mindspore_doctor.checks import attempt
from mindspore_doctor.findings import Finding
from mindspore_doctor.static.context import LOSS_PATH

_IGNORE = re.compile(r"#\s*msdoctor:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)
_ALL_CODES = frozenset({"*"})
_LIBRARY_DIRS = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
)


# --- per-file caches ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Span:
    """Where something is written: file and 1-based first line."""

    file: str
    line: int


@dataclass
class _ParsedFile:
    tree: ast.Module
    classes: dict[str, ast.ClassDef]
    """Qualified name (``Outer.Inner``, ``build.<locals>.Net``) -> class node."""
    statement_spans: dict[int, tuple[int, int]]
    """Line -> lines of the innermost statement on it (headers only for compound statements)."""
    suppressions: dict[int, frozenset[str]]
    """Line -> selectors of its ``# msdoctor: ignore[...]`` comment (``{"*"}``: all codes)."""


def _file_key(path: str) -> tuple[str, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (path, stat.st_mtime_ns, stat.st_size)


def _parsed(path: str) -> _ParsedFile | None:
    key = _file_key(path)
    return _parse_file(key) if key else None


@lru_cache(maxsize=256)
def _parse_file(key: tuple[str, int, int]) -> _ParsedFile | None:
    try:
        source = Path(key[0]).read_text(encoding="utf-8")
        tree = ast.parse(source, filename=key[0])
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    return _ParsedFile(tree, _index_classes(tree), _statement_spans(tree), _suppression_comments(source))


def _index_classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    classes: dict[str, ast.ClassDef] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                classes[prefix + child.name] = child
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}{child.name}.<locals>.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return classes


def _header_end(node: ast.stmt) -> int:
    """Last line of a statement, or of its header when it has a body (``class X(...):``)."""
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
        return max(node.lineno, body[0].lineno - 1)
    return node.end_lineno or node.lineno


def _statement_spans(tree: ast.Module) -> dict[int, tuple[int, int]]:
    spans: dict[int, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        span = (first, _header_end(node))
        for line in range(node.lineno, span[1] + 1):
            old = spans.get(line)
            if old is None or span[1] - span[0] < old[1] - old[0]:
                spans[line] = span
    return spans


def _suppression_comments(source: str) -> dict[int, frozenset[str]]:
    found: dict[int, frozenset[str]] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.COMMENT:
                continue
            match = _IGNORE.search(tok.string)
            if match:
                listed = match.group(1)
                codes = frozenset(c.strip().upper() for c in (listed or "").split(",") if c.strip())
                found[tok.start[0]] = codes if listed is not None else _ALL_CODES
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


# --- suppressions -------------------------------------------------------------------------


def _matches(finding: Finding, selectors: frozenset[str]) -> bool:
    if selectors is _ALL_CODES or "*" in selectors:
        return True
    return any(finding.code.startswith(s) or s == finding.rule.upper() for s in selectors)


def is_suppressed(finding: Finding) -> bool:
    """True when the statement at the finding's ``file``/``line`` carries a matching ignore comment."""
    file, line = finding.location.get("file"), finding.location.get("line")
    if not file or not isinstance(line, int):
        return False
    parsed = _parsed(str(file))
    if parsed is None:
        return False
    first, last = parsed.statement_spans.get(line, (line, line))
    return any(_matches(finding, parsed.suppressions[n]) for n in range(first, last + 1) if n in parsed.suppressions)


def drop_suppressed(findings: list[Finding]) -> list[Finding]:
    """Remove every finding whose source line says ``# msdoctor: ignore[...]`` for its code."""
    return [f for f in findings if not is_suppressed(f)]


# --- where was a cell built? ---------------------------------------------------------------


def _is_library(path: str) -> bool:
    return str(Path(path).resolve()).startswith(_LIBRARY_DIRS)


def _class_node(cls: type) -> tuple[str, ast.ClassDef] | None:
    try:
        file = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        return None
    if not file or _is_library(file):
        return None
    parsed = _parsed(file)
    node = parsed.classes.get(cls.__qualname__) if parsed else None
    return (file, node) if node else None


def _self_targets(target: ast.expr, value: ast.expr | None) -> list[tuple[str, ast.expr | None]]:
    """``self.x = v`` -> [("x", v)]; ``self.a, self.b = u, v`` -> pairs (value None when unpacked)."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return [(target.attr, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) else None
        return [pair for i, t in enumerate(target.elts) for pair in _self_targets(t, values[i] if values else None)]
    return []


@lru_cache(maxsize=1024)
def _attribute_builders(cls: type) -> dict[str, tuple[str, ast.stmt, ast.expr | None]]:
    """Attribute name -> (file, assigning statement, assigned expression) over the class and its user bases."""
    found: dict[str, tuple[str, ast.stmt, ast.expr | None]] = {}
    for klass in reversed(cls.__mro__):
        located = _class_node(klass)
        if located is None:
            continue
        file, class_node = located
        methods = [n for n in class_node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        methods.sort(key=lambda m: m.name != "__init__")  # __init__ wins over helper methods
        own: dict[str, tuple[str, ast.stmt, ast.expr | None]] = {}
        for method in methods:
            assigns = [n for n in ast.walk(method) if isinstance(n, (ast.Assign, ast.AnnAssign))]
            for stmt in sorted(assigns, key=lambda n: n.lineno):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    for attr, value in _self_targets(target, stmt.value):
                        own.setdefault(attr, (file, stmt, value))
        found.update(own)  # a subclass's assignment overrides its base's
    return found


def _element(call: ast.expr | None, name: str) -> ast.expr | None:
    """The argument of a container call (SequentialCell, CellList, CellDict) that built child ``name``."""
    if not isinstance(call, ast.Call):
        return None
    args = call.args
    if len(args) == 1 and _is_collection(args[0]):
        items = _collection_items(args[0])
    elif len(args) == 1 and not isinstance(args[0], ast.Call):
        items = []  # SequentialCell(layers): the elements are not written here
    else:
        items = _indexed(args)
    items += [(k.arg, k.value) for k in call.keywords if k.arg]
    return dict(items).get(name)


def _is_collection(node: ast.expr) -> bool:
    if isinstance(node, (ast.List, ast.Tuple, ast.Dict)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and (
        getattr(node.func, "id", None) or getattr(node.func, "attr", None)
    ) in ("OrderedDict", "dict")


def _indexed(elements: list[ast.expr]) -> list[tuple[str, ast.expr]]:
    items = []
    for index, node in enumerate(elements):
        if isinstance(node, ast.Starred):
            break  # later indices are unknown
        items.append((str(index), node))
    return items


def _collection_items(node: ast.expr) -> list[tuple[str, ast.expr]]:
    """``[a, b]`` -> ("0", a), ("1", b); ``{"k": a}`` and ``OrderedDict([("k", a)])`` -> ("k", a)."""
    if isinstance(node, ast.Call):
        if not node.args:
            return []
        node = node.args[0]
    if isinstance(node, ast.Dict):
        return [(str(k.value), v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)]
    if not isinstance(node, (ast.List, ast.Tuple)):
        return []
    pairs = [
        (str(e.elts[0].value), e.elts[1])
        for e in node.elts
        if isinstance(e, ast.Tuple) and len(e.elts) == 2 and isinstance(e.elts[0], ast.Constant)
    ]
    return pairs if node.elts and len(pairs) == len(node.elts) else _indexed(node.elts)


class CellLocator:
    """Finds, for a cell path of one network, the statement (or container element) that built it."""

    def __init__(self, cells: dict[str, Any], roots: frozenset[str] = frozenset({""})):
        self.cells = cells
        self.roots = roots
        """Paths of cells nothing in ``cells`` builds (the network; a loss passed beside it)."""
        self._cache: dict[str, tuple[_Span, ast.expr | None] | None] = {}
        self._param_owner: dict[str, tuple[str, str]] | None = None

    def cell(self, path: str) -> _Span | None:
        found = self._locate(path)
        return found[0] if found else None

    def parameter(self, name: str) -> _Span | None:
        """The ``self.w = Parameter(...)`` line when written in user code, else the owning cell's line."""
        owner = self._owners().get(name)
        if owner is None:
            return None
        cell_path, attr = owner
        builder = _attribute_builders(type(self.cells[cell_path])).get(attr)
        if builder:
            file, stmt, _ = builder
            return _Span(file, stmt.lineno)
        return self.cell(cell_path)

    def _owners(self) -> dict[str, tuple[str, str]]:
        if self._param_owner is None:
            self._param_owner = {}
            for path, cell in self.cells.items():
                for attr, param in getattr(cell, "_params", {}).items():
                    self._param_owner.setdefault(param.name, (path, attr))
        return self._param_owner

    def _locate(self, path: str) -> tuple[_Span, ast.expr | None] | None:
        if path not in self._cache:
            self._cache[path] = self._compute(path) if path in self.cells else None
        return self._cache[path]

    def _compute(self, path: str) -> tuple[_Span, ast.expr | None] | None:
        parent_path, _, name = path.rpartition(".")
        root = path in self.roots
        parent = self.cells.get(parent_path) if not root else None
        builder = _attribute_builders(type(parent)).get(name) if parent is not None else None
        if builder:
            file, stmt, value = builder
            return _Span(file, stmt.lineno), value
        # The parent is a library cell (SequentialCell, CellList, TransformerEncoder...):
        # point into the expression that built the parent, or at the parent itself.
        parent_found = self._locate(parent_path) if not root else None
        if parent_found is not None:
            parent_span, parent_expr = parent_found
            element = _element(parent_expr, name)
            if element is None:
                return parent_span, None
            return _Span(parent_span.file, element.lineno), element
        # The root, or a network inside a library wrapper (WithLossCell._backbone): its class.
        located = _class_node(type(self.cells[path]))
        if located is None:
            return None
        file, node = located
        return _Span(file, node.lineno), None


def _display_path(file: str) -> str:
    """Relative to the working directory when inside it (as ruff prints), else absolute."""
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return file
    return file if rel.startswith("..") else rel


def resolve_sources(findings: list[Finding], ctx: Any) -> list[Finding]:
    """Attach ``file``/``line`` of the building statement to cell/parameter findings, then apply suppressions.

    A bug here must not cost the user the findings: they come back unlocated, with an MSD001.
    """
    def locate() -> list[Finding]:
        _attach_locations(findings, CellLocator(ctx.construct_cells, frozenset({"", LOSS_PATH})))
        return drop_suppressed(findings)

    kept, failure = attempt("source-locations", (), locate)
    if failure is not None:
        return findings + [failure]
    for finding in kept:
        if finding.location.get("file"):
            finding.location["file"] = _display_path(str(finding.location["file"]))
    return kept


def _attach_locations(findings: list[Finding], locator: CellLocator) -> None:
    for finding in findings:
        loc = finding.location
        if loc.get("file"):
            continue
        span = locator.parameter(str(loc["parameter"])) if "parameter" in loc else None
        if span is None and "cell" in loc:
            span = locator.cell(str(loc["cell"]))
        if span is not None:
            loc["file"], loc["line"] = span.file, span.line
