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
* then ``g = d - float32(w * wd)`` where the decay came first;
* an optimizer with a loss scale ``s`` of its own (``loss_scale=``, which a fixed loss scale without dropped
  overflows needs) takes ``s * g`` and scales the decayed gradient by ``float32(1 / s)`` before its state reads it:
  the state holds ``g`` plus the decay's ``float32(float32(w * wd) / s)``, and so does the derivation.

In the one-graph design this replaces the gradient sums the graph would run on every step: one ``L2Loss`` a tensor,
a ``Mul``, a ``Sub`` and an ``L2Loss`` for a decayed one, ~15 us a kernel on CPU (most of MobileNetV3's and
ShuffleNetV2's probe cost), or the control flow of a switch, which cost a larger network more than its sums (RegNet).
Where every gradient of the optimizer is derived, the optimizer is not probed in the graph at all. Only where the
step is exactly MindSpore's — the class's own methods, no gradient centralization, weight-decay schedule or
lazy/offload/AMSGrad variant — and for float32 tensors. The copies live for one probe step: the state, and the
weights the decay reads where the caller's copy of a weight is a strided sample.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mindspore import nn

from mindspore_doctor.probes.host import host_flat
from mindspore_doctor.probes.swap import user_class

_CHUNK = 1 << 18
"""Elements derived at a time: the float64 scratch of one tensor's gradient stays within 2 MB."""


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
    off_flags: tuple[str, ...]  # options that change the step (a schedule of the decay, lazy Adam...)
    gradient: Callable[[np.ndarray, np.ndarray, np.float32], np.ndarray]


_STEP = ("construct", "decay_weight", "gradients_centralization", "scale_grad", "get_weight_decay")
_FORMS = (
    _StateForm(nn.Momentum, _STEP, "moments", "momentum", True, ("dynamic_weight_decay",), _momentum_gradient),
    _StateForm(nn.Adam, _STEP + ("_apply_adam", "_grad_sparse_indices_deduplicate"), "moment1", "beta1", True,
               ("dynamic_weight_decay", "use_lazy", "use_offload", "use_amsgrad"), _moment_gradient),
    _StateForm(nn.AdamWeightDecay, ("construct",), "moments1", "beta1", False, (), _moment_gradient),  # no loss scale
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


def loss_unscale(optimizer: Any) -> np.float32 | None:
    """``float32(1 / s)`` of an ``nn.Optimizer`` with a loss scale ``s`` of its own, which takes the gradients scaled
    by ``s`` and scales them back in ``scale_grad``; None without one."""
    if not getattr(optimizer, "need_scale", False):
        return None
    return np.float32(optimizer.reciprocal_scale.asnumpy().reshape(-1)[0])


def _weight_decays(optimizer: nn.Optimizer) -> list[float]:
    """The weight decay ``decay_weight`` applies to each parameter (0.0 where none)."""
    count = len(optimizer.parameters)
    if not optimizer.exec_weight_decay:
        return [0.0] * count
    values = optimizer.weight_decay if optimizer.is_group else (optimizer.weight_decay,) * count
    return [float(value.asnumpy()) if flag else 0.0 for value, flag in zip(values, optimizer.decay_flags)]


class StateGradients:
    """Σg²/2 of the gradients the host derives, on one probe step: ``before()`` ahead of it, ``sums()`` after."""

    def __init__(self, optimizer: nn.Optimizer, form: _StateForm, decays: dict[int, float], whole: int) -> None:
        self.optimizer, self.form = optimizer, form
        self.state = getattr(optimizer, form.state)
        self.decays = {i: np.float32(wd) for i, wd in decays.items()}
        self.unscale = loss_unscale(optimizer)
        self.whole = whole
        """The caller's copies of the weights before the step are whole up to this size; larger decayed weights are
        copied here."""
        self._before: dict[int, np.ndarray] | None = None
        self._weights: dict[int, np.ndarray] = {}
        self._factor = np.float32(0.0)

    @classmethod
    def of(cls, optimizer: Any, whole: int) -> "StateGradients | None":
        """For the parameters of ``optimizer`` whose gradient the host can derive; None when there are none."""
        form = _form(optimizer)
        if form is None:
            return None
        decays = _weight_decays(optimizer) if form.decayed_first else [0.0] * len(optimizer.parameters)
        filters = getattr(optimizer, "optim_filter", None) or (True,) * len(decays)
        derived = {i: decays[i] for i, (weight, state, updated) in
                   enumerate(zip(optimizer.parameters, getattr(optimizer, form.state), filters))
                   if updated and weight.dtype == state.dtype and str(weight.dtype) == "Float32"}
        return cls(optimizer, form, derived, whole) if derived else None

    @property
    def indices(self) -> list[int]:
        return list(self.decays)

    def before(self) -> None:
        """Copy the state and its factor ahead of a probe step (replacing a copy ``sums()`` did not read)."""
        self._factor = np.float32(host_flat(getattr(self.optimizer, self.form.factor))[0])
        self._before = {i: host_flat(self.state[i]).copy() for i in self.decays}
        weights = self.optimizer.parameters
        self._weights = {i: host_flat(weights[i]).copy() for i, decay in self.decays.items()
                         if decay and weights[i].size > self.whole}

    def sums(self, weights_before: list[np.ndarray]) -> dict[int, float]:
        """Σg²/2 of each derived parameter over the one optimizer step since ``before()``, from its state now and its
        weight before (``weights_before[i]``, the whole flat tensor up to ``whole`` elements)."""
        before, self._before = self._before, None
        weights, self._weights = self._weights, {}
        if before is None:
            return {}
        sums = {}
        for i, state in before.items():
            after = host_flat(self.state[i])
            weight = weights.get(i, weights_before[i])
            total = 0.0
            for start in range(0, state.size, _CHUNK):
                part = slice(start, start + _CHUNK)
                gradient = self.form.gradient(after[part], state[part], self._factor)
                if self.decays[i]:
                    decay = weight[part] * self.decays[i]
                    gradient -= decay if self.unscale is None else decay * self.unscale
                total += float(np.dot(gradient, gradient))
            sums[i] = 0.5 * total
        return sums
