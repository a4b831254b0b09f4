"""Probe for parameters, initialisation and the optimizer (MSD101-103, 108, 109, 111, 112, 116).

Walks the cell tree of the linted network (every registration path, so a cell
registered twice is seen twice), the optimizer and, when ``lint`` receives a
train cell, its loss-scale attributes; turns them into the plain signals of
``static/signals.py`` that the rules of ``rules/parameters.py`` judge. Tensors are copied to host
only for parameters whose init is judged and for frozen ones (is it still at
its initial value?). How often each cell runs per forward pass (MSD101), which raw parameters are read as
tables or multiplied as weights, and where each layer's output goes (MSD109; for MSD102 the normalization
trained on a frozen layer's output) come from the construct AST. Which distinct cells hold a shared Parameter
and whether they are copies of one layer (class and settings) come from the cells themselves (MSD101).
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any, Iterator, NamedTuple

import numpy as np

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.static.ast_cells import instance_truth, is_library_object, library_kind
from mindspore_doctor.static.ast_nodes import callee_identifier, norm_name
from mindspore_doctor.static.attribute_uses import attribute_loads, attribute_uses, call_count
from mindspore_doctor.static.class_source import ConstructUnavailable, class_source
from mindspore_doctor.static.method_flow import function_flow
from mindspore_doctor.static.dataflow import ScaleFlow
from mindspore_doctor.static.signals import (
    BIAS,
    BUFFER,
    EMBEDDING,
    INIT_CHECKED,
    NORM_BETA,
    NORM_GAMMA,
    OTHER,
    RECURRENT,
    RELU_LIKE,
    SATURATING,
    TRAINABLE_LOOKING,
    WEIGHT,
    DecayGroup,
    LossScaleSignal,
    LrGroup,
    OptimizerSignal,
    ParamSignal,
)
from mindspore_doctor.static.context import LintContext

_MAX_PATHS = 50_000
"""Bound on registration paths walked: a cell reused at many nesting levels multiplies paths."""
_WRAPPER_MODULES = ("mindspore.nn.wrap", "mindspore.train.amp", "mindspore.amp")
_NORM_CLASS = re.compile(r"Norm(\dd)?$")
_RECURRENT_CLASSES = frozenset({"_RNNBase", "_RNNCellBase", "LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"})
_FAN_KNOWN_CLASSES = frozenset({"_Conv", "Dense", "MultiheadAttention"})
_SKIPPED_BETWEEN = re.compile(r"(Norm(\dd)?|Dropout(\dd)?)$")
_SGD_FAMILY = ("SGD", "Momentum", "ASGD")
_ADAM_FAMILY = ("Adam", "AdamWeightDecay", "AdamOffload", "LazyAdam", "Lamb", "AdaMax", "Adamax", "AdamW", "NAdam", "RAdam")
_SCHEDULE_PEAK_ATTRS = ("learning_rate", "max_lr", "start_learning_rate", "end_learning_rate")
_CACHE_KEY = "parameter_signals"


def _class_names(obj: Any) -> list[str]:
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
    return "Optimizer" in _class_names(cell) and hasattr(cell, "parameters")


def _walk(root: Any) -> Iterator[tuple[str, tuple[str, ...], Any, Any, str]]:
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


def _own_params(cell: Any) -> Iterator[tuple[str, Any, bool]]:
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


def _role(cell: Any, key: str, param: Any) -> str:
    import mindspore as ms

    names = _class_names(cell)
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
    if _RECURRENT_CLASSES.intersection(names):
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
            and 2.0 < _kurtosis(sample) < 4.0)


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


def _fans(cell: Any, shape: tuple[int, ...]) -> tuple[int | None, int | None]:
    """fan_in/fan_out laid out as MindSpore's initializers see them: (out, in/groups, *kernel)."""
    names = _class_names(cell)
    if not _FAN_KNOWN_CLASSES.intersection(names) or len(shape) < 2:
        return None, None
    receptive = math.prod(shape[2:])
    group = int(getattr(cell, "group", 1) or 1) if "_Conv" in names else 1
    return shape[1] * receptive, max(shape[0] // group, 1) * receptive


def _following_activation(cell: Any, parent: Any, key: str) -> str | None:
    """The activation class after a layer: Dense(activation=...) or the next cell of a SequentialCell."""
    activation = getattr(cell, "activation", None) if getattr(cell, "activation_flag", False) else None
    if activation is not None:
        return type(activation).__name__
    if parent is None or "SequentialCell" not in _class_names(parent):
        return None
    keys = list(parent._cells)
    for following in keys[keys.index(key) + 1 :]:
        name = type(parent._cells[following]).__name__
        if not _SKIPPED_BETWEEN.search(name):
            return name if name in RELU_LIKE or name in SATURATING else None
    return None


def host_array(param: Any, limit: int | None = None) -> np.ndarray | None:
    """float32 host copy, of its first ``limit`` elements only when given (a sample: a big weight is not copied
    whole); None for a parameter whose data is not initialised yet (lazy init)."""
    import mindspore as ms

    if getattr(param, "has_init", False):
        return None
    if limit is not None and math.prod(param.shape) > limit:
        param = param.reshape(-1)[:limit]
    if param.dtype == ms.bfloat16:
        param = param.astype(ms.float32)
    return np.asarray(param.asnumpy(), dtype=np.float32)


def _measure(param: Any, role: str, fan_in: int | None) -> dict[str, Any]:
    if role not in INIT_CHECKED or math.prod(param.shape) <= 1:
        return {}
    values = host_array(param)
    if values is None or values.size == 0:
        return {}
    low, high = values.min(), values.max()
    equal = bool(low == high)
    stats: dict[str, Any] = {"all_equal": equal, "constant": float(low) if equal else None}
    if role == WEIGHT and fan_in and not equal:
        stats["std"] = float(values.std(dtype=np.float64))
    elif role == EMBEDDING and not equal:
        stats["std"] = float(values.std(dtype=np.float64))
        stats["fresh_draw"] = _fresh_draw(values.reshape(-1)[:_DRAW_SAMPLE])
    return stats


_DRAW_SAMPLE = 100_000
"""Values of a table read to tell a fresh random draw from loaded rows (its first ones, in memory order)."""
_DRAW_KURTOSIS = (1.5, 4.5)
"""Kurtosis of the initializers' draws: uniform 1.8, truncated normal 2.4-2.9, normal 3. Trained or loaded
embedding rows are heavy-tailed or off-centre."""


def _fresh_draw(values: np.ndarray) -> bool:
    """Values shaped like an initializer's draw: centred on zero, with a uniform's or a normal's tails."""
    spread = float(values.std(dtype=np.float64))
    low, high = _DRAW_KURTOSIS
    return spread > 0 and abs(float(values.mean(dtype=np.float64))) < 0.1 * spread and low < _kurtosis(values) < high


_UNIFORM_SPREAD = 0.15
"""A uniform init U(-b, b) has std b/sqrt(3); a sample of 32+ values is within 15 % of it."""
_DEFAULT_UNIFORM = 0.07
"""``weight_init='uniform'``: MindSpore's Uniform() default scale."""
_UNIFORM_KURTOSIS = 2.2
"""Kurtosis of a uniform sample is 1.8 (a normal one 3): above this the values are not uniform-shaped."""
_DRIFT = 1.5
"""A uniform-shaped weight whose largest value is past its init bound by up to this factor has been trained."""


def _uniform_bounds(cell: Any, role: str) -> list[float]:
    """Bounds b of the uniform inits MindSpore gives a parameter of this role: the layers' default
    HeUniform(sqrt(5)) and bias init (1/sqrt(fan_in)), HeUniform (sqrt(6/fan_in)), XavierUniform, the
    fan_out modes, 'uniform'; 1/sqrt(hidden_size) for recurrent gates."""
    if role == RECURRENT or (role == BIAS and _RECURRENT_CLASSES.intersection(_class_names(cell))):
        hidden = getattr(cell, "hidden_size", None)
        return [1 / math.sqrt(hidden)] if hidden else []
    weight = cell._params.get("weight")
    fan_in, fan_out = _fans(cell, tuple(int(d) for d in weight.shape)) if weight is not None else (None, None)
    if not fan_in or not fan_out:
        return []
    return [1 / math.sqrt(fan_in), math.sqrt(6 / fan_in), math.sqrt(6 / (fan_in + fan_out)), 1 / math.sqrt(fan_out),
            math.sqrt(6 / fan_out), _DEFAULT_UNIFORM]


def _at_init(param: Any, cell: Any, role: str) -> bool | None:
    """Whether a (frozen) parameter still holds the values MindSpore initialises it with (MSD102)."""
    values = host_array(param) if role in TRAINABLE_LOOKING else None
    return None if values is None else _values_at_init(values, cell, role)


def _values_at_init(values: np.ndarray, cell: Any, role: str) -> bool | None:
    """Whether ``values`` (of a parameter of ``cell`` in ``role``, or a sample of them) are what MindSpore
    initialises such a parameter with.

    True: constant (norm gamma 1 / beta 0, zero bias, any constant init), or uniform within one of the
    known bounds with the matching spread. False: trained or loaded values: a norm scale/shift that is
    not constant, or a uniform-shaped weight with a uniform init's spread that has moved past its bound.
    None: no known init matches (a Normal or long-trained weight), so nothing can be told.
    """
    if role not in TRAINABLE_LOOKING or values.size == 0:
        return None
    if values.min() == values.max():
        return True
    if role in (NORM_GAMMA, NORM_BETA):
        return False
    largest, spread = float(np.abs(values).max()), float(values.std(dtype=np.float64))
    sample = values.size >= 32
    if sample and _kurtosis(values) > _UNIFORM_KURTOSIS:
        return None  # not uniform-shaped: a Normal init or long-trained weights
    verdict = None
    for bound in _uniform_bounds(cell, role):
        if sample and abs(spread * math.sqrt(3) / bound - 1) > _UNIFORM_SPREAD:
            continue
        if largest <= bound * (1 + 1e-5):
            return True
        if sample and largest <= _DRIFT * bound:
            verdict = False
    return verdict


def _frozen_state(param: Any, cell: Any, role: str, paths: tuple[str, ...], flow: ScaleFlow,
                  cells: dict[str, Any]) -> bool | None:
    """``at_init`` of a frozen parameter: its own values tell (``_at_init``), else the normalization that reads
    its layer's output: one with trained scale/shift (not constant) was trained on what this layer computes,
    so the layer holds trained or loaded values too (a conv and its BatchNorm loaded from one checkpoint)."""
    state = _at_init(param, cell, role)
    if state is None and role in TRAINABLE_LOOKING:
        return False if any(_trained_norm(cells[path]) for path in flow.normalized_by(paths)) else None
    return state


def _trained_norm(norm: Any) -> bool:
    return any(_at_init(p, norm, _role(norm, key, p)) is False for key, p, _ in _own_params(norm))


class ParameterStart(NamedTuple):
    """A parameter as a run finds it before its first step (``static/start_state.py`` judges the run by them)."""

    name: str
    cell_type: str
    role: str
    shape: tuple[int, ...]
    requires_grad: bool
    sample: np.ndarray
    """Its first values in memory order (at most the ``limit`` asked for: whole rows of a small-fan-in weight),
    float32 on the host."""
    at_init: bool | None
    """Whether the sample holds what MindSpore initialises such a parameter with (``_values_at_init``)."""


def parameter_starts(network: Any, limit: int) -> Iterator[ParameterStart]:
    """Each trainable-looking parameter of ``network`` once, in network order, with a host sample of at most
    ``limit`` of its values: a big model costs ``limit`` values per parameter, not a copy of its weights."""
    seen: set[int] = set()
    for _, _, cell, _, _ in _walk(network):
        for key, param, _ in _own_params(cell):
            if id(param) in seen:
                continue
            seen.add(id(param))
            role = _role(cell, key, param)
            sample = host_array(param, limit) if role in TRAINABLE_LOOKING else None
            if sample is not None:
                yield ParameterStart(param.name, type(cell).__name__, role, tuple(int(d) for d in param.shape),
                                     bool(param.requires_grad), sample, _values_at_init(sample, cell, role))


_GRID_STEPS = 256
"""Most grid steps a fixed kernel spans (``arange(16)`` spans 15, a 5x5 binomial blur 35)."""


def _on_grid(values: np.ndarray) -> bool:
    """All values are whole multiples of one step above the smallest, within ``_GRID_STEPS`` steps: written by
    code (``arange``, a Sobel kernel, a one-hot selection), never drawn at random. A constant is on a grid."""
    distinct = np.unique(values)
    if distinct.size < 2:
        return True
    positions = (distinct - distinct[0]) / np.diff(distinct).min()
    return bool(positions[-1] <= _GRID_STEPS and np.allclose(positions, np.round(positions), atol=1e-3))


def _fixed(param: Any, cell: Any, role: str) -> bool:
    """A frozen parameter of a fixed layer: the cell's frozen weight is a deterministic kernel (4+ values, not all
    equal, on a grid: mindyolo's DFL projection ``arange(reg_max)``), and this parameter is on a grid too (a
    zero bias beside it). A constant kernel alone is not fixed: it is what a constant init leaves."""
    if param.requires_grad or role not in TRAINABLE_LOOKING:
        return False
    values = host_array(param)
    if values is None or not _on_grid(values):
        return False
    for key, weight, _ in _own_params(cell):
        kernel = host_array(weight) if not weight.requires_grad and _role(cell, key, weight) == WEIGHT else None
        if kernel is not None and kernel.size >= 4 and kernel.min() != kernel.max() and _on_grid(kernel):
            return True
    return False


def _kurtosis(values: np.ndarray) -> float:
    centred = values.astype(np.float64) - values.mean(dtype=np.float64)
    variance = float(np.mean(centred**2))
    return float(np.mean(centred**4)) / variance**2 if variance > 0 else 0.0


def _held_state(param: Any, held_ids: set[int] | None, held_names: set[str]) -> bool | None:
    """Held by the optimizer; None when unknown or when a same-named copy is held (MSD103 explains that)."""
    if held_ids is None:
        return None
    if id(param) in held_ids:
        return True
    return None if param.name in held_names else False


def _calls_per_run(parent: Any, key: str, memo: dict[tuple[int, str], int]) -> int:
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


def _registered_twice(parent: Any, cell: Any) -> bool:
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


def _settings(cell: Any) -> tuple:
    """What a cell computes besides its parameters' values: its class, its public plain settings (channels,
    stride, dilation, padding, flags) and the classes of its child cells (a Dense's activation). Two cells with
    equal settings are copies of one layer: given one matrix, they compute the same function of it."""
    plain = (bool, int, float, str, tuple, type(None))
    values = tuple(sorted((k, repr(v)) for k, v in vars(cell).items()
                          if not k.startswith("_") and k not in _STATE_ATTRIBUTES and isinstance(v, plain)))
    children = tuple(sorted((k, type(c).__name__) for k, c in cell._cells.items() if c is not None))
    return type(cell), values, children


def _fewest_wrappers(paths: dict[tuple[str, ...], str]) -> set[str]:
    """Of a Parameter's registration paths (alias -> path), those crossing the fewest wrapper segments. A model
    reached both directly and through a train cell wrapping it (a hand-written train step, and the model called
    again for accuracy: the GCN model zoo's ``TrainNetWrapper``) is one model seen twice, not a shared weight."""
    crossed = {path: len(path.split(".") if path else ()) - len(alias) for alias, path in paths.items()}
    fewest = min(crossed.values())
    return {path for path, count in crossed.items() if count == fewest}


def _computing_holders(owners: list[tuple[Any, list[str]]]) -> list[tuple[Any, list[str]]]:
    """The (cell, paths) holding a Parameter that compute with it. A loss cell that also holds a model weight reads
    it for a penalty (the GCN model zoo's ``Loss`` keeps the first layer's weight as ``self.param`` for an L2 term):
    not a second use of the weight. It counts only when no other cell holds the Parameter."""
    computing = [(cell, paths) for cell, paths in owners
                 if not ("LossBase" in _class_names(cell) or type(cell).__name__.endswith("Loss"))]
    return computing or owners


def _network_params(network: Any, held: list[Any] | None) -> list[ParamSignal]:
    held_ids = None if held is None else {id(p) for p in held}
    held_names = {p.name for p in held or ()}
    seen: dict[int, dict[str, Any]] = {}
    cells: dict[str, Any] = {}
    runs: dict[str, int] = {}
    repeated: dict[str, bool] = {}
    counts: dict[tuple[int, str], int] = {}
    for path, alias, cell, parent, key in _walk(network):
        cells[path] = cell
        if parent is None:
            runs[path], repeated[path] = 1, False
        else:
            parent_path = path.rpartition(".")[0]
            runs[path] = runs[parent_path] * _calls_per_run(parent, key, counts)
            repeated[path] = repeated[parent_path] or _registered_twice(parent, cell)
        for param_key, param, listed in _own_params(cell):
            entry = seen.get(id(param))
            if entry is None or (entry["listed"] and not listed):
                entry = seen[id(param)] = {"param": param, "cell": cell, "parent": parent, "key": key,
                                           "param_key": param_key, "listed": listed, "paths": {}, "owners": {}}
            if listed == entry["listed"]:
                if entry["paths"].setdefault(alias, path) == path:
                    entry["owners"].setdefault(id(cell), (cell, []))[1].append(path)
    flow = ScaleFlow(cells)
    signals = []
    for entry in seen.values():
        param, cell = entry["param"], entry["cell"]
        shape = tuple(int(d) for d in param.shape)
        role = _role(cell, entry["param_key"], param)
        fan_in, fan_out = _fans(cell, shape) if role == WEIGHT else (None, None)
        direct = _fewest_wrappers(entry["paths"])
        owners = _computing_holders([(owner, [p for p in held if p in direct])
                                     for owner, held in entry["owners"].values() if direct.intersection(held)])
        paths = tuple(path for path in entry["paths"].values() if any(path in held for _, held in owners))
        signals.append(
            ParamSignal(
                name=param.name,
                cell=paths[0],
                key=entry["param_key"],
                cell_type=type(cell).__name__,
                role=role,
                shape=shape,
                requires_grad=bool(param.requires_grad),
                paths=paths,
                uses=sum(runs[p] for p in paths),
                repeated=any(repeated[p] for p in paths),
                owner_types=tuple(type(owner).__name__ for owner, _ in owners),
                owner_cells=tuple(owner_paths[0] for _, owner_paths in owners),
                owners_running=sum(any(runs[p] for p in owner_paths) for _, owner_paths in owners),
                owners_alike=len(owners) > 1 and len({_settings(owner) for owner, _ in owners}) == 1,
                in_optimizer=_held_state(param, held_ids, held_names),
                fan_in=fan_in,
                fan_out=fan_out,
                activation=_following_activation(cell, entry["parent"], entry["key"]) if fan_in else None,
                scale_reset=flow.scale_reset(paths) if fan_in else None,
                at_init=None if param.requires_grad else _frozen_state(param, cell, role, paths, flow, cells),
                fixed=_fixed(param, cell, role),
                **_measure(param, role, fan_in),
            )
        )
    return signals


def _train_cell(ctx: LintContext) -> Any:
    """The train cell: the one given as ``train_network`` (the Doctor's), else the linted network itself."""
    from mindspore import nn

    return next((c for c in (ctx.train_network, ctx.network) if isinstance(c, nn.TrainOneStepCell)), None)


def _optimizer(ctx: LintContext) -> Any:
    optimizer = ctx.optimizer if ctx.optimizer is not None else getattr(_train_cell(ctx), "optimizer", None)
    if optimizer is not None and not _is_optimizer(optimizer):
        raise CheckSkipped(f"`optimizer` is a {type(optimizer).__name__}, not a MindSpore optimizer")
    return optimizer


def param_signals(ctx: LintContext) -> list[ParamSignal]:
    """Measured once per lint and shared by the checks (the walk and host copies are the cost)."""
    cache = ctx.memo
    if _CACHE_KEY not in cache:
        optimizer = _optimizer(ctx)
        held = None if optimizer is None else list(optimizer.parameters)
        cache[_CACHE_KEY] = _network_params(ctx.network, held)
    return cache[_CACHE_KEY]


def _family(optimizer: Any) -> tuple[str | None, Any]:
    """Optimizer family and the optimizer that owns the learning rate (LARS wraps another one)."""
    inner = optimizer._cells.get("opt") if "LARS" in _class_names(optimizer) else None
    if inner is not None:
        optimizer = inner
    for name in _class_names(optimizer):
        if name in _SGD_FAMILY:
            return "sgd", optimizer
        if name in _ADAM_FAMILY:
            return "adam", optimizer
    return None, optimizer


def _lr_peak(lr: Any) -> tuple[float | None, str]:
    """Largest learning rate a value or schedule reaches, and what kind of value it was."""
    from mindspore import Tensor

    if isinstance(lr, (int, float)):
        return float(lr), "constant"
    if isinstance(lr, Tensor):
        values = lr.asnumpy()
        return float(np.max(values)), "constant" if values.size == 1 else "list"
    inner = lr._params.get("learning_rate") if hasattr(lr, "_params") else None
    if inner is not None and type(lr).__name__ in ("_IteratorLearningRate", "_ConvertToCell"):
        return _lr_peak(inner)
    if type(lr).__module__ == "mindspore.nn.learning_rate_schedule":
        peaks = [float(getattr(lr, a)) for a in _SCHEDULE_PEAK_ATTRS if isinstance(getattr(lr, a, None), (int, float))]
        if peaks:
            return max(peaks), type(lr).__name__
    return None, type(lr).__name__


def _grouped(pairs: list[tuple[Any, Any]], key) -> list[tuple[Any, list[str]]]:
    """(setting, parameter) pairs -> one (setting, parameter names) entry per distinct ``key(setting)``."""
    users: dict[Any, tuple[Any, list[str]]] = {}
    for setting, param in pairs:
        users.setdefault(key(setting), (setting, []))[1].append(param.name)
    return list(users.values())


def _label(index: int, count: int) -> str:
    return "" if count == 1 else f"group {index}"


def _lr_groups(optimizer: Any) -> tuple[LrGroup, ...]:
    """One entry per distinct learning rate, with the parameters it drives (group lr is per parameter). An
    ``nn.Optimizer``'s groups are read as the training probe reads them (``probes.learning_rate.rate_groups``);
    what differs is the question: the peak each rate can reach, known before training (a schedule's attributes),
    where the probe reads the rate at the step just run."""
    if hasattr(optimizer, "param_groups"):  # mindspore.experimental.optim
        users = _grouped([(g.get("lr"), p) for g in optimizer.param_groups for p in g.get("params", ())], id)
    else:
        from mindspore_doctor.probes.learning_rate import rate_groups

        rates, group_of = rate_groups(optimizer)
        users = [(rate, []) for rate in rates]
        for group, param in zip(group_of, optimizer.parameters):
            users[group][1].append(param.name)
    groups = []
    for index, (rate, names) in enumerate(users):
        peak, kind = _lr_peak(rate)
        groups.append(LrGroup(_label(index, len(users)), peak, kind, tuple(names)))
    return tuple(groups)


def _decay_value(value: Any) -> float | None:
    """A weight decay as a number; None for a dynamic (Cell) decay whose values cannot be read statically."""
    from mindspore import Tensor

    if isinstance(value, (int, float)):
        return float(value)
    return float(np.max(value.asnumpy())) if isinstance(value, Tensor) else None


def _decay_groups(optimizer: Any, roles: dict[str, str]) -> tuple[DecayGroup, ...]:
    """One entry per distinct non-zero weight decay, with the parameters it decays (a MindSpore optimizer
    skips the parameters its ``decay_filter`` excludes, by default gamma/beta outside parameter groups)."""
    if hasattr(optimizer, "param_groups"):  # mindspore.experimental.optim
        pairs = [(g.get("weight_decay", 0.0), p) for g in optimizer.param_groups for p in g.get("params", ())]
    elif getattr(optimizer, "dynamic_weight_decay", False):
        return ()
    else:
        decay = optimizer.weight_decay
        values = decay if isinstance(decay, (tuple, list)) else [decay] * len(optimizer.parameters)
        flags = getattr(optimizer, "decay_flags", None) or [True] * len(optimizer.parameters)
        pairs = [(value if flag else 0.0, p) for value, flag, p in zip(values, flags, optimizer.parameters)]
    pairs = [(value, p) for value, p in ((_decay_value(v), p) for v, p in pairs) if value]
    users = _grouped(pairs, lambda value: value)
    exempt = (NORM_GAMMA, NORM_BETA, BIAS)
    return tuple(
        DecayGroup(_label(index, len(users)), value, tuple(names), tuple(n for n in names if roles.get(n) in exempt))
        for index, (value, names) in enumerate(users)
    )


def optimizer_signal(ctx: LintContext) -> OptimizerSignal | None:
    optimizer = _optimizer(ctx)
    if optimizer is None:
        return None
    network_ids: set[int] = set()
    network_names: set[str] = set()
    for root in (ctx.network, ctx.loss_fn):
        for _, _, cell, _, _ in _walk(root) if root is not None and hasattr(root, "_cells") else ():
            for _, param, _ in _own_params(cell):
                network_ids.add(id(param))
                network_names.add(param.name)
    held = list(optimizer.parameters)
    foreign = tuple(p.name for p in held if id(p) not in network_ids)
    family, _ = _family(optimizer)
    return OptimizerSignal(
        cls=type(optimizer).__name__,
        family=family,
        foreign=foreign,
        foreign_same_name=tuple(n for n in foreign if n in network_names),
        held=len(held),
    )


def _precision(network: Any) -> tuple[tuple[str, ...], bool]:
    """Cell paths that compute in float16, and whether anything runs in fp16/bf16 at all."""
    import mindspore as ms

    fp16: list[str] = []
    low = False
    for path, cell in network.cells_and_names():
        kind = getattr(getattr(cell, "mixed_precision_type", None), "name", None)
        amp = getattr(cell, "_amp_level", "") in ("O1", "O2", "O3")
        dtypes = {p.dtype for p in cell._params.values() if p is not None}
        if kind == "FP16" or amp or ms.float16 in dtypes:
            fp16.append(path)
        low = low or bool(fp16) or kind == "BF16" or ms.bfloat16 in dtypes
    return tuple(fp16), low


def loss_scale_signal(ctx: LintContext) -> LossScaleSignal | None:
    from mindspore import nn

    train = _train_cell(ctx)
    optimizer = _optimizer(ctx)
    if train is None and optimizer is None:
        return None
    opt_scale = getattr(optimizer, "loss_scale", None)
    fp16_cells, low = _precision(train if train is not None else ctx.network)  # the precision trained
    signal: dict[str, Any] = {}
    if isinstance(train, nn.TrainOneStepWithLossScaleCell):
        manager = type(getattr(train, "loss_scaling_manager", None)).__name__
        signal = {
            "scale_sense": float(np.max(train.scale_sense.asnumpy())),
            "scale_manager": "dynamic" if manager.startswith("Dynamic") else "fixed",
        }
    elif train is not None:
        signal = {"sens": float(train.sens)}
    return LossScaleSignal(
        network_is_train_cell=train is not None,
        fp16_cells=fp16_cells,
        low_precision=low,
        optimizer_loss_scale=None if opt_scale is None else float(opt_scale),
        train_cell=None if train is None else type(train).__name__,
        **signal,
    )


def learning_rate_signal(ctx: LintContext) -> OptimizerSignal | None:
    """The optimizer's learning rate per parameter group (MSD111); None without an optimizer."""
    optimizer = _optimizer(ctx)
    if optimizer is None:
        return None
    family, owner = _family(optimizer)
    if family is None:
        raise CheckSkipped(f"no sane learning-rate range is known for {type(optimizer).__name__}")
    groups = _lr_groups(owner)
    if all(g.peak is None for g in groups):
        kinds = ", ".join(sorted({g.kind for g in groups}))
        raise CheckSkipped(f"the learning rate of {type(optimizer).__name__} is a {kinds} whose values cannot be read")
    return OptimizerSignal(cls=type(optimizer).__name__, family=family, lr_groups=groups)


def weight_decay_signal(ctx: LintContext) -> OptimizerSignal | None:
    """The optimizer's weight decay per group of parameters (MSD116); None when nothing is decayed."""
    optimizer = _optimizer(ctx)
    if optimizer is None:
        return None
    family, owner = _family(optimizer)
    groups = _decay_groups(owner, {p.name: p.role for p in param_signals(ctx)})
    if not groups:
        return None
    if family is None:
        raise CheckSkipped(f"no usual weight-decay range is known for {type(optimizer).__name__}")
    return OptimizerSignal(cls=type(optimizer).__name__, family=family, decay_groups=groups)
