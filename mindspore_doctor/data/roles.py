"""Which dataset columns feed the network and which one is the label."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from mindspore_doctor.cells import unwrap
from mindspore_doctor.config import DoctorConfig

LABEL_NAMES = ("label", "labels", "target", "targets", "y", "class", "classes", "class_id")


class RolesUnknown(Exception):
    """The configured column roles do not match the dataset; the message says why."""


@dataclass(frozen=True)
class ColumnRoles:
    inputs: tuple[str, ...]
    label: str | None


def construct_arity(network: Any) -> int | None:
    """Number of positional inputs of ``construct`` (None: unknown or ``*args``)."""
    try:
        params = inspect.signature(unwrap(network).backbone.construct).parameters.values()
    except (TypeError, ValueError, AttributeError):
        return None
    kinds = [p.kind for p in params]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in params if p.kind in positional and p.default is inspect.Parameter.empty)


def assign_roles(columns: list[str], network: Any, config: DoctorConfig) -> ColumnRoles:
    """Options first; then Model.train's convention (network(*columns[:-1]), loss(out, columns[-1]))."""
    unknown = [c for c in (*config.input_columns, config.label_column or "") if c and c not in columns]
    if unknown:
        raise RolesUnknown(f"column(s) {', '.join(map(repr, unknown))} not in the dataset's columns {columns}")
    label = config.label_column or _guess_label(columns, construct_arity(network) if network is not None else None)
    inputs = tuple(config.input_columns) or tuple(c for c in columns if c != label)
    return ColumnRoles(inputs, label)


def _guess_label(columns: list[str], arity: int | None) -> str | None:
    named = [c for c in columns if c.lower() in LABEL_NAMES]
    if arity is not None and arity >= len(columns):
        return named[0] if named else None  # the network consumes every column: a label only by name
    if named:
        return named[0]
    return columns[-1] if len(columns) >= 2 else None
