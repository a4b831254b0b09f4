"""Gradients read on the host from the optimizer's own state: no kernel of the Doctor's in the user's graph.

MindSpore's optimizers keep a state per parameter that each step updates from that step's gradient ``d``:
``nn.Momentum``'s accumulator, ``a = a * momentum + d`` (``ApplyMomentum``), and the first moment of ``nn.Adam`` and
``nn.AdamWeightDecay``, ``m = beta1 * m + (1 - beta1) * d`` (``Adam``, ``AdamWeightDecay``), on CPU, GPU and Ascend
alike. ``d`` is the gradient after ``decay_weight`` (``d = g + w * wd``) for Momentum and Adam, the gradient itself for
AdamWeightDecay, whose kernel decays the weight on its own. The host copies the state before a probe step (the weight
is copied already, for the update) and reads it after:

* Momentum: ``d = a_after - float32(a_before * momentum)``, to the rounding of that one addition (exactly 0 where
  nothing was added);
* Adam: ``d = m_before + (m_after - m_before) / (1 - beta1)``, to about ten roundings of ``m`` (relative 1e-6);
* then ``g = d - float32(w * wd)`` where the decay came first.

In the one-graph design this replaces the gradient sums the graph would run on every step: one ``L2Loss`` a tensor,
a ``Mul``, a ``Sub`` and an ``L2Loss`` for a decayed one, ~15 us a kernel on CPU (most of MobileNetV3's and
ShuffleNetV2's probe cost). Only where the step is exactly MindSpore's — the class's own methods, no loss scale,
gradient centralization, weight-decay schedule or lazy/offload/AMSGrad variant — and for float32 tensors the host
copies whole (``max_size``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mindspore import nn

from mindspore_doctor.probes.swap import user_class


def _momentum_gradient(after: np.ndarray, before: np.ndarray, factor: np.float32) -> np.ndarray:
    return after.astype(np.float64) - before * factor  # the product rounded to float32, as the kernel's


def _moment_gradient(after: np.ndarray, before: np.ndarray, factor: np.float32) -> np.ndarray:
    before = before.astype(np.float64)
    return before + (after - before) / (1.0 - np.float64(factor))


@dataclass(frozen=True)
class _StateForm:
    """How one optimizer class's state holds each step's gradient."""

    cls: type
    methods: tuple[str, ...]  # the step: MindSpore's own methods, unchanged
    state: str  # the attribute holding the per-parameter state
    factor: str  # the attribute holding the state's decay factor (momentum, beta1)
    decayed_first: bool  # the state takes the gradient after ``decay_weight``
    off_flags: tuple[str, ...]  # options that change the step (a loss scale, a schedule of the decay...)
    gradient: Callable[[np.ndarray, np.ndarray, np.float32], np.ndarray]


_STEP = ("construct", "decay_weight", "gradients_centralization", "scale_grad", "get_weight_decay")
_FORMS = (
    _StateForm(nn.Momentum, _STEP, "moments", "momentum", True, ("need_scale", "dynamic_weight_decay"),
               _momentum_gradient),
    _StateForm(nn.Adam, _STEP + ("_apply_adam", "_grad_sparse_indices_deduplicate"), "moment1", "beta1", True,
               ("need_scale", "dynamic_weight_decay", "use_lazy", "use_offload", "use_amsgrad"), _moment_gradient),
    _StateForm(nn.AdamWeightDecay, ("construct",), "moments1", "beta1", False, (), _moment_gradient),
)


def _form(optimizer: Any) -> _StateForm | None:
    """The form of ``optimizer``'s step, when it is exactly MindSpore's: a subclass may add anything else."""
    cls = user_class(optimizer)
    for form in _FORMS:
        if not isinstance(optimizer, form.cls):
            continue
        if any(getattr(cls, name) is not getattr(form.cls, name) for name in form.methods):
            return None
        if any(getattr(optimizer, flag, False) for flag in form.off_flags):
            return None
        if form.decayed_first and optimizer.is_group and any(optimizer.grad_centralization_flags):
            return None
        return form
    return None


def _weight_decays(optimizer: nn.Optimizer) -> list[float]:
    """The weight decay ``decay_weight`` applies to each parameter (0.0 where none)."""
    count = len(optimizer.parameters)
    if not optimizer.exec_weight_decay:
        return [0.0] * count
    values = optimizer.weight_decay if optimizer.is_group else (optimizer.weight_decay,) * count
    return [float(value.asnumpy()) if flag else 0.0 for value, flag in zip(values, optimizer.decay_flags)]


class StateGradients:
    """Σg²/2 of the gradients the host derives, on one probe step: ``before()`` ahead of it, ``sums()`` after."""

    def __init__(self, optimizer: nn.Optimizer, form: _StateForm, decays: dict[int, float]) -> None:
        self.optimizer, self.form = optimizer, form
        self.state = getattr(optimizer, form.state)
        self.decays = {i: np.float32(wd) for i, wd in decays.items()}
        self._before: dict[int, np.ndarray] | None = None
        self._factor = np.float32(0.0)

    @classmethod
    def of(cls, optimizer: Any, max_size: int) -> "StateGradients | None":
        """For the parameters of ``optimizer`` whose gradient the host can derive; None when there are none."""
        form = _form(optimizer)
        if form is None:
            return None
        decays = _weight_decays(optimizer) if form.decayed_first else [0.0] * len(optimizer.parameters)
        filters = getattr(optimizer, "optim_filter", None) or (True,) * len(decays)
        derived = {i: decays[i] for i, (weight, state, updated) in
                   enumerate(zip(optimizer.parameters, getattr(optimizer, form.state), filters))
                   if updated and weight.dtype == state.dtype and str(weight.dtype) == "Float32"
                   and weight.size <= max_size}
        return cls(optimizer, form, derived) if derived else None

    @property
    def indices(self) -> list[int]:
        return list(self.decays)

    def before(self) -> None:
        """Copy the state and its factor ahead of a probe step (replacing a copy ``sums()`` did not read)."""
        self._factor = np.float32(getattr(self.optimizer, self.form.factor).asnumpy().reshape(-1)[0])
        self._before = {i: self.state[i].asnumpy().reshape(-1).copy() for i in self.decays}

    def sums(self, weights_before: list[np.ndarray]) -> dict[int, float]:
        """Σg²/2 of each derived parameter over the one optimizer step since ``before()``, from its state now and its
        weight before (``weights_before[i]``, the whole flat tensor)."""
        before, self._before = self._before, None
        if before is None:
            return {}
        sums = {}
        for i, state in before.items():
            gradient = self.form.gradient(self.state[i].asnumpy().reshape(-1), state, self._factor)
            if self.decays[i]:
                gradient -= weights_before[i] * self.decays[i]
            sums[i] = 0.5 * float(np.dot(gradient, gradient))
        return sums
