"""MSD105 (dynamic part; the rule is defined in ``rules/layers.py``): cells left in eval mode while the network
trains."""
from __future__ import annotations

from typing import Iterable

from mindspore_doctor.findings import Finding
from mindspore_doctor.rules.layers import TRAIN_MODE_MISUSE


def train_mode_off(cells_not_training: Iterable[str], step: int | None,
                   mode_effects: dict[str, str] | None = None) -> list[Finding]:
    """MSD105 (dynamic part): cells left in eval mode while the network trains. With ``mode_effects`` (cell path
    -> what eval mode changes in it, see ``static.layers.mode_dependent_cells``), only the cells whose behaviour
    depends on the mode count: a network without BatchNorm or active Dropout computes the same in both modes."""
    cells = [c for c in cells_not_training if mode_effects is None or c in mode_effects]
    if not cells:
        return []
    if mode_effects is None:
        effect = ": its BatchNorm uses moving statistics and Dropout does nothing."
    else:
        effect = ": " + "; ".join(f"`{c}` ({mode_effects[c]})" for c in cells[:3]) + \
            (f"; and {len(cells) - 3} more." if len(cells) > 3 else ".")
    return [
        TRAIN_MODE_MISUSE.finding(
            f"`{cells[0]}` is in eval mode (training=False) while the network trains"
            + (f", and {len(cells) - 1} more mode-dependent cell(s)" if len(cells) > 1 else "") + effect,
            location={"cell": cells[0]},
            step=step,
            evidence={"cells": cells, **({"effects": {c: mode_effects[c] for c in cells}} if mode_effects else {})},
            suggestion="Call `net.set_train()` before training (and again after any evaluation that called "
            "`set_train(False)`); to freeze BatchNorm statistics on purpose, set use_batch_statistics=False and say "
            "so in a suppression.",
        )
    ]
