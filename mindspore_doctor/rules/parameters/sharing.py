"""MSD101: one Parameter used at two or more call sites of a forward pass, told apart by what the code shows of
the intent (tied weights, one block called at several sites, a copy meant and an assignment written).

A pure function of the plain ``ParamSignal`` of ``static/parameters.py`` and ``DoctorConfig``.
"""
from __future__ import annotations

import fnmatch
import re
from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding, Severity
from mindspore_doctor.rule import Option, Rule, WARNING
from mindspore_doctor.rules.parameters.wording import cell_text
from mindspore_doctor.static.signals import ParamSignal

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _allowed(name: str, paths: tuple[str, ...], patterns: tuple[str, ...]) -> bool:
    """A pattern matches the parameter name, a cell path, or a cell-path prefix (glob allowed)."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(name, pattern):
            return True
        for path in paths:
            if fnmatch.fnmatchcase(path, pattern) or path == pattern or path.startswith(pattern + "."):
                return True
    return False


_ENCODER_WORDS = frozenset({"enc", "encoder", "encoders"})
_DECODER_WORDS = frozenset({"dec", "decoder", "decoders"})


def _words(path: str) -> set[str]:
    return set(re.split(r"[._\d]+", path.lower()))


def _mirrored(cells: tuple[str, ...]) -> bool:
    """The holders sit on the two sides of an encoder/decoder pair (``encoder.fc2`` and ``decoder.fc1``): the
    mirror tying of tied autoencoders and of sequence-to-sequence models."""
    return any(_words(a) & _ENCODER_WORDS and _words(b) & _DECODER_WORDS for a in cells for b in cells)


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _sharing(p: ParamSignal) -> tuple[str, str] | None:
    """How a Parameter used at two or more call sites of a forward pass is shared: (kind, why), None when it is
    used once (an alias: a cell registered under two names, called once).

    Kinds, by what the code shows of the intent:

    - "tied" (info): distinct cells reuse one matrix in a recognisable tying pattern: an embedding table used by
      another layer (input/output tying, shared source/target vocabularies), cells of different kinds or settings
      (a transposed reuse, one kernel at several dilations), the two sides of an encoder/decoder mirror;
    - "copied" (warning): distinct cells of one kind with equal settings, two or more of them running: separate
      copies of a layer that compute with one matrix (``self.block3.weight = self.block2.weight`` where a copy of
      the values was meant);
    - "design" (info): one cell handed to several distinct cells, or bound to several names in one statement;
    - "reused" (info): one cell, registered once, called at several sites (a shared block applied at several
      places, a Siamese branch; one call in a loop, ALBERT-style, is one site);
    - "repeated" (warning): one cell registered twice by the same parent (``[block] * 3``, ``self.fc2 = self.fc1``),
      or call sites that could not be counted.
    """
    uses = p.uses if p.uses is not None else len(p.paths)
    if uses < 2:
        return None
    if len(p.owner_types) > 1:
        embedding = next((t for t in p.owner_types if "Embedding" in t), None)
        if embedding is not None:
            return "tied", f"an {embedding} table reused by another layer"
        if _mirrored(p.owner_cells):
            return "tied", "the encoder/decoder mirror"
        if not p.owners_alike:
            return "tied", "one matrix reused by layers of different kinds or settings"
        if len(p.owner_cells) > 1 and (p.owners_running is None or p.owners_running > 1):
            return "copied", "separate layers of one kind and settings"
    if p.repeated or p.uses is None:
        return "repeated", "one cell registered more than once"
    if len(p.paths) > 1:
        return "design", "one cell handed to several cells or bound to several names in one statement"
    return "reused", "one cell called at several sites"


def _sharing_message(p: ParamSignal, kind: str, why: str, uses: int) -> str:
    listed = ", ".join(f"`{x}`" if x else "<root>" for x in p.paths)
    if kind == "tied":
        return (f"Parameter `{p.name}` ({_shape(p.shape)}) is tied weights, held by "
                f"{' and '.join(sorted(set(p.owner_types)))} ({listed}): {why}. Intended weight tying; every use "
                "updates it.")
    if kind == "copied":
        cells, count = _listing([cell_text(c) for c in p.owner_cells]), len(p.owner_cells)
        running = ("both" if count == 2 else f"all {count}") if p.owners_running in (None, count) \
            else f"{p.owners_running} of them"
        return (f"{cells}, {count} separate {p.owner_types[0]} layers with the same settings, hold one "
                f"Parameter `{p.name}` ({_shape(p.shape)}), and {running} run in the forward pass: they compute with "
                f"one matrix and it gets the sum of their gradients. Copy meant, assign written? (`{_assignment(p)}` "
                "shares the object; it does not copy the values.)")
    if kind == "design":
        return (f"Parameter `{p.name}` is shared by design: its cell is handed to several cells (or bound to "
                f"several names in one statement) and runs {uses} times per forward pass ({listed}); every "
                "use updates the same weights.")
    if kind == "reused":
        return (f"Parameter `{p.name}` belongs to {cell_text(p.cell)}, one cell called at {uses} sites of the forward "
                "pass (a shared block applied repeatedly, a Siamese branch); every call updates the same weights.")
    return (f"Parameter `{p.name}` is one object used at {uses} call sites of the forward pass ({listed}). "
            "Every use updates the same weights.")


def _attribute(cell: str, key: str) -> str:
    """``layers.1`` + ``weight`` -> ``self.layers[1].weight``: the parameter as code in the root cell reaches it."""
    parts = [f"[{part}]" if part.isdigit() else f".{part}" for part in [*cell.split("."), key] if part]
    return "self" + "".join(parts)


def _assignment(p: ParamSignal) -> str:
    """The statement that shares a Parameter between two cells, as the user wrote it."""
    first, second = p.owner_cells[0], p.owner_cells[1]
    return f"{_attribute(second, p.key)} = {_attribute(first, p.key)}"


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _sharing_fix(p: ParamSignal, kind: str) -> str:
    declare = f"if it is intended, declare it with `allow_shared=[\"{p.name}\"]`."
    if kind == "copied":
        first, second = p.owner_cells[0], p.owner_cells[1]
        return (f"To start `{second}` from `{first}`'s values, copy them: "
                f"`{_attribute(second, p.key)}.set_data(ms.Tensor({_attribute(first, p.key)}.asnumpy()))`; to share "
                f"a layer on purpose, call one cell at every site (ALBERT-style) or {declare}")
    return ("If the sharing is unintended, build a separate cell for each use (a new instance, not the same object "
            f"or `[cell] * n`); {declare}")


ALLOW_SHARED = Option(
    "allow_shared", (),
    "Parameter names (or cell-path prefixes) whose sharing is intentional (MSD101).",
    type="tuple[str, ...]",
)
SHARED_PARAMETER = Rule(
    "MSD101", "shared-parameter", WARNING,
    "one Parameter reachable under several cell paths",
    options=(ALLOW_SHARED,),
)


@SHARED_PARAMETER.judge
def shared_parameter(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD101: one Parameter used at two or more call sites of a forward pass.

    Decided by what runs: a cell registered under two names but called once is an alias. Recognisable tying
    (embedding/output, transposed reuse, encoder/decoder mirror), one cell deliberately handed to several cells
    and one cell called at several sites are reported at info; one object registered twice by a parent, and
    separate same-kind, same-settings layers holding one matrix (an assignment where a copy was meant) warn.
    """
    found = []
    for p in params:
        sharing = _sharing(p)
        if sharing is None or _allowed(p.name, p.paths, config.allow_shared):
            continue
        kind, why = sharing
        uses = p.uses if p.uses is not None else len(p.paths)
        found.append(
            SHARED_PARAMETER.finding(
                _sharing_message(p, kind, why, uses),
                location=p.location,
                evidence={"paths": list(p.paths), "shape": list(p.shape), "uses": uses, "sharing": kind,
                          "why": why, "owners": list(p.owner_types), "cells": list(p.owner_cells)},
                suggestion=_sharing_fix(p, kind),
                severity=None if kind in ("repeated", "copied") else Severity.INFO,
            )
        )
    return found
