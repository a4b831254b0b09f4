"""What the user's cells are, named once: the model inside its train/loss wrappers, the loss families.

Duck-typed over a cell's registered children (no MindSpore import), so the static linter, the data checks and
the training Doctor unwrap a ``TrainOneStepCell(WithLossCell(net, loss), opt)`` the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mindspore_doctor.library import is_mindspore_class

LOSS_FAMILIES = {
    "logits": ("BCEWithLogitsLoss", "MultiLabelSoftMarginLoss"),
    "probabilities": ("BCELoss",),
    "classes": ("CrossEntropyLoss", "SoftmaxCrossEntropyWithLogits", "NLLLoss", "FocalLoss", "MultiMarginLoss"),
    "regression": ("MSELoss", "L1Loss", "L1LossExt", "MAELoss", "RMSELoss", "SmoothL1Loss", "HuberLoss"),
}
"""What a MindSpore loss (``nn`` or ``mint.nn``) says about the outputs it is given: one or more sigmoid logits,
sigmoid probabilities, class scores, or values to regress."""

CLASSIFICATION_LOSSES = ("SoftmaxCrossEntropyWithLogits", "CrossEntropyLoss", "NLLLoss")
"""MindSpore's cross-entropies over class scores (``nn`` and ``mint.nn``): at uniform predictions, ln C."""
_CROSS_ENTROPY_STEMS = ("CrossEntropy", "NLLLoss")

_INNER = ("network", "_backbone")
"""The child a wrapper runs: ``TrainOneStepCell.network``, ``WithLossCell._backbone``, Model's AMP/dataset wrappers."""
_LOSS = ("_loss_fn", "loss_fn")
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Unwrapped:
    """The model a wrapper chain runs, where it sits, and the loss and optimizer found on the way."""

    backbone: Any
    path: str = ""
    loss_fn: Any = None
    loss_path: str | None = None
    optimizer: Any = None
    train_cell: Any = None
    """The outermost cell holding the optimizer (a ``TrainOneStepCell``-like cell), when there is one."""


def children(cell: Any) -> dict[str, Any]:
    return {k: c for k, c in cell.__dict__.get("_cells", {}).items() if c is not None}


def is_optimizer(cell: Any) -> bool:
    """``nn.Optimizer`` and ``mindspore.experimental``/``mint.optim`` optimizers alike."""
    return any(c.__name__ == "Optimizer" for c in type(cell).__mro__) and hasattr(cell, "parameters")


def _wrapper_part(key: str, cell: Any) -> bool:
    """What a wrapper holds beside the cell it runs: the loss, the optimizer, its gradient reducer (an Identity
    or a DistributedGradReducer), a loss-scale manager."""
    return key in (*_LOSS, "grad_reducer") or is_optimizer(cell) or "LossScale" in type(cell).__name__


def unwrap(cell: Any) -> Unwrapped:
    """Follow wrapper cells down to the model they run.

    A cell is a wrapper when it runs one inner child (``network`` / ``_backbone``) and every other child is a
    loss, an optimizer or a loss-scale manager: a model of the user's with a ``self.network`` body and a head
    (or a softmax) of its own is not unwrapped.
    """
    root, path, loss_fn, loss_path, optimizer, train_cell = cell, "", None, None, None, None
    for _ in range(_MAX_DEPTH):
        kids = children(cell)
        inner_key = next((k for k in _INNER if k in kids), None)
        if inner_key is None:
            break
        others = {k: c for k, c in kids.items() if k != inner_key}
        if not all(_wrapper_part(k, c) for k, c in others.items()):
            break
        found_loss = next((k for k in _LOSS if k in others), None)
        if found_loss is not None and loss_fn is None:
            loss_fn, loss_path = others[found_loss], f"{path}.{found_loss}" if path else found_loss
        found_optimizer = next((c for c in others.values() if is_optimizer(c)), None)
        if found_optimizer is not None and optimizer is None:
            optimizer, train_cell = found_optimizer, cell
        cell, path = kids[inner_key], f"{path}.{inner_key}" if path else inner_key
    if optimizer is None and hasattr(root, "cells_and_names"):  # a train cell of the user's (``self.opt``)
        optimizer = next((c for _, c in root.cells_and_names() if is_optimizer(c)), None)
        train_cell = root if optimizer is not None else None
    return Unwrapped(cell, path, loss_fn, loss_path, optimizer, train_cell)


def is_classification_loss(loss_fn: Any, by_name: bool = False) -> bool:
    """One of ``CLASSIFICATION_LOSSES``; with ``by_name``, also a loss of the user's named like one
    (``LabelSmoothingCrossEntropy``), for a check the user asked for (``sanity()``): a hand-written loss may
    scale or sharpen its input, so training does not take its name for a promise."""
    name = type(loss_fn).__name__
    return name in CLASSIFICATION_LOSSES or (by_name and any(stem in name for stem in _CROSS_ENTROPY_STEMS))


def loss_family(loss_fn: Any) -> tuple[str | None, int | None]:
    """(family, ignore_index) of the first MindSpore loss in ``loss_fn`` (itself or a cell it wraps)."""
    for _, cell in loss_fn.cells_and_names() if hasattr(loss_fn, "cells_and_names") else ():
        if not is_mindspore_class(type(cell)):
            continue
        family = next((f for f, names in LOSS_FAMILIES.items() if type(cell).__name__ in names), None)
        if family is not None:
            ignore = getattr(cell, "ignore_index", None)
            return family, ignore if isinstance(ignore, int) else None
    return None, None


def num_classes(backbone: Any, loss_fn: Any) -> int | None:
    """Output width of the last Dense/Linear layer, when the loss is a classification loss."""
    if not is_classification_loss(loss_fn) or not hasattr(backbone, "cells_and_names"):
        return None
    widths = [getattr(c, "out_channels", None) or getattr(c, "out_features", None)
              for _, c in backbone.cells_and_names() if type(c).__name__ in ("Dense", "Linear")]
    return int(widths[-1]) if widths and widths[-1] else None
