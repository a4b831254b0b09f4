"""Probe for the optimizer and the train cell (MSD103, 111, 112, 116, 117): which parameters the optimizer holds,
its learning rate, weight decay and momentum per parameter group, and the loss scaling of the train cell around it.

Turns them into the plain signals of ``static/signals.py`` (``OptimizerSignal``, ``LossScaleSignal``) that the
rules of ``rules/parameters/`` judge.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.static.cell_walk import class_names, lint_optimizer, lint_train_cell, own_params, walk_cells
from mindspore_doctor.static.context import LintContext
from mindspore_doctor.static.parameters import param_signals
from mindspore_doctor.static.signals import (
    BIAS,
    NORM_BETA,
    NORM_GAMMA,
    DecayGroup,
    LossScaleSignal,
    LrGroup,
    MomentumGroup,
    OptimizerSignal,
)

_SGD_FAMILY = ("SGD", "Momentum", "ASGD")
_ADAM_FAMILY = ("Adam", "AdamWeightDecay", "AdamOffload", "LazyAdam", "Lamb", "AdaMax", "Adamax", "AdamW", "NAdam", "RAdam")
_SCHEDULE_PEAK_ATTRS = ("learning_rate", "max_lr", "start_learning_rate", "end_learning_rate")


def _family(optimizer: Any) -> tuple[str | None, Any]:
    """Optimizer family and the optimizer that owns the learning rate (LARS wraps another one)."""
    inner = optimizer._cells.get("opt") if "LARS" in class_names(optimizer) else None
    if inner is not None:
        optimizer = inner
    for name in class_names(optimizer):
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
    optimizer = lint_optimizer(ctx)
    if optimizer is None:
        return None
    network_ids: set[int] = set()
    network_names: set[str] = set()
    for root in (ctx.network, ctx.loss_fn):
        for _, _, cell, _, _ in walk_cells(root) if root is not None and hasattr(root, "_cells") else ():
            for _, param, _ in own_params(cell):
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

    train = lint_train_cell(ctx)
    optimizer = lint_optimizer(ctx)
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
    optimizer = lint_optimizer(ctx)
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
    optimizer = lint_optimizer(ctx)
    if optimizer is None:
        return None
    family, owner = _family(optimizer)
    groups = _decay_groups(owner, {p.name: p.role for p in param_signals(ctx)})
    if not groups:
        return None
    if family is None:
        raise CheckSkipped(f"no usual weight-decay range is known for {type(optimizer).__name__}")
    return OptimizerSignal(cls=type(optimizer).__name__, family=family, decay_groups=groups)


def _momentum_value(value: Any) -> float | None:
    """A momentum as a number: a float/int/bool (``mint.optim.SGD(momentum=True)`` is 1), or a one-element Tensor or
    Parameter (``nn.Momentum``/``nn.SGD`` keep it as the Parameter ``momentum``); None for anything else."""
    from mindspore import Tensor

    if isinstance(value, (bool, int, float, np.number)):
        return float(value)
    if isinstance(value, Tensor) and value.size == 1:  # float32: 0.995 is read as 0.99500000476..., shown as 0.995
        return float(f"{float(value.asnumpy().reshape(())):.7g}")
    return None


def _momentum_groups(optimizer: Any) -> tuple[MomentumGroup, ...]:
    """The momentum per parameter group where the optimizer keeps it: ``param_groups[i]["momentum"]``
    (``mint.optim``/``mindspore.experimental.optim``), else its ``momentum`` attribute (one value for all)."""
    if hasattr(optimizer, "param_groups"):
        groups = [(g.get("momentum"), g.get("params", ())) for g in optimizer.param_groups]
    else:
        groups = [(getattr(optimizer, "momentum", None), optimizer.parameters)]
    found = []
    for index, (momentum, params) in enumerate(groups):
        value = _momentum_value(momentum)
        if value is not None:
            found.append(MomentumGroup(_label(index, len(groups)), value, tuple(p.name for p in params)))
    return tuple(found)


def momentum_signal(ctx: LintContext) -> OptimizerSignal | None:
    """The optimizer's momentum per parameter group (MSD117); None without an optimizer or one with no momentum
    (the Adam family: MindSpore range-checks its betas itself)."""
    optimizer = lint_optimizer(ctx)
    if optimizer is None:
        return None
    family, owner = _family(optimizer)  # LARS: the momentum is the wrapped optimizer's
    groups = _momentum_groups(owner)
    return OptimizerSignal(cls=type(owner).__name__, family=family, momentum_groups=groups) if groups else None
