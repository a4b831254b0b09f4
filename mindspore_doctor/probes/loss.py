"""The step's loss (and loss-scale outputs) on the host: read every step, or recorded on the device and read later.

Reading a loss with ``asnumpy()`` waits for the step to finish. On CPU that read measured as cheap as the
device-side record (``scripts/bench_overhead.py --loss-read step|deferred``), so ``StepLossReader`` reads
every step, step-exact and simplest. On GPU/Ascend that wait stalls the device queue on every step, so
``DeferredLossReader`` records each loss into a device buffer with a few device ops (no host sync) —
with the first non-finite step and its loss in a flag of their own — and the host reads it on probe steps and
at epoch end. Both hand back ``LossRead``: the values of the steps since the last read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.probes.instrument import free_parameter


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


class _Recorder(nn.Cell):
    """Writes one step's loss (mean, float32) and overflow flag at slot ``count % size``; keeps the first
    non-finite loss and the call that gave it. Buffers are free Parameters, written in place."""

    def __init__(self, size: int) -> None:
        super().__init__(auto_prefix=False)
        object.__setattr__(self, "losses", free_parameter(np.zeros(size, np.float32)))
        object.__setattr__(self, "overflows", free_parameter(np.zeros(size, np.float32)))
        object.__setattr__(self, "count", free_parameter(np.zeros(1, np.int32)))
        object.__setattr__(self, "first_bad", free_parameter(np.full(1, -1, np.int32)))
        object.__setattr__(self, "first_bad_loss", free_parameter(np.zeros(1, np.float32)))
        self.slots = Tensor(np.arange(size, dtype=np.int32))
        self.size = size

    def construct(self, loss, overflow):
        value = loss.astype(ms.float32).mean().reshape(1)
        here = self.slots == (self.count % self.size)
        bad = ops.logical_and(ops.logical_not(ops.isfinite(value)), self.first_bad < 0)
        ops.assign(self.losses, ops.select(here, ops.broadcast_to(value, self.losses.shape), self.losses))
        ops.assign(self.overflows, ops.select(here, ops.broadcast_to(overflow, self.overflows.shape),
                                              self.overflows))
        ops.assign(self.first_bad, ops.select(bad, self.count, self.first_bad))
        ops.assign(self.first_bad_loss, ops.select(bad, value, self.first_bad_loss))
        ops.assign(self.count, self.count + 1)
        return self.count


class DeferredLossReader:
    """Records each step's loss on the device; ``read()`` returns the steps recorded since the last read.

    ``size`` slots: reads further apart lose the older losses (None), never the first non-finite one.
    """

    deferred = True

    def __init__(self, size: int) -> None:
        self._recorder = _Recorder(max(1, size))
        self._no_overflow = Tensor(np.zeros(1, np.float32))  # made once: no host-to-device copy per step
        self._read_calls = 0
        self._scale: Any = None
        self._overflow_known = False

    def record(self, outputs: Any) -> list[LossRead]:
        loss, overflow, scale = split_outputs(outputs)
        if loss is None:
            raise CheckSkipped(f"the step's outputs are a {type(outputs).__name__}, not a loss tensor "
                               "(pass the loss, or a loss-scale cell's (loss, overflow, scale))")
        flag = self._no_overflow if overflow is None else overflow.astype(ms.float32).reshape(-1)[:1]
        self._scale = scale
        self._overflow_known = overflow is not None
        self._recorder(loss if isinstance(loss, Tensor) else Tensor(np.asarray(loss, np.float32)), flag)
        return []

    def read(self) -> list[LossRead]:
        recorder, size = self._recorder, self._recorder.size
        count = int(recorder.count.asnumpy()[0])
        losses, overflows = recorder.losses.asnumpy(), recorder.overflows.asnumpy()
        reads = []
        for call in range(self._read_calls, count):
            kept = call >= count - size
            reads.append(LossRead(loss=float(losses[call % size]) if kept else None,
                                  overflow=bool(overflows[call % size]) if kept and self._overflow_known
                                  else None))
        first_bad = int(recorder.first_bad.asnumpy()[0])
        if self._read_calls <= first_bad < count and reads:
            reads[first_bad - self._read_calls].loss = float(recorder.first_bad_loss.asnumpy()[0])
        if reads and self._scale is not None:
            reads[-1].loss_scale = host_scalar(self._scale)
        self._read_calls = count
        return reads
