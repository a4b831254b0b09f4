"""Read a MindSpore dataset pipeline's operations, and replay its random stages (MSD312, MSD313).

The pipeline tree is walked from its sources up: every ``MapDataset`` node's ``operations`` (wrappers such as
``Compose``, ``RandomApply``, ``RandomChoice`` opened) and every ``BatchDataset``'s ``per_batch_map`` become
``PipelineOp`` records naming the op, the stage it sits in and the columns it writes. Nothing here judges.

A replay confirms that a stage of the eval pipeline is random: the stage's own input row (the first row its child
yields, through a fresh iterator stopped after one row) is fed several times, unshuffled, through a new pipeline
holding the same operations with one worker, and the outputs are compared. This is independent of a shuffled eval
set (the row is read once) and of ``mindspore.dataset.config.set_seed`` (two fresh iterators over a seeded random
op yield the same first row; one iterator's successive draws do not). The user's pipeline, its iterators and the
global Python and numpy random states are left as they were.
"""
from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import numpy as np

from mindspore_doctor.data.signals import PipelineOp, PipelineSignals, Replay

RANDOM_OPS = frozenset({
    # mindspore.dataset.vision, beyond the Random* classes
    "AutoAugment", "RandAugment", "TrivialAugmentWide", "UniformAugment", "CutOut", "CutMixBatch", "MixUpBatch",
    "MixUp", "BoundingBoxAugment",
    # mindspore.dataset.audio (SpecAugment masks)
    "FrequencyMasking", "TimeMasking",
})
"""MindSpore ops that draw random numbers on every call, besides every class whose name starts with ``Random``."""

SIZE_OPS = frozenset({"Resize", "CenterCrop", "Crop", "RandomCrop", "RandomResizedCrop", "RandomCropDecodeResize",
                      "ResizedCrop", "PadToSize", "RandomResize", "RandomCropWithBBox", "RandomResizedCropWithBBox",
                      "ResizeWithBBox", "RandomResizeWithBBox"})
AFFINE_OPS = frozenset({"Rescale", "Normalize", "NormalizePad", "ToTensor"})
LAYOUT_OPS = frozenset({"HWC2CHW"})
CAST_OPS = frozenset({"TypeCast", "ToType"})
_AUGMENT_NAME = re.compile(r"random|augment|mixup|cutmix|cutout|jitter|erasing|flip", re.IGNORECASE)
REPLAY_READS = 16
"""How many times a replay feeds the same row through a random stage: a stage applied with probability p stays
unseen with probability (1-p)^16 (0.19 at p = 0.1)."""
REPLAY_MAX_BYTES = 64 << 20
"""A replay's copies of its input row stay under this (a batched row of large images gets fewer reads, at least 2)."""
MAX_REPLAYS = 4


def _is_mindspore_op(op: Any) -> bool:
    return type(op).__module__.startswith("mindspore.dataset")


def _python_name(op: Any) -> str:
    target = op if callable(op) and hasattr(op, "__qualname__") else type(op)
    return getattr(target, "__qualname__", type(op).__name__)


def _nums(value: Any) -> Any:
    """Plain Python numbers (tuples for sequences) of an op's parameter."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_nums(v) for v in value)
    if isinstance(value, (bool, int, float, np.number)):
        return value.item() if isinstance(value, np.number) else value
    return str(value)


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_fmt(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _params(name: str, op: Any) -> dict[str, Any]:
    """The numbers of an op the rules compare."""
    out: dict[str, Any] = {}
    if name == "Resize" or name == "RandomResize":
        size = getattr(op, "c_size", None) or getattr(op, "py_size", None) or getattr(op, "size", None)
        size = _nums(size)
        if isinstance(size, int) or (isinstance(size, tuple) and len(size) == 1):
            out["short"] = size if isinstance(size, int) else size[0]
        elif isinstance(size, tuple):
            out["size"] = size
    elif name in SIZE_OPS:
        size = _nums(getattr(op, "size", None))
        if isinstance(size, int):
            size = (size, size)
        if isinstance(size, tuple) and len(size) == 2:
            out["size"] = size
    if name == "Rescale":
        out["rescale"], out["shift"] = float(op.rescale), float(op.shift)
    if name in ("Normalize", "NormalizePad"):
        out["mean"], out["std"] = _nums(op.mean), _nums(op.std)
    if name in CAST_OPS:
        out["dtype"] = str(getattr(op, "data_type", ""))
    if name == "ToTensor":
        out["dtype"] = str(_nums(getattr(op, "output_type", "float32")))
    prob = getattr(op, "prob", None)
    if isinstance(prob, (int, float)) and not isinstance(prob, bool):
        out["prob"] = float(prob)
    return out


def _text(name: str, params: dict[str, Any]) -> str:
    shown = {k: v for k, v in params.items() if k in ("size", "short", "rescale", "shift", "mean", "std", "dtype", "prob")}
    if "short" in shown:
        shown = {"size": shown.pop("short"), **shown}
    return f"{name}(" + ", ".join(f"{k}={_fmt(v)}" for k, v in shown.items()) + ")"


def _kind(name: str, mindspore_op: bool) -> str:
    if not mindspore_op:
        return "python"
    if name in SIZE_OPS:
        return "size"
    if name in AFFINE_OPS:
        return "affine"
    if name in LAYOUT_OPS:
        return "layout"
    if name in CAST_OPS:
        return "cast"
    return "other"


def _inner(op: Any) -> list[Any]:
    """The ops a wrapper holds (Compose, RandomApply, RandomChoice, RandomOrder, UniformAugment, subpolicies)."""
    inner = list(getattr(op, "transforms", None) or [])
    policy = getattr(op, "policy", None)
    if type(op).__name__ == "RandomSelectSubpolicy" and policy:
        inner += [pair[0] for sub in policy for pair in sub if isinstance(pair, (list, tuple)) and pair]
    return inner


def _flatten(ops: Any, stage: str, columns: tuple[str, ...], wrapper: str = "", off: bool = False) -> list[PipelineOp]:
    """Records of ``ops`` and, inside wrappers, of what they wrap; ``off``: inside a wrapper applied with prob 0."""
    found = []
    for op in ops if isinstance(ops, (list, tuple)) else [ops]:
        mindspore_op = _is_mindspore_op(op)
        name = type(op).__name__ if mindspore_op else _python_name(op)
        params = _params(name, op) if mindspore_op else {}
        disabled = off or params.get("prob") == 0.0
        inner = _inner(op) if mindspore_op else []
        random_op = mindspore_op and (name.startswith("Random") or name in RANDOM_OPS) and not disabled
        if name == "RandomChoice" and len(inner) < 2 or name == "RandomOrder" and len(inner) < 2:
            random_op = False  # one choice, one order: as deterministic as what it holds
        key = "" if mindspore_op else f"{getattr(op, '__module__', '') or type(op).__module__}.{name}@{id(op)}"
        found.append(PipelineOp(
            name=name, stage=stage, columns=columns, kind=_kind(name, mindspore_op), text=_text(name, params),
            random=random_op, random_name=not mindspore_op and bool(_AUGMENT_NAME.search(name)),
            wrapper=wrapper, params=params, key=key,
        ))
        if inner:
            label = _text(name, params)
            found += _flatten(inner, stage, columns, f"{wrapper} > {label}" if wrapper else label, disabled)
    return found


def _columns(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _nodes_source_first(dataset: Any) -> list[Any]:
    """The pipeline's nodes, every child before its parent."""
    order, stack, seen = [], [(dataset, False)], set()
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(getattr(node, "children", None) or []))
    return order


def _col_names(node: Any) -> tuple[str, ...]:
    try:
        return tuple(node.get_col_names())
    except Exception:  # noqa: BLE001 - a node that cannot say its columns: its ops apply to unknown columns
        return ()


def _rename(ops: list[PipelineOp], names: dict[str, str]) -> None:
    for op in ops:
        op.columns = tuple(names.get(c, c) for c in op.columns)


def read_pipeline(dataset: Any, name: str) -> tuple[PipelineSignals, dict[str, Any]]:
    """The pipeline's operations, source first, and the stage nodes by stage name (for ``replay``)."""
    from mindspore.dataset.engine.datasets import BatchDataset, MapDataset

    signals = PipelineSignals(name=name)
    nodes = _nodes_source_first(dataset)
    maps = [n for n in nodes if isinstance(n, MapDataset)]
    stages: dict[str, Any] = {}
    for node in nodes:
        if type(node).__name__ == "RenameDataset":
            old, new = _columns(node.input_column_names), _columns(node.output_column_names)
            _rename(signals.ops, dict(zip(old, new)))
            continue
        if isinstance(node, MapDataset):
            inputs = _columns(node.input_columns)
            if not inputs:
                first = _col_names(node.children[0]) if node.children else ()
                inputs = first[:1]
            outputs = _columns(node.output_columns) or inputs
            stage = f"map {maps.index(node) + 1} of {len(maps)} (input_columns={list(inputs)})"
            stages[stage] = node
            if len(outputs) == len(inputs):  # a map's outputs replace its inputs
                _rename(signals.ops, dict(zip(inputs, outputs)))
                written = outputs
            else:
                written = tuple(dict.fromkeys(inputs + outputs))
            signals.ops += _flatten(node.operations, stage, written)
            continue
        if isinstance(node, BatchDataset) and node.per_batch_map is not None:
            inputs = _columns(node.input_columns) or _col_names(node.children[0])
            outputs = _columns(node.output_columns) or inputs
            stage = f"batch (per_batch_map, input_columns={list(inputs)})"
            stages[stage] = node
            signals.ops += _flatten(node.per_batch_map, stage, tuple(dict.fromkeys(inputs + outputs)))
    return signals, stages


def _row_hash(row: list[np.ndarray]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in row:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes() if a.dtype != object else repr(a.tolist()).encode())
    return h.digest()


def _first_rows(node: Any, count: int) -> tuple[list[str], list[list[np.ndarray]]]:
    columns = list(node.get_col_names())
    iterator = node.create_tuple_iterator(num_epochs=1, output_numpy=True)
    rows = []
    try:
        for row in iterator:
            rows.append([np.asarray(a) for a in row])
            if len(rows) >= count:
                break
    finally:
        iterator.stop()
    return columns, rows


def _replay_stage(stage: str, node: Any) -> Replay:
    import mindspore.dataset as mds
    from mindspore.dataset.engine.datasets import MapDataset

    from mindspore_doctor.data.sampling import error_summary

    child = node.children[0]
    batch = not isinstance(node, MapDataset)
    size = node.batch_size if batch and isinstance(node.batch_size, int) else 1
    try:
        columns, rows = _first_rows(child, size)
        if not rows:
            return Replay(stage, 0, why="its input yielded no row")
        nbytes = sum(a.nbytes for row in rows for a in row)
        reads = int(max(2, min(REPLAY_READS, REPLAY_MAX_BYTES // max(nbytes, 1))))
        copies = rows * reads
        data = {c: np.stack([row[i] for row in copies]) for i, c in enumerate(columns)}
        source = mds.NumpySlicesDataset(data, shuffle=False)
        if batch:
            again = source.batch(size, per_batch_map=node.per_batch_map, input_columns=node.input_columns or None,
                                 output_columns=node.output_columns or None, num_parallel_workers=1)
        else:
            again = source.map(operations=node.operations, input_columns=node.input_columns,
                               output_columns=node.output_columns, num_parallel_workers=1,
                               python_multiprocessing=False)
        iterator = again.create_tuple_iterator(num_epochs=1, output_numpy=True)
        try:
            outputs = {_row_hash([np.asarray(a) for a in row]) for row in iterator}
        finally:
            iterator.stop()
        return Replay(stage, reads, len(outputs))
    except Exception as exc:  # noqa: BLE001 - a replay that cannot run leaves the op unconfirmed
        return Replay(stage, 0, why=error_summary(exc))


def replay_random_stages(signals: PipelineSignals, stages: dict[str, Any]) -> None:
    """Replay each stage holding a random op or a Python callable named like augmentation (at most
    ``MAX_REPLAYS``), restoring the global ``random`` and ``numpy.random`` states a Python op may draw from."""
    wanted = list(dict.fromkeys(op.stage for op in signals.ops if op.random or op.random_name))
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        for stage in wanted[:MAX_REPLAYS]:
            signals.replays.append(_replay_stage(stage, stages[stage]))
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def measure_pipeline(dataset: Any, name: str, first_row: dict[str, np.ndarray] | None, batched: bool,
                     replay: bool) -> PipelineSignals:
    """``read_pipeline`` plus the first row's per-sample shapes and dtypes; ``replay``: replay the random stages."""
    signals, stages = read_pipeline(dataset, name)
    for column, array in (first_row or {}).items():
        shape = tuple(array.shape)
        signals.shapes[column] = shape[1:] if batched else shape
        signals.dtypes[column] = str(array.dtype)
    if replay:
        replay_random_stages(signals, stages)
    return signals
