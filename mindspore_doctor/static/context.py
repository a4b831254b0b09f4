"""What a static check may look at: the built objects (``LintContext``) or a parsed file (``SourceContext``)."""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mindspore_doctor.config import DoctorConfig

LOSS_PATH = "loss_fn"
"""Path prefix of the cells of a loss passed beside the network (``lint(net, loss_fn=...)``, the Doctor)."""


@dataclass
class LintContext:
    """What a static check may look at. ``cells`` maps cell path -> Cell ("" is the root)."""

    network: Any
    loss_fn: Any = None
    optimizer: Any = None
    sample_inputs: tuple | None = None
    config: DoctorConfig = field(default_factory=DoctorConfig)
    train_network: Any = None
    """The train cell that will run ``network`` (the Doctor's ``cb.train_network``): loss scaling lives there."""
    memo: dict[str, Any] = field(default_factory=dict)
    """Measurements shared by several checks of one lint (computed once, on first use)."""

    @cached_property
    def cells(self) -> dict[str, Any]:
        return dict(self.network.cells_and_names())

    @cached_property
    def construct_cells(self) -> dict[str, Any]:
        """``cells`` and, for a loss passed beside the network, the loss's cells under ``LOSS_PATH``: the
        cells whose construct the layer and graph checks read (masked means and dropouts live in losses too)."""
        cells = dict(self.cells)
        loss = self.loss_fn
        if hasattr(loss, "cells_and_names") and not any(cell is loss for cell in cells.values()):
            cells.update((f"{LOSS_PATH}.{path}" if path else LOSS_PATH, cell) for path, cell in loss.cells_and_names())
        return cells


@dataclass
class SourceContext:
    """What a source-only check may look at (``--no-import``): a parsed file, nothing executed."""

    path: Path
    source: str
    tree: ast.Module
    config: DoctorConfig = field(default_factory=DoctorConfig)
