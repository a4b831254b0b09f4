"""Glue between live cells and the AST analysis of their classes (object mode), and
between a parsed file and the same analysis (source mode).

MindSpore's own cells are trusted and not parsed; a user class whose construct
cannot be read yields one MSD002 per check and class, and the check goes on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.findings import Finding
from mindspore_doctor.library import is_mindspore_class
from mindspore_doctor.static.class_source import ClassSource, ConstructUnavailable, class_source, module_classes
from mindspore_doctor.static.method_flow import PLAIN, Decide, static_truth
from mindspore_doctor.static.names import AttributeValue, Resolver


def is_library_object(obj: Any) -> bool:
    """MindSpore's own cells and primitives, and user subclasses that keep MindSpore's
    ``construct`` (their forward pass is trusted, not linted)."""
    owner = next((k for k in type(obj).__mro__ if "construct" in k.__dict__), type(obj))
    return is_mindspore_class(owner)


_MINT_RENAMED = {"Linear": "Dense"}
"""``mindspore.mint`` cells named unlike the ``nn`` cell they match, beyond the ``Ext`` suffix."""


def library_kind(cls: type) -> str:
    """The ``nn`` name of a MindSpore class, which the checks' tables use: ``mindspore.mint`` cells reuse nn's names
    with an ``Ext`` suffix (``mint.nn.Dropout`` is ``DropoutExt``, ``mint.nn.LayerNorm`` ``LayerNormExt``), and
    ``mint.nn.Linear`` is ``nn.Dense``. Other classes keep their name."""
    name = cls.__name__
    if not is_mindspore_class(cls):
        return name
    return _MINT_RENAMED.get(name, name[:-3] if name.endswith("Ext") else name)


def object_resolver(cell: Any) -> Resolver:
    """``self.<attr>`` -> type name (``library_kind``) of the child cell / primitive the instance really holds."""

    def resolve(attr: str) -> str | None:
        held = cell.__dict__.get("_cells", {}).get(attr) or cell.__dict__.get("_primitives", {}).get(attr)
        if held is None:
            held = cell.__dict__.get(attr)
        return library_kind(type(held)) if held is not None and not isinstance(held, (int, float, str, bool)) else None

    return resolve


def instance_attribute(cell: Any, name: str) -> object:
    """``self.<name>`` of this instance: a child cell, parameter, primitive or plain value (its own, or a
    plain class attribute). ``self.training`` is left unknown: it changes with the mode. LookupError when
    not known."""
    if name != "training":
        for store in ("_cells", "_params", "_primitives"):
            held = cell.__dict__.get(store, {})
            if name in held:
                return held[name]
        if name in cell.__dict__:
            return cell.__dict__[name]
        value = getattr(type(cell), name, None)
        if isinstance(value, PLAIN) and hasattr(type(cell), name):
            return value
    raise LookupError(name)


def instance_truth(cell: Any) -> Decide:
    """``static_truth`` over this instance's attributes (``if self.downsample is not None``,
    ``if self.use_res_connect``)."""
    return lambda test: static_truth(test, lambda name: instance_attribute(cell, name))


def attribute_values(cell: Any) -> AttributeValue:
    """``self.<attr>`` -> this instance's plain value (a rate, an axis), None when it holds none."""

    def value(name: str) -> object:
        try:
            held = instance_attribute(cell, name)
        except LookupError:
            return None
        return held if isinstance(held, (*PLAIN, tuple, list)) else None

    return value


def source_attributes(tree: Any, file: str) -> Callable[[Any], AttributeValue | None]:
    """For a call written in a cell class of the file, ``self.<attr>`` -> the literal its ``__init__`` binds
    (innermost class; see ``ClassSource.attribute_constants``); None outside cell classes."""
    spans = sorted(((s.line, s.end_line, s.attribute_constants()) for s in module_classes(tree, file)),
                   key=lambda span: span[1] - span[0])

    def lookup(call: Any) -> AttributeValue | None:
        return next((values.get for start, end, values in spans if start <= call.lineno <= end), None)

    return lookup


def source_resolver(source: ClassSource) -> Resolver:
    """``self.<attr>`` -> callee of its ``self.<attr> = Callee(...)`` line in ``__init__``."""
    assignments = source.init_assignments()
    return lambda attr: assignments[attr].callee if attr in assignments else None


@dataclass(frozen=True)
class AnalysedCell:
    path: str
    cell: Any
    source: ClassSource
    instances: tuple[str, ...]
    """Every cell path holding an instance of this class (the analysis is per class)."""


def skipped(check: str, codes: tuple[str, ...], why: str, location: dict[str, Any]) -> Finding:
    return make_finding(
        "MSD002",
        f"check `{check}` ({', '.join(codes)}) skipped for {why}",
        location={"check": check, **location},
        evidence={"codes": list(codes)},
    )


def user_classes(cells: dict[str, Any], check: str, codes: tuple[str, ...]) -> tuple[list[AnalysedCell], list[Finding]]:
    """One entry per user-defined cell class in ``cells`` (path -> Cell), first instance first."""
    by_class: dict[type, list[str]] = {}
    for path, cell in cells.items():
        if not is_library_object(cell):
            by_class.setdefault(type(cell), []).append(path)
    analysed, skips = [], []
    for cls, paths in by_class.items():
        try:
            source = class_source(cls)
        except ConstructUnavailable as why:
            skips.append(skipped(check, codes, f"`{paths[0] or '<root>'}`: {why}", {"cell": paths[0]}))
            continue
        analysed.append(AnalysedCell(paths[0], cells[paths[0]], source, tuple(paths)))
    return analysed, skips


def source_classes(tree: Any, file: str) -> Iterator[tuple[ClassSource, Resolver]]:
    for source in module_classes(tree, file):
        yield source, source_resolver(source)


def init_labels(tree: Any, file: str) -> dict[int, str]:
    """Line -> ``Class.attr`` for ``self.attr = Call(...)`` lines in ``__init__`` (names for source findings)."""
    return {
        assignment.line: f"{source.name}.{attr}"
        for source in module_classes(tree, file)
        for attr, assignment in source.init_assignments().items()
    }


def child_path(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name

