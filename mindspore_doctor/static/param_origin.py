"""Where a parameter's values come from: still what MindSpore initialises it with, loaded or trained, or a fixed
kernel written by code (MSD102's frozen parameters; ``static/start_state.py``'s run start).

Constant values and uniform draws within a known init bound are an init; a normalization scale/shift that is not
constant, or a uniform-shaped weight past its bound, is trained; a frozen layer whose output a trained
normalization reads was trained (or loaded) with it.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, NamedTuple

import numpy as np

from mindspore_doctor.static.cell_walk import class_names, own_params, walk_cells
from mindspore_doctor.static.dataflow import ScaleFlow
from mindspore_doctor.static.param_roles import RECURRENT_CLASSES, fans, param_role
from mindspore_doctor.static.param_values import host_array, kurtosis
from mindspore_doctor.static.signals import BIAS, NORM_BETA, NORM_GAMMA, RECURRENT, TRAINABLE_LOOKING, WEIGHT

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
    if role == RECURRENT or (role == BIAS and RECURRENT_CLASSES.intersection(class_names(cell))):
        hidden = getattr(cell, "hidden_size", None)
        return [1 / math.sqrt(hidden)] if hidden else []
    weight = cell._params.get("weight")
    fan_in, fan_out = fans(cell, tuple(int(d) for d in weight.shape)) if weight is not None else (None, None)
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
    if sample and kurtosis(values) > _UNIFORM_KURTOSIS:
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


def frozen_state(param: Any, cell: Any, role: str, paths: tuple[str, ...], flow: ScaleFlow,
                  cells: dict[str, Any]) -> bool | None:
    """``at_init`` of a frozen parameter: its own values tell (``_at_init``), else the normalization that reads
    its layer's output: one with trained scale/shift (not constant) was trained on what this layer computes,
    so the layer holds trained or loaded values too (a conv and its BatchNorm loaded from one checkpoint)."""
    state = _at_init(param, cell, role)
    if state is None and role in TRAINABLE_LOOKING:
        return False if any(_trained_norm(cells[path]) for path in flow.normalized_by(paths)) else None
    return state


def _trained_norm(norm: Any) -> bool:
    return any(_at_init(p, norm, param_role(norm, key, p)) is False for key, p, _ in own_params(norm))


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
    for _, _, cell, _, _ in walk_cells(network):
        for key, param, _ in own_params(cell):
            if id(param) in seen:
                continue
            seen.add(id(param))
            role = param_role(cell, key, param)
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


def is_fixed(param: Any, cell: Any, role: str) -> bool:
    """A frozen parameter of a fixed layer: the cell's frozen weight is a deterministic kernel (4+ values, not all
    equal, on a grid: mindyolo's DFL projection ``arange(reg_max)``), and this parameter is on a grid too (a
    zero bias beside it). A constant kernel alone is not fixed: it is what a constant init leaves."""
    if param.requires_grad or role not in TRAINABLE_LOOKING:
        return False
    values = host_array(param)
    if values is None or not _on_grid(values):
        return False
    for key, weight, _ in own_params(cell):
        kernel = host_array(weight) if not weight.requires_grad and param_role(cell, key, weight) == WEIGHT else None
        if kernel is not None and kernel.size >= 4 and kernel.min() != kernel.max() and _on_grid(kernel):
            return True
    return False
