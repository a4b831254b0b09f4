"""Layer probes: Dropout rates (MSD104), BatchNorm ``use_batch_statistics`` (MSD105), Softmax axes (MSD113).

Object mode reads the built layers (``nn.Dropout`` keeps the drop rate in its
``dropout`` primitive; ``p`` is None when the deprecated ``keep_prob`` was used;
``mindspore.mint`` layers are matched by their nn name, see ``library_kind``)
and scans the construct of user cells for functional calls
(``ops.dropout(x, p=0.9)``, ``ops.softmax(x, axis=0)``, ``mint.softmax(x, dim=0)``).
Source mode scans every constructor and call of the file with the same AST parsers. The signals
(``static/signals.py``) are judged by ``rules/layers.py``; ``runners/lint.py`` pairs the two.
"""
from __future__ import annotations

import ast
import inspect
from functools import lru_cache
from typing import Any

from mindspore_doctor.findings import Finding
from mindspore_doctor.static.ast_cells import (
    attribute_values,
    init_labels,
    is_library_object,
    library_kind,
    source_attributes,
    user_classes,
)
from mindspore_doctor.static.ast_nodes import self_attribute
from mindspore_doctor.static.class_source import ConstructUnavailable, class_source, reachable_methods
from mindspore_doctor.static.layer_calls import (
    CallParser,
    CallSite,
    batchnorm_call,
    dropout_call,
    find_calls,
    fixed_statistics,
    softmax_call,
)
from mindspore_doctor.static.names import bind_imports
from mindspore_doctor.static.context import LintContext, SourceContext
from mindspore_doctor.static.signals import BatchNormSignal, DropoutSignal, SoftmaxAxisSignal

Site = tuple[str, Any, dict[str, Any]]
"""(display name, parsed call site or measured value, location)."""


def _construct_sites(
    ctx: LintContext, parse: CallParser, check: str, codes: tuple[str, ...]
) -> tuple[list[Site], list[Finding]]:
    """Recognised calls inside the construct (and the methods it reaches) of user cells (the network's and a
    loss's). A call whose rate or axis is ``self.<attr>`` is read per instance (each may hold another value);
    one site per class and value."""
    cells = ctx.construct_cells
    analysed, skips = user_classes(cells, check, codes)
    sites: dict[tuple[str | None, CallSite], dict[str, Any]] = {}
    for a in analysed:
        methods = reachable_methods(a.source)
        asked: set[str] = set()
        find_calls(methods, parse, lambda call: asked.add)  # which self.<attr> the parser would read
        for path in a.instances if asked else (a.path,):
            values = attribute_values(cells[path])
            for site in find_calls(methods, parse, lambda call: values):
                sites.setdefault((a.source.file, site), {"cell": path, "file": a.source.file, "line": site.line})
    return [(site.text, site, location) for (_, site), location in sites.items()], skips


def _source_sites(ctx: SourceContext, parse: CallParser) -> list[Site]:
    """Recognised calls anywhere in the file, named ``Class.attr`` when assigned in ``__init__``."""
    bind_imports(ctx.tree)
    labels = init_labels(ctx.tree, str(ctx.path))
    return [
        (labels.get(site.line, site.text), site, {"file": str(ctx.path), "line": site.line})
        for site in find_calls([ctx.tree], parse, source_attributes(ctx.tree, str(ctx.path)))
    ]


def _held_primitives(ctx: LintContext, *type_names: str) -> list[Site]:
    """Primitives of the given types held as attributes of user cells (``self.d = ops.Dropout(0.1)``)."""
    return [
        (f"{path}.{attr}" if path else attr, prim, {"cell": path})
        for path, cell in ctx.construct_cells.items()
        if not is_library_object(cell)
        for attr, prim in cell.__dict__.get("_primitives", {}).items()
        if type(prim).__name__ in type_names
    ]


def _library_cells(ctx: LintContext, *type_names: str) -> list[tuple[str, Any]]:
    """MindSpore's cells of the given nn types, their mint twins included (``DropoutExt`` is a ``Dropout``)."""
    return [(p, c) for p, c in ctx.construct_cells.items()
            if is_library_object(c) and library_kind(type(c)) in type_names]


# --- MSD104 ----------------------------------------------------------------------------

_DROPOUT_CELLS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d")


def _drop_rate(cell: Any) -> float:
    """The fraction a Dropout layer drops in training: ``p`` (nn.Dropout, mint), ``prob`` (Dropout1d), or
    ``1 - keep_prob`` (Dropout2d/3d, nn.Dropout's deprecated argument)."""
    for name in ("p", "prob"):
        value = getattr(cell, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    keep = getattr(cell, "keep_prob", None)
    return round(1.0 - float(keep), 6) if isinstance(keep, (int, float)) else 0.0


def _dropout_layer_signal(path: str, cell: Any) -> DropoutSignal:
    """``keep_prob`` counts as the user's spelling only on ``nn.Dropout`` built without ``p`` (Dropout2d/3d keep
    it internally as ``1 - p``)."""
    via_keep_prob = getattr(cell, "p", None) is None and type(cell).__name__ == "Dropout"
    return DropoutSignal(path, _drop_rate(cell), via_keep_prob, {"cell": path})


def _dropout_signals(sites: list[Site]) -> list[DropoutSignal]:
    return [DropoutSignal(name, s.drop_rate, s.via_keep_prob, loc) for name, s, loc in sites]


def dropout_signals(ctx: LintContext) -> tuple[list[DropoutSignal], list[Finding]]:
    """Every Dropout's rate (layers, held primitives, functional calls), and MSD002 for the user cells whose
    construct could not be read."""
    signals = [_dropout_layer_signal(p, c) for p, c in _library_cells(ctx, *_DROPOUT_CELLS)]
    for name, prim, loc in _held_primitives(ctx, "Dropout", "Dropout2D", "Dropout3D"):
        signals.append(DropoutSignal(name, round(1.0 - float(prim.attrs["keep_prob"]), 6), True, loc))
    sites, skips = _construct_sites(ctx, dropout_call, "dropout-rate", ("MSD104",))
    return signals + _dropout_signals(sites), skips


def dropout_source_signals(ctx: SourceContext) -> list[DropoutSignal]:
    return _dropout_signals(_source_sites(ctx, dropout_call))


# --- MSD105 ----------------------------------------------------------------------------


def _batchnorm_owner(ctx: LintContext, path: str) -> str:
    """``BatchNorm3d`` keeps its statistics in a ``bn2d`` child: name the layer the user built."""
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    return parent if type(ctx.cells.get(parent)).__name__ == "BatchNorm3d" else path


def batchnorm_signals(ctx: LintContext) -> list[BatchNormSignal]:
    signals = {}
    for path, cell in ctx.cells.items():
        if not (is_library_object(cell) and type(cell).__name__.startswith("BatchNorm")):
            continue
        fixed = fixed_statistics(lambda flag: getattr(cell, flag, None))
        if fixed is not None:
            owner = _batchnorm_owner(ctx, path)
            signals[owner] = BatchNormSignal(owner, *fixed, {"cell": owner})
    return list(signals.values())


_RECURRENT_CELLS = frozenset({"LSTM", "GRU", "RNN"})
_CONTAINERS = frozenset({"SequentialCell", "CellList", "CellDict"})


@lru_cache(maxsize=256)
def _library_reads_training(cls: type) -> bool:
    """A MindSpore cell whose construct branches on ``self.training`` (MultiheadAttention's attention dropout)."""
    try:
        return "self.training" in inspect.getsource(cls.construct)
    except (OSError, TypeError):
        return False


def _library_mode_effect(cell: Any) -> str | None:
    """What changes between train and eval mode in one of MindSpore's cells, None when nothing does."""
    kind = library_kind(type(cell))
    if kind.startswith("BatchNorm") or kind == "SyncBatchNorm":
        if fixed_statistics(lambda flag: getattr(cell, flag, None)) is not None:
            return None  # batch or moving statistics whatever the mode (MSD105's static part judges that)
        return f"{kind}: normalises with its moving statistics in eval mode, never updates them"
    if kind.startswith("Dropout"):
        rate = _drop_rate(cell)
        return f"{kind} p={rate:g}: drops nothing in eval mode" if rate > 0 else None
    if kind in _RECURRENT_CELLS:
        dropout, layers = float(getattr(cell, "dropout", 0) or 0), int(getattr(cell, "num_layers", 1) or 1)
        return f"{kind} dropout={dropout:g} between its {layers} layers: off in eval mode" \
            if dropout > 0 and layers > 1 else None
    if kind not in _CONTAINERS and _library_reads_training(type(cell)):
        rate = getattr(cell, "dropout", getattr(cell, "p", None))
        return None if rate == 0 else f"{kind}: its construct branches on self.training"
    return None


def _user_mode_effect(cell: Any) -> str | None:
    """A user cell whose construct (or a method it reaches) reads ``self.training``."""
    try:
        source = class_source(type(cell))
    except ConstructUnavailable:
        return None
    lines = sorted(node.lineno for func in reachable_methods(source) for node in ast.walk(func)
                   if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                   and self_attribute(node) == "training")
    return f"{type(cell).__name__}: its construct reads self.training (line {lines[0]})" if lines else None


def mode_dependent_cells(network: Any) -> dict[str, str]:
    """Cell path -> what changes when it runs in eval mode instead of train mode, for the cells where something
    does: BatchNorm not fixed to one statistics source, Dropout with p > 0, stacked LSTM/GRU with dropout,
    MindSpore cells and user cells whose construct reads ``self.training``. A network without any (an LSTM-CRF
    tagger, a plain MLP) computes the same in both modes: training it in eval mode is harmless. The cells
    inside a recurrent or BatchNorm layer are judged with it (an LSTM's ``dropout_op`` is its own)."""
    found: dict[str, str] = {}
    judged: list[str] = []
    for path, cell in network.cells_and_names():
        if any(path.startswith(f"{owner}.") for owner in judged):
            continue
        if is_library_object(cell):
            effect = _library_mode_effect(cell)
            kind = library_kind(type(cell))
            if kind in _RECURRENT_CELLS or kind.startswith("BatchNorm"):
                judged.append(path)
        else:
            effect = _user_mode_effect(cell)
        if effect:
            found[path] = effect
    return found


def batchnorm_source_signals(ctx: SourceContext) -> list[BatchNormSignal]:
    sites = _source_sites(ctx, batchnorm_call)
    return [BatchNormSignal(n, s.use_batch_statistics, s.setting, loc) for n, s, loc in sites]


# --- MSD113 ----------------------------------------------------------------------------


def _axis(value: Any) -> int | tuple:
    if isinstance(value, (tuple, list)):
        return int(value[0]) if len(value) == 1 else tuple(int(v) for v in value)
    return int(value)


def _softmax_signals(sites: list[Site]) -> list[SoftmaxAxisSignal]:
    return [SoftmaxAxisSignal(name, s.axis, s.log, loc) for name, s, loc in sites]


def softmax_axis_signals(ctx: LintContext) -> tuple[list[SoftmaxAxisSignal], list[Finding]]:
    signals = []
    for path, cell in _library_cells(ctx, "Softmax", "LogSoftmax"):
        prim = getattr(cell, "softmax", None) or getattr(cell, "log_softmax", None)
        axis = prim.attrs.get("axis") if prim is not None else None
        if axis is None:  # mint keeps `dim`; None is PyTorch's implicit dim, known only with the input's rank
            axis = getattr(cell, "dim", None)
        if axis is not None:
            log = library_kind(type(cell)) == "LogSoftmax"
            signals.append(SoftmaxAxisSignal(path, _axis(axis), log, {"cell": path}))
    for name, prim, loc in _held_primitives(ctx, "Softmax", "LogSoftmax"):
        signals.append(SoftmaxAxisSignal(name, _axis(prim.attrs["axis"]), prim.name == "LogSoftmax", loc))
    sites, skips = _construct_sites(ctx, softmax_call, "softmax-axis", ("MSD113",))
    return signals + _softmax_signals(sites), skips


def softmax_axis_source_signals(ctx: SourceContext) -> list[SoftmaxAxisSignal]:
    return _softmax_signals(_source_sites(ctx, softmax_call))

