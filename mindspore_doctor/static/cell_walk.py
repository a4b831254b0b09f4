"""What lint is handed, walked: every registration path of the network's cell tree (a cell registered twice is
seen twice), each cell's own parameters, and the optimizer and train cell that come with it.

Train, loss and AMP wrappers alias the network: they are walked through, and their segments dropped from the
alias of a path, so the same layer reached through a train cell and directly is one layer. Optimizers are not
walked: they hold the parameters they update, not the model's layers.
"""
from __future__ import annotations

from typing import Any, Iterator

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.static.ast_cells import library_kind
from mindspore_doctor.static.context import LintContext

_MAX_PATHS = 50_000
"""Bound on registration paths walked: a cell reused at many nesting levels multiplies paths."""
_WRAPPER_MODULES = ("mindspore.nn.wrap", "mindspore.train.amp", "mindspore.amp")


def class_names(obj: Any) -> list[str]:
    """The classes of ``obj``, MindSpore's by their nn names (``mint.nn.LayerNorm`` is a ``LayerNorm``)."""
    return [library_kind(c) for c in type(obj).__mro__]


def _is_wrapper(cell: Any) -> bool:
    """Train/loss/AMP wrappers: they alias the network, they are not part of the model. A user cell holding an
    optimizer is a hand-written train step (the model zoo's ``TrainOneStepCell`` copies): a wrapper too."""
    from mindspore import nn

    return isinstance(cell, (nn.Optimizer, nn.WithLossCell, nn.WithEvalCell, nn.WithGradCell, nn.TrainOneStepCell)) or (
        type(cell).__module__.startswith(_WRAPPER_MODULES)
    ) or any(child is not None and _is_optimizer(child) for child in cell._cells.values())


def _is_optimizer(cell: Any) -> bool:
    return "Optimizer" in class_names(cell) and hasattr(cell, "parameters")


def walk_cells(root: Any) -> Iterator[tuple[str, tuple[str, ...], Any, Any, str]]:
    """Every registration path, depth first like ``cells_and_names``: (path, alias_key, cell, parent, key).

    ``alias_key`` drops the segments that only name a wrapper, so the same layer reached
    through ``TrainOneStepCell.network._backbone`` and directly is one path, not sharing.
    Optimizers are not walked: they hold the parameters they update, not the model's layers.
    """
    stack = [("", (), root, None, "", frozenset())]
    walked = 0
    while stack and walked < _MAX_PATHS:
        path, alias, cell, parent, key, ancestors = stack.pop()
        walked += 1
        yield path, alias, cell, parent, key
        wrapper = _is_wrapper(cell)
        children = []
        for name, child in cell._cells.items():
            if child is None or id(child) in ancestors or _is_optimizer(child):
                continue
            child_alias = alias if wrapper or _is_wrapper(child) else alias + (name,)
            child_path = f"{path}.{name}" if path else name
            children.append((child_path, child_alias, child, cell, name, ancestors | {id(cell)}))
        stack.extend(reversed(children))


def own_params(cell: Any) -> Iterator[tuple[str, Any, bool]]:
    """A cell's own parameters: (key, param, listed) where ``listed`` marks those held in a ParameterTuple.

    A ParameterTuple attribute (``self.weights = ParameterTuple(...)``) usually just lists
    parameters owned elsewhere; it owns them only when nothing else does (nn.LSTM).
    """
    if _is_wrapper(cell):
        return
    from mindspore import ParameterTuple

    listed = {id(p) for v in vars(cell).values() if isinstance(v, ParameterTuple) for p in v}
    for key, param in cell._params.items():
        if param is not None:
            yield key, param, id(param) in listed


def lint_train_cell(ctx: LintContext) -> Any:
    """The train cell: the one given as ``train_network`` (the Doctor's), else the linted network itself."""
    from mindspore import nn

    return next((c for c in (ctx.train_network, ctx.network) if isinstance(c, nn.TrainOneStepCell)), None)


def lint_optimizer(ctx: LintContext) -> Any:
    optimizer = ctx.optimizer if ctx.optimizer is not None else getattr(lint_train_cell(ctx), "optimizer", None)
    if optimizer is not None and not _is_optimizer(optimizer):
        raise CheckSkipped(f"`optimizer` is a {type(optimizer).__name__}, not a MindSpore optimizer")
    return optimizer
