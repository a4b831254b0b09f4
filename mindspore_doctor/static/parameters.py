"""Probe for parameters, initialisation and the optimizer (MSD101-103, 108, 109, 111, 112).

Walks the cell tree of the linted network (every registration path, so a cell
registered twice is seen twice), the optimizer and, when ``lint`` receives a
train cell, its loss-scale attributes; turns them into the plain signals of
``rules/parameters.py`` and lets those rules judge. Each tensor is copied to
host once, and only for parameters whose init is judged.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterator

import numpy as np

from mindspore_doctor.findings import Finding
from mindspore_doctor.rules import parameters as rules
from mindspore_doctor.rules.parameters import LossScaleSignal, LrGroup, OptimizerSignal, ParamSignal
from mindspore_doctor.checks import Check, CheckSkipped
from mindspore_doctor.static.inspector import LintContext

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
    return [c.__name__ for c in type(obj).__mro__]


def _is_wrapper(cell: Any) -> bool:
    """Train/loss/AMP wrappers: they alias the network, they are not part of the model."""
    from mindspore import nn

    return isinstance(cell, (nn.Optimizer, nn.WithLossCell, nn.WithEvalCell, nn.WithGradCell, nn.TrainOneStepCell)) or (
        type(cell).__module__.startswith(_WRAPPER_MODULES)
    )


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
            return rules.NORM_GAMMA
        return rules.NORM_BETA if lowered in ("beta", "bias") else rules.BUFFER
    if param.dtype not in (ms.float16, ms.float32, ms.float64, ms.bfloat16):
        return rules.BUFFER
    if "bias" in lowered:
        return rules.BIAS
    if len(param.shape) < 2:
        return rules.OTHER
    if any("Embedding" in n for n in names):
        return rules.EMBEDDING
    if _RECURRENT_CLASSES.intersection(names):
        return rules.RECURRENT
    if _FAN_KNOWN_CLASSES.intersection(names) or "weight" in lowered or "kernel" in lowered:
        return rules.WEIGHT
    return rules.OTHER


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
            return name if name in rules.RELU_LIKE or name in rules.SATURATING else None
    return None


def _host_array(param: Any) -> np.ndarray | None:
    """float32 host copy; None for a parameter whose data is not initialised yet (lazy init)."""
    import mindspore as ms

    if getattr(param, "has_init", False):
        return None
    if param.dtype == ms.bfloat16:
        param = param.astype(ms.float32)
    return np.asarray(param.asnumpy(), dtype=np.float32)


def _measure(param: Any, role: str, fan_in: int | None) -> dict[str, Any]:
    if role not in rules.INIT_CHECKED or math.prod(param.shape) <= 1:
        return {}
    values = _host_array(param)
    if values is None or values.size == 0:
        return {}
    low, high = values.min(), values.max()
    equal = bool(low == high)
    stats: dict[str, Any] = {"all_equal": equal, "constant": float(low) if equal else None}
    if role == rules.WEIGHT and fan_in and not equal:
        stats["std"] = float(values.std(dtype=np.float64))
    return stats


def _held_state(param: Any, held_ids: set[int] | None, held_names: set[str]) -> bool | None:
    """Held by the optimizer; None when unknown or when a same-named copy is held (MSD103 explains that)."""
    if held_ids is None:
        return None
    if id(param) in held_ids:
        return True
    return None if param.name in held_names else False


def _network_params(network: Any, held: list[Any] | None) -> list[ParamSignal]:
    held_ids = None if held is None else {id(p) for p in held}
    held_names = {p.name for p in held or ()}
    seen: dict[int, dict[str, Any]] = {}
    for path, alias, cell, parent, key in _walk(network):
        for param_key, param, listed in _own_params(cell):
            entry = seen.get(id(param))
            if entry is None or (entry["listed"] and not listed):
                entry = seen[id(param)] = {"param": param, "cell": cell, "parent": parent, "key": key,
                                           "param_key": param_key, "listed": listed, "paths": {}}
            if listed == entry["listed"]:
                entry["paths"].setdefault(alias, path)
    signals = []
    for entry in seen.values():
        param, cell = entry["param"], entry["cell"]
        shape = tuple(int(d) for d in param.shape)
        role = _role(cell, entry["param_key"], param)
        fan_in, fan_out = _fans(cell, shape) if role == rules.WEIGHT else (None, None)
        paths = tuple(entry["paths"].values())
        signals.append(
            ParamSignal(
                name=param.name,
                cell=paths[0],
                cell_type=type(cell).__name__,
                role=role,
                shape=shape,
                requires_grad=bool(param.requires_grad),
                paths=paths,
                in_optimizer=_held_state(param, held_ids, held_names),
                fan_in=fan_in,
                fan_out=fan_out,
                activation=_following_activation(cell, entry["parent"], entry["key"]) if fan_in else None,
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


def _param_signals(ctx: LintContext) -> list[ParamSignal]:
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


def _lr_groups(optimizer: Any) -> tuple[LrGroup, ...]:
    """One entry per distinct learning rate, with the parameters it drives (group lr is per parameter)."""
    if hasattr(optimizer, "param_groups"):  # mindspore.experimental.optim
        pairs = [(g.get("lr"), p) for g in optimizer.param_groups for p in g.get("params", ())]
    elif getattr(optimizer, "is_group_lr", False):
        pairs = list(zip(optimizer.learning_rate, optimizer.parameters))
    else:
        pairs = [(optimizer.learning_rate, p) for p in optimizer.parameters]
    users: dict[int, tuple[Any, list[str]]] = {}
    for rate, param in pairs:
        users.setdefault(id(rate), (rate, []))[1].append(param.name)
    groups = []
    for index, (rate, names) in enumerate(users.values()):
        peak, kind = _lr_peak(rate)
        groups.append(LrGroup("" if len(users) == 1 else f"group {index}", peak, kind, tuple(names)))
    return tuple(groups)


def _optimizer_signal(ctx: LintContext) -> OptimizerSignal | None:
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


def _loss_scale_signal(ctx: LintContext) -> LossScaleSignal | None:
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


def check_ownership(ctx: LintContext) -> list[Finding]:
    params = _param_signals(ctx)
    found = rules.shared_parameter(params, ctx.config) + rules.frozen_parameter(params, ctx.config)
    optimizer = _optimizer_signal(ctx)
    if optimizer is not None:
        found += rules.foreign_optimizer_parameter(optimizer, ctx.config)
    return found


def check_initialization(ctx: LintContext) -> list[Finding]:
    params = _param_signals(ctx)
    return rules.zero_initialized_weight(params, ctx.config) + rules.poor_initialization(params, ctx.config)


def check_learning_rate(ctx: LintContext) -> list[Finding]:
    optimizer = _optimizer(ctx)
    if optimizer is None:
        return []
    family, owner = _family(optimizer)
    if family is None:
        raise CheckSkipped(f"no sane learning-rate range is known for {type(optimizer).__name__}")
    groups = _lr_groups(owner)
    if all(g.peak is None for g in groups):
        kinds = ", ".join(sorted({g.kind for g in groups}))
        raise CheckSkipped(f"the learning rate of {type(optimizer).__name__} is a {kinds} whose values cannot be read")
    signal = OptimizerSignal(cls=type(optimizer).__name__, family=family, lr_groups=groups)
    return rules.learning_rate_out_of_range(signal, ctx.config)


def check_loss_scale(ctx: LintContext) -> list[Finding]:
    signal = _loss_scale_signal(ctx)
    return [] if signal is None else rules.loss_scale_misconfigured(signal, ctx.config)


CHECKS = [
    Check("parameter-ownership", ("MSD101", "MSD102", "MSD103"), check_ownership),
    Check("initialization", ("MSD108", "MSD109"), check_initialization),
    Check("learning-rate", ("MSD111",), check_learning_rate),
    Check("loss-scale", ("MSD112",), check_loss_scale),
]
SOURCE_CHECKS: list = []
