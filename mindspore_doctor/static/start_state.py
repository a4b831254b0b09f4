"""Does a training run start from freshly initialised weights? Measured before its first step (MSD205, MSD215).

A second ``model.train`` call, a run resumed from a checkpoint and a fine-tuning run start from trained weights:
their first losses show what the network learned before, not how it was initialised. The evidence, surest and
cheapest first; the first that shows training decides:

1. the network's parameters trained under a Doctor earlier in this process (``mark_trained`` at each run's end:
   a second ``model.train`` call, a reused Doctor, a trained backbone under a new head);
2. the optimizer has stepped: its step counter (``global_step``, ``state_step``) is above 0, or a state slot
   (moments, accumulators) holds values that are not all equal, as gradients leave them;
3. a parameter is not at its initialisation (``static/param_origin.py``, as for MSD102): a normalisation scale or
   shift that is not constant, a uniform-shaped weight past its init bound;
4. a trainable weight whose rows (units) or columns (inputs) differ in size far beyond chance: every MindSpore
   initializer draws each value alike and independently, training makes some units and inputs matter more.

3 and 4 find checkpoints loaded into a new network (``load_checkpoint``, ``load_param_into_net``); a short
training of a small network without normalisation may show neither, and then nothing tells. Only a sample of
each tensor is copied to the host; nothing is compiled.
"""
from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np

from mindspore_doctor.signals import StartState
from mindspore_doctor.static.param_origin import ParameterStart, parameter_starts
from mindspore_doctor.static.param_values import host_array
from mindspore_doctor.static.signals import NORM_BETA, NORM_GAMMA, WEIGHT

_SAMPLE = 16384
"""Values copied to the host per tensor (64 KiB): whole rows of a weight with a fan-in up to 1024, for test 4."""
_STEP_COUNTERS = ("global_step", "state_step")
"""The optimizers' step counters: ``nn.Optimizer``'s; ``mint.optim`` and ``mindspore.experimental.optim``'s."""
_MIN_LINES = 16
"""Rows, and values per row, that test 4 needs: fewer scatter too much to tell."""
_CHANCE_Z = 6.0
"""Test 4's threshold in standard deviations: a random init passes it but about once in a billion weights."""

_trained: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
"""id -> Parameter, for each parameter a run under a Doctor trained, as long as the parameter lives."""


def mark_trained(network: Any, steps: int) -> None:
    """Remember the parameters of ``network`` as trained when the run took a step: a later run on them starts
    from trained weights, whichever Doctor watches it."""
    if network is None or steps < 1:
        return
    for param in network.get_parameters():
        _trained[id(param)] = param


def start_state(network: Any, optimizer: Any) -> StartState:
    """Whether ``network`` (with ``optimizer``, None when there is none) starts training from fresh weights."""
    stepped = _trained_earlier(network) or _optimizer_stepped(optimizer)
    if stepped:
        return StartState(False, stepped)
    at_init, unknown = [], []
    starts = list(parameter_starts(network, _SAMPLE))
    for start in sorted(starts, key=lambda s: s.role not in (NORM_GAMMA, NORM_BETA)):  # the surest evidence first
        moved = _moved_from_init(start)
        if moved:
            return StartState(False, moved)
        (at_init if start.at_init else unknown).append(start.name)
    optimizer_state = (f"{type(optimizer).__name__} at step 0 with its state as initialised; "
                       if optimizer is not None else "")
    if not at_init:
        return StartState(None, f"{optimizer_state}none of the {len(unknown)} parameters shows training, and none "
                                "holds an initialisation whose values can be checked (a Normal init has no bound)")
    return StartState(True, f"{optimizer_state}{len(at_init)} of {len(at_init) + len(unknown)} parameters hold the "
                            "values of a MindSpore initialisation (constant, or uniform within its bound), none shows "
                            "training")


def _trained_earlier(network: Any) -> str | None:
    params = list(network.get_parameters())
    trained = [p.name for p in params if _trained.get(id(p)) is p]
    if not trained:
        return None
    return (f"{len(trained)} of {len(params)} parameters (`{trained[0]}`...) trained under a Doctor earlier in "
            "this process (a second model.train call, or a trained network reused)")


def _optimizer_stepped(optimizer: Any) -> str | None:
    """A step counter above 0, or a state slot of a held parameter (``moments.<name>``) that is not constant."""
    if not hasattr(optimizer, "parameters_and_names"):
        return None
    held = {id(p): p.name for p in getattr(optimizer, "parameters", ())}
    kind = type(optimizer).__name__
    for _, param in optimizer.parameters_and_names():
        name = param.name
        counter, slot = name.rsplit(".", 1)[-1] in _STEP_COUNTERS, name.partition(".")[2] in held.values()
        values = host_array(param, _SAMPLE) if id(param) not in held and (counter or slot) else None
        if values is None or values.size == 0:
            continue
        low, high = float(values.min()), float(values.max())
        if counter and high > 0:
            return f"{kind} has taken {high:.0f} steps already (`{name}`): its state was trained or loaded"
        if slot and low != high:
            return (f"{kind} state `{name}` holds values from {low:.3g} to {high:.3g}, not the constant it starts "
                    "at: the optimizer has stepped (trained or loaded)")
    return None


def _moved_from_init(start: ParameterStart) -> str | None:
    """Why ``start`` holds trained or loaded values (tests 3 and 4), or None when it may be at its init."""
    values, where = start.sample, f"{start.cell_type} `{start.name}`"
    if start.at_init is False and start.role in (NORM_GAMMA, NORM_BETA):
        return (f"{where} is not constant (from {values.min():.3g} to {values.max():.3g}): a normalisation starts "
                "at scale 1 / shift 0, so it was trained or loaded")
    if start.at_init is False:
        return (f"{where} has the spread of a uniform init (std*sqrt(3) = {values.std() * 3 ** 0.5:.3g}) but values "
                f"up to {abs(values).max():.3g}, past its bound: trained or loaded weights")
    uneven = _uneven_lines(values, start.shape) if start.role == WEIGHT and start.requires_grad else None
    if uneven:
        lines, count, dispersion, chance = uneven
        return (f"{where}: the squared norms of its {count} sampled {lines} scatter {dispersion:.3g}x as much as "
                f"independent draws of one init would (at most {chance:.3g}x by chance): trained or loaded weights")
    return None


def _uneven_lines(sample: np.ndarray, shape: tuple[int, ...]) -> tuple[str, int, float, float] | None:
    """Rows or columns of a weight sample whose squared norms scatter beyond chance: (which, how many, their
    dispersion, its chance limit), or None. Under independent draws of one distribution, each row's sum of squares
    has variance width * (m4 - m2^2): the normalised sum of squared deviations is chi-square; its limit at
    ``_CHANCE_Z`` is taken by the Wilson-Hilferty approximation."""
    width = math.prod(shape[1:])
    rows = sample.size // width if len(shape) >= 2 and width else 0
    if rows < _MIN_LINES or width < _MIN_LINES:
        return None
    squares = sample[: rows * width].reshape(rows, width).astype(np.float64) ** 2
    m2, m4 = squares.mean(), (squares**2).mean()
    if m4 - m2 * m2 <= 0:
        return None
    for axis, lines in ((1, "rows"), (0, "columns")):
        sums = squares.sum(axis=axis)
        df = sums.size - 1
        dispersion = float(((sums - sums.mean()) ** 2).sum() / (squares.shape[axis] * (m4 - m2 * m2) * df))
        chance = (1 - 2 / (9 * df) + _CHANCE_Z * math.sqrt(2 / (9 * df))) ** 3
        if dispersion > chance:
            return lines, sums.size, dispersion, chance
    return None
