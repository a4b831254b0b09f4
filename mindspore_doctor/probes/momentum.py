"""Gradients read on the host from ``nn.Momentum``'s accumulators: no kernel of the Doctor's in the user's graph.

MindSpore's ``ApplyMomentum`` (CPU, GPU, Ascend alike) updates each accumulator as ``a = a * momentum + d``, where
``d`` is the gradient after ``decay_weight`` (``d = w * wd + g``). The host copies ``a`` and ``w`` before a probe step
and reads ``a`` after it: ``d = a_after - float32(a_before * momentum)`` and ``g = d - float32(w * wd)``, to the
rounding of that one addition (an exact 0 where nothing was added). In the one-graph design this replaces the
gradient sums the graph would run on every step (one ``L2Loss`` a tensor, three for a decayed one: ~15 us a kernel on
CPU, most of MobileNetV3's and ShuffleNetV2's probe cost). Only where the step is exactly that: ``nn.Momentum``'s own
``construct``, ``decay_weight``, ``scale_grad`` and ``gradients_centralization`` with no loss scale, centralization
or weight-decay schedule, float32 tensors that the host copies whole (``max_size``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from mindspore import nn

from mindspore_doctor.probes.swap import user_class

_STEP_METHODS = ("construct", "decay_weight", "gradients_centralization", "scale_grad", "get_weight_decay")


def _plain_momentum(optimizer: Any) -> bool:
    """``optimizer`` runs ``nn.Momentum``'s step unchanged: a subclass may add anything else, not change that."""
    if not isinstance(optimizer, nn.Momentum):
        return False
    cls = user_class(optimizer)
    if any(getattr(cls, name) is not getattr(nn.Momentum, name) for name in _STEP_METHODS):
        return False
    if optimizer.need_scale or optimizer.dynamic_weight_decay:
        return False
    return not (optimizer.is_group and any(optimizer.grad_centralization_flags))


def _weight_decays(optimizer: nn.Momentum) -> list[float]:
    """The weight decay ``decay_weight`` applies to each parameter (0.0 where none)."""
    count = len(optimizer.parameters)
    if not optimizer.exec_weight_decay:
        return [0.0] * count
    values = optimizer.weight_decay if optimizer.is_group else (optimizer.weight_decay,) * count
    return [float(value.asnumpy()) if flag else 0.0 for value, flag in zip(values, optimizer.decay_flags)]


def derivable(optimizer: Any, max_size: int) -> dict[int, float]:
    """The parameters (by position) whose gradient the host can derive, with their weight decay; {} for any other
    optimizer."""
    if not _plain_momentum(optimizer):
        return {}
    decays = _weight_decays(optimizer)
    return {i: decays[i] for i, (weight, moment) in enumerate(zip(optimizer.parameters, optimizer.moments))
            if weight.dtype == moment.dtype and str(weight.dtype) == "Float32" and weight.size <= max_size}


class MomentumGradients:
    """Σg²/2 of the derivable parameters' gradients on one probe step: ``before()`` ahead of it, ``sums()`` after."""

    def __init__(self, optimizer: nn.Momentum, decays: dict[int, float]) -> None:
        self.optimizer = optimizer
        self.decays = {i: np.float32(wd) for i, wd in decays.items()}
        self._before: dict[int, np.ndarray] | None = None
        self._momentum = np.float32(0.0)

    def before(self) -> None:
        """Copy the accumulators and the momentum ahead of a probe step."""
        moments = self.optimizer.moments
        self._momentum = np.float32(self.optimizer.momentum.asnumpy())
        self._before = {i: moments[i].asnumpy().reshape(-1).copy() for i in self.decays}

    def sums(self, weights_before: list[np.ndarray]) -> dict[int, float]:
        """Σg²/2 of each derivable parameter over the one optimizer step since ``before()``, from its accumulator now
        and its weight before (``weights_before[i]``, the whole flat tensor)."""
        before, self._before = self._before, None
        if before is None:
            return {}
        moments, momentum = self.optimizer.moments, self._momentum
        sums = {}
        for i, accumulator in before.items():
            decayed = moments[i].asnumpy().reshape(-1).astype(np.float64) - (accumulator * momentum)
            if self.decays[i]:
                decayed -= weights_before[i] * self.decays[i]
            sums[i] = 0.5 * float(np.dot(decayed, decayed))
        return sums
