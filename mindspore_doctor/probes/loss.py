"""The step's loss (and loss-scale outputs) on the host: read every step, or held and read later.

Reading a loss waits for the step to finish. On CPU that wait is short (a graph step returns when its work is nearly
done; a PyNative MLP step measured the same reading its loss every step or once in 10), so ``StepLossReader`` reads
every step, step-exact and simplest. On GPU/Ascend it would stall the device
queue on every step, so ``DeferredLossReader`` holds each step's loss tensor as the step returned it (no device op,
no wait) and the host reads the held steps on probe steps, at epoch end, and every ``size`` steps. Both hand back
``LossRead``: the values of the steps since the last read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from mindspore import Tensor

from mindspore_doctor.checks import CheckSkipped


@dataclass
class LossRead:
    """One step's loss-side outputs; None where the step's outputs did not hold it (or it was lost)."""

    loss: float | None = None
    overflow: bool | None = None
    loss_scale: float | None = None


def split_outputs(outputs: Any) -> tuple[Any, Any, Any]:
    """(loss, overflow, loss_scale) of a train step's outputs: a loss (a tensor, or a number the loop already read),
    or a loss-scale cell's (loss, overflow, scale) tuple; the first element of any other tuple is the loss."""
    overflow = scale = None
    if isinstance(outputs, (tuple, list)):
        if len(outputs) >= 3 and hasattr(outputs[1], "dtype") and "bool" in str(outputs[1].dtype).lower():
            overflow, scale = outputs[1], outputs[2]
        outputs = outputs[0] if outputs else None
    readable = hasattr(outputs, "asnumpy") or (isinstance(outputs, (int, float, np.number, np.ndarray))
                                               and not isinstance(outputs, bool))  # float(loss), loss.asnumpy()
    return (outputs if readable else None), overflow, scale


def host_scalar(value: Any) -> float:
    """The value as a Python float; the mean of a tensor of several (a loss the step did not reduce)."""
    if isinstance(value, Tensor) and value.size == 1:
        # Every reduced loss: ``item()`` is exact (float32 -> float) and ~2 us, ``asnumpy()`` ~20-30 us a step.
        return float(value.item())
    array = np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value)
    return float(array.reshape(-1)[0]) if array.size == 1 else float(np.asarray(array, dtype=np.float64).mean())


def _any(flag: Any) -> bool:
    """A loss-scale cell's overflow flag (one bool, or several) on the host."""
    return bool(flag.item()) if flag.size == 1 else bool(np.asarray(flag.asnumpy()).any())


class StepLossReader:
    """Reads the loss on the host at every step (the CPU default)."""

    deferred = False

    def record(self, outputs: Any) -> list[LossRead]:
        loss, overflow, scale = split_outputs(outputs)
        return [LossRead(loss=None if loss is None else host_scalar(loss),
                         overflow=None if overflow is None else _any(overflow),
                         loss_scale=None if scale is None else host_scalar(scale))]

    def read(self) -> list[LossRead]:
        return []


class DeferredLossReader:
    """Holds each step's loss outputs as the step returned them (no device op, no wait for the step); ``read()``
    reads the steps held since the last read, in order. Past ``size`` held steps ``record`` reads them itself, a
    bound on what is held (a scalar each: the loss, and a loss-scale cell's flag and scale)."""

    deferred = True

    def __init__(self, size: int) -> None:
        self._size = max(1, size)
        self._held: list[tuple[Any, Any, Any]] = []

    def record(self, outputs: Any) -> list[LossRead]:
        loss, overflow, scale = split_outputs(outputs)
        if loss is None:
            raise CheckSkipped(f"the step's outputs are a {type(outputs).__name__}, not a loss tensor "
                               "(pass the loss, or a loss-scale cell's (loss, overflow, scale))")
        self._held.append((loss, overflow, scale))
        return self.read() if len(self._held) >= self._size else []

    def read(self) -> list[LossRead]:
        held, self._held = self._held, []
        return [LossRead(loss=host_scalar(loss), overflow=None if overflow is None else _any(overflow),
                         loss_scale=None if scale is None else host_scalar(scale)) for loss, overflow, scale in held]
