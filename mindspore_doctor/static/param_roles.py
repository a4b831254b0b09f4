"""What a parameter is to its cell: its role (weight, bias, normalization scale/shift, embedding table, recurrent
gate, buffer), the fans its initializer sees and the activation that follows its layer (MSD109). The role decides
what each rule judges: weights and tables their init (MSD108/MSD109), trainable-looking ones their freezing
(MSD102), normalization and bias parameters their weight decay (MSD116).

Library layers are known by class; a user cell's raw parameter by what its construct does with ``self.<key>``: the
table of a gather/lookup is an embedding, a matmul or conv operand a weight.
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any

import numpy as np

from mindspore_doctor.static.ast_cells import is_library_object
from mindspore_doctor.static.ast_nodes import callee_identifier, norm_name
from mindspore_doctor.static.attribute_uses import attribute_loads
from mindspore_doctor.static.cell_walk import class_names
from mindspore_doctor.static.class_source import ConstructUnavailable, class_source
from mindspore_doctor.static.method_flow import function_flow
from mindspore_doctor.static.param_values import host_array, kurtosis
from mindspore_doctor.static.signals import (
    BIAS,
    BUFFER,
    EMBEDDING,
    NORM_BETA,
    NORM_GAMMA,
    OTHER,
    RECURRENT,
    RELU_LIKE,
    SATURATING,
    WEIGHT,
)

_NORM_CLASS = re.compile(r"Norm(\dd)?$")
RECURRENT_CLASSES = frozenset({"_RNNBase", "_RNNCellBase", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"})
_FAN_KNOWN_CLASSES = frozenset({"_Conv", "Dense", "MultiheadAttention"})
_SKIPPED_BETWEEN = re.compile(r"(Norm(\dd)?|Dropout(\dd)?)$")


def param_role(cell: Any, key: str, param: Any) -> str:
    import mindspore as ms

    names = class_names(cell)
    lowered = key.lower()
    if any(_NORM_CLASS.search(n) for n in names):
        if lowered in ("gamma", "weight"):
            return NORM_GAMMA
        return NORM_BETA if lowered in ("beta", "bias") else BUFFER
    if param.dtype not in (ms.float16, ms.float32, ms.float64, ms.bfloat16):
        return BUFFER
    if "bias" in lowered:
        return BIAS
    if len(param.shape) < 2:
        return OTHER
    if any("Embedding" in n for n in names):
        return EMBEDDING
    if RECURRENT_CLASSES.intersection(names):
        return RECURRENT
    if _FAN_KNOWN_CLASSES.intersection(names) or "weight" in lowered or "kernel" in lowered:
        return WEIGHT
    return _raw_role(cell, key, param)


_MULTIPLYING_OPS = frozenset({"matmul", "mm", "bmm", "batchmatmul", "dense", "conv1d", "conv2d", "conv3d"})
_LOOKUP_OPS = frozenset({"gather", "gatherv2", "embedding", "embeddinglookup", "take", "indexselect"})


def _random_like(param: Any) -> bool:
    """Values drawn like a Normal init: many distinct values, centred, normal tails (kurtosis 2-4). A frozen
    one-hot matrix (Swin's relative-position index) or a sinusoidal table is not."""
    values = host_array(param)
    if values is None or values.size < 32:
        return False
    sample = values.reshape(-1)[:10_000]
    spread = float(sample.std())
    return (len(np.unique(sample)) > 0.5 * sample.size and abs(float(sample.mean())) < 0.1 * spread
            and 2.0 < kurtosis(sample) < 4.0)


def _raw_role(cell: Any, key: str, param: Any) -> str:
    """A user cell's own parameter, by what its construct does with ``self.<key>``: the table of a gather /
    embedding lookup is an embedding, a matmul or conv operand a weight (``ops.matmul(x, self.w)``).
    A frozen one counts only when its values look randomly drawn: frozen raw matrices are often constants."""
    if is_library_object(cell) or (not param.requires_grad and not _random_like(param)):
        return OTHER
    try:
        source = class_source(type(cell))
    except ConstructUnavailable:
        return OTHER
    for func, node in attribute_loads(source, key):
        flow = function_flow(func)
        parent = flow.parents.get(node)
        if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.MatMult):
            return WEIGHT
        if isinstance(parent, ast.Subscript) and parent.value is node and _looked_up(parent.slice):
            return EMBEDDING
        if isinstance(parent, ast.Call) and node in parent.args:
            op = norm_name(callee_identifier(parent.func if isinstance(parent.func, ast.Call) else parent) or "")
            table = _TABLE_ARGUMENT.get(op, 0)
            if op in _LOOKUP_OPS and len(parent.args) > table and parent.args[table] is node:
                return EMBEDDING
            if op in _MULTIPLYING_OPS:
                return WEIGHT
    return OTHER


_TABLE_ARGUMENT = {"embedding": 1}
"""Position of the table among a lookup's arguments where it is not the first: ``ops.embedding(ids, weight)``
(and ``mint.nn.functional.embedding``) take the ids first; ``ops.gather(table, ids, 0)`` the table."""


def _looked_up(index: ast.expr) -> bool:
    """``table[ids]``: rows picked by a local value (the token ids construct receives), not a constant slice of the
    parameter (``self.position[:, :steps]``) nor a fixed index held by the cell (``self.bias_table[self.index]``,
    a relative-position bias whose zero init is normal)."""
    return isinstance(index, ast.Name)


def fans(cell: Any, shape: tuple[int, ...]) -> tuple[int | None, int | None]:
    """fan_in/fan_out laid out as MindSpore's initializers see them: (out, in/groups, *kernel)."""
    names = class_names(cell)
    if not _FAN_KNOWN_CLASSES.intersection(names) or len(shape) < 2:
        return None, None
    receptive = math.prod(shape[2:])
    group = int(getattr(cell, "group", 1) or 1) if "_Conv" in names else 1
    return shape[1] * receptive, max(shape[0] // group, 1) * receptive


def following_activation(cell: Any, parent: Any, key: str) -> str | None:
    """The activation class after a layer: Dense(activation=...) or the next cell of a SequentialCell."""
    activation = getattr(cell, "activation", None) if getattr(cell, "activation_flag", False) else None
    if activation is not None:
        return type(activation).__name__
    if parent is None or "SequentialCell" not in class_names(parent):
        return None
    keys = list(parent._cells)
    for following in keys[keys.index(key) + 1 :]:
        name = type(parent._cells[following]).__name__
        if not _SKIPPED_BETWEEN.search(name):
            return name if name in RELU_LIKE or name in SATURATING else None
    return None
