"""How a Parameter is shared (MSD101): how often each cell runs per forward pass (the construct's call sites), a
cell registered twice by one parent, which distinct cells hold the Parameter and compute with it, and whether they
are copies of one layer (class and settings).
"""
from __future__ import annotations

from typing import Any

from mindspore_doctor.static.ast_cells import instance_truth, is_library_object
from mindspore_doctor.static.attribute_uses import attribute_uses, call_count
from mindspore_doctor.static.cell_walk import class_names
from mindspore_doctor.static.class_source import ConstructUnavailable, class_source


def calls_per_run(parent: Any, key: str, memo: dict[tuple[int, str], int]) -> int:
    """How often one run of ``parent`` runs its child ``key``: the construct's call sites for a user cell,
    once for MindSpore's containers and cells; a child it never mentions runs 0 times (an alias).
    A CellList/CellDict runs at most once: each indexed call or loop step runs one of its elements."""
    if is_library_object(parent):
        return 1
    memo_key = (id(parent), key)
    if memo_key not in memo:
        try:
            source = class_source(type(parent))
            uses = attribute_uses(source)
        except ConstructUnavailable:
            memo[memo_key] = 1
        else:
            calls = call_count(source, key, instance_truth(parent)) if not uses.dynamic else 1
            memo[memo_key] = calls or int(key in uses.names or bool(uses.dynamic))
    container = type(parent._cells[key]).__name__ in ("CellList", "CellDict")
    return min(memo[memo_key], 1) if container else memo[memo_key]


def registered_twice(parent: Any, cell: Any) -> bool:
    """``parent`` holds ``cell`` under two or more names, not bound together in one ``__init__`` statement."""
    keys = {key for key, child in parent._cells.items() if child is cell}
    if len(keys) < 2:
        return False
    try:
        together = [] if is_library_object(parent) else class_source(type(parent)).bound_together()
    except ConstructUnavailable:
        together = []
    return not any(keys <= attrs for attrs in together)


_STATE_ATTRIBUTES = frozenset({"training", "requires_grad", "is_top_cell", "arguments_key", "cell_type",
                               "grad_ops_label", "has_bprop", "mixed_precision_type"})
"""Public Cell attributes that record a state (mode, compilation), not what the layer computes."""


def cell_settings(cell: Any) -> tuple:
    """What a cell computes besides its parameters' values: its class, its public plain settings (channels,
    stride, dilation, padding, flags) and the classes of its child cells (a Dense's activation). Two cells with
    equal settings are copies of one layer: given one matrix, they compute the same function of it."""
    plain = (bool, int, float, str, tuple, type(None))
    values = tuple(sorted((k, repr(v)) for k, v in vars(cell).items()
                          if not k.startswith("_") and k not in _STATE_ATTRIBUTES and isinstance(v, plain)))
    children = tuple(sorted((k, type(c).__name__) for k, c in cell._cells.items() if c is not None))
    return type(cell), values, children


def fewest_wrappers(paths: dict[tuple[str, ...], str]) -> set[str]:
    """Of a Parameter's registration paths (alias -> path), those crossing the fewest wrapper segments. A model
    reached both directly and through a train cell wrapping it (a hand-written train step, and the model called
    again for accuracy: the GCN model zoo's ``TrainNetWrapper``) is one model seen twice, not a shared weight."""
    crossed = {path: len(path.split(".") if path else ()) - len(alias) for alias, path in paths.items()}
    fewest = min(crossed.values())
    return {path for path, count in crossed.items() if count == fewest}


def computing_holders(owners: list[tuple[Any, list[str]]]) -> list[tuple[Any, list[str]]]:
    """The (cell, paths) holding a Parameter that compute with it. A loss cell that also holds a model weight reads
    it for a penalty (the GCN model zoo's ``Loss`` keeps the first layer's weight as ``self.param`` for an L2 term):
    not a second use of the weight. It counts only when no other cell holds the Parameter."""
    computing = [(cell, paths) for cell, paths in owners
                 if not ("LossBase" in class_names(cell) or type(cell).__name__.endswith("Loss"))]
    return computing or owners
