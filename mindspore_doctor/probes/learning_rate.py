"""The optimizer's learning rates on the host, per group, without advancing its schedule; and its one fixed rate."""
from __future__ import annotations

from typing import Any

import numpy as np
from mindspore import Tensor

from mindspore_doctor.probes.host import host_flat
from mindspore_doctor.probes.loss import host_scalar

LearningRates = tuple[list[float], list[float | None], list[int]]


def fixed_learning_rate(optimizer: Any) -> float | None:
    """The ``nn.Optimizer``'s single fixed learning rate, read on the host (never through ``get_lr()``, which
    advances ``global_step``); None for a schedule, a per-step list, per-group rates, or an optimizer without
    ``learning_rate`` (``mint.optim``'s keep theirs in ``param_groups``): the rate a run starts from, for the run's
    record, the tuner's search space and the sanity checks' range test, which sets it."""
    rate = getattr(optimizer, "learning_rate", None)
    if not isinstance(rate, Tensor) or rate.size != 1 or getattr(optimizer, "is_group_lr", False):
        return None
    return host_scalar(rate)


def rate_groups(optimizer: Any) -> tuple[list[Any], list[int]]:
    """An ``nn.Optimizer``'s learning-rate groups as it holds them: its distinct rate objects (a Parameter, a
    per-step list, a schedule cell), first use first, and each parameter's group. It holds one rate object per
    parameter, shared within a group, so identity groups them; nothing is read or advanced. The one reading of the
    groups for the training probe (``learning_rates``) and lint's MSD111 (``static/optimizer_settings._lr_groups``)."""
    rates = (list(optimizer.learning_rate) if getattr(optimizer, "is_group_lr", False)
             else [optimizer.learning_rate] * len(optimizer.parameters))
    index: dict[int, int] = {}  # id(rate object) -> group
    distinct: list[Any] = []
    for rate in rates:
        if id(rate) not in index:
            index[id(rate)] = len(distinct)
            distinct.append(rate)
    return distinct, [index[id(rate)] for rate in rates]


def learning_rates(optimizer: Any) -> LearningRates | None:
    """Per learning-rate group: (its rate at the step just run, its schedule's peak when known up front), and each
    optimizer parameter's group. None when a rate cannot be read.

    ``nn.Optimizer`` holds one rate object per parameter, shared within a group; it is read on the host, never
    through ``optimizer.get_lr()``, which advances ``global_step``. A fixed rate is a Parameter; a per-step list
    is an array (MindSpore's ``_IteratorLearningRate``) indexed by the step the optimizer ran; another schedule
    cell is called on that step (it only computes; no peak up front). ``mint.optim`` / ``experimental.optim``
    optimizers hold each group's current rate in ``param_groups[i]["lr"]`` (their schedulers write it).
    """
    if hasattr(optimizer, "param_groups"):
        return _param_group_rates(optimizer)
    from mindspore.nn.learning_rate_schedule import LearningRateSchedule
    from mindspore.nn.optim import optimizer as optim_module

    per_step_list = getattr(optim_module, "_IteratorLearningRate", ())
    counter = getattr(optimizer, "global_step", None)
    if counter is None:
        return None
    step = max(int(host_flat(counter)[0]) - 1, 0)  # get_lr advanced it during the step
    rates, group_of = rate_groups(optimizer)
    now: list[float] = []
    peaks: list[float | None] = []
    for rate in rates:
        table = rate.learning_rate if isinstance(rate, per_step_list) else rate
        if isinstance(table, Tensor):  # a Parameter: one fixed rate, or one per step
            values = host_flat(table).astype(np.float64)
            now.append(float(values[min(step, values.size - 1)]))
            peaks.append(float(values.max()))
        elif isinstance(rate, LearningRateSchedule):
            now.append(host_scalar(rate(Tensor(np.array(step, np.int32)))))
            peaks.append(None)
        else:
            return None
    return (now, peaks, group_of) if now else None


def _param_group_rates(optimizer: Any) -> LearningRates | None:
    group_of = {id(p): i for i, group in enumerate(optimizer.param_groups) for p in group.get("params", ())}
    now = [host_scalar(group["lr"]) for group in optimizer.param_groups if group.get("lr") is not None]
    if len(now) != len(optimizer.param_groups) or any(id(p) not in group_of for p in optimizer.parameters):
        return None
    return now, [None] * len(now), [group_of[id(p)] for p in optimizer.parameters]
