"""In-graph probes: statistics computed inside the compiled training step.

How it works (see docs/doctor.md, "How the probes work"):

* The optimizer is replaced, inside the train cell, by ``ProbedOptimizer`` —
  a thin Cell that calls the real optimizer and, when *probing*, also reduces
  each gradient to two sums. The weights are read on the host, in place: a
  strided sample of each is copied before the probe step, so the true update
  ``w_after - w_before`` is measured after the real optimizer ran. Every train cell
  (``TrainOneStepCell``, ``TrainOneStepWithLossScaleCell``, a user's own) hands
  its gradients to ``self.optimizer(grads)``, so one probe fits them all.
* Activation cells (ReLU, Sigmoid, Tanh, GELU...) get a subclass whose
  ``construct`` also reduces its output (under ``ops.stop_gradient``).
* Probing is a Python-constant switch, so GRAPH mode compiles two graphs of
  the same train cell: under its own phase (probes off: the user's exact step,
  no extra cost), and under a second phase name (probes on), chosen by the
  train cell's ``__call__`` on probe steps. Both are top-level graphs of the
  same cell: wrapping the train cell in another Cell instead changed the
  rounding of some reductions (a Transformer's embedding gradients), and with
  it the user's weights.
* Results are written with ``ops.assign`` into Parameters that are *not*
  registered on any cell: they never show up in checkpoints or
  ``parameters_and_names()``.

``restore()`` puts every class and child back.
"""
from __future__ import annotations

import math
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.ops import composite as C

from mindspore_doctor.signals import ActivationStats, StepSignals

# ProbedOptimizer.grad_sums holds one number per optimizer parameter: half the sum of g² (one L2Loss
# kernel each). Every node of a compiled graph costs host memory (measured on CPU: ~0.08 MB per kernel
# mapped with ``HyperMap``, ~0.5-0.7 MB per kernel unrolled from a Python loop in ``construct``), so
# one kernel per gradient replaced the earlier Σg² and Σ|g| (five kernels each: -14 MB on a small
# ResNet); mean |g| became the RMS. Everything about the weights is computed on the host, where a
# Parameter reads as a view (no copy). Non-finite flags: a sum of squares is non-finite exactly when
# g holds a NaN/Inf (or, in the float32 graph, when it passes 3.4e38).
# The update is measured on at most this many evenly strided elements per parameter (exact below it):
# a host copy of every weight would cost as much memory as the in-graph snapshot it replaces.
UPDATE_SAMPLE = 1 << 16
_CHUNK = 1 << 18  # float64 scratch, in elements, for the host sums

# Rows of an activation probe's stats (non-finite: mean |a| is). ACT_DEAD_UNITS: fraction of units
# (output positions of one sample) that are <= 0 on every sample of the batch; -1 when not measured.
ACT_DEAD, ACT_SATURATED, ACT_MEAN_ABS, ACT_DEAD_UNITS = range(4)
_ACT_ROWS = 4
# Per-unit deadness needs a batch large enough that a healthy unit (active half the time) is almost
# never off on all of it: 2**-8 < 0.4 %.
MIN_BATCH_FOR_UNITS = 8

# Activation cell classes we probe: kind, dead-fraction (ReLU-like), input saturation bound (|x| beyond it is flat).
ACTIVATION_KINDS: dict[type, tuple[str, bool, float]] = {
    nn.ReLU: ("relu", True, 0.0),
    nn.ReLU6: ("relu6", True, 0.0),
    nn.Sigmoid: ("sigmoid", False, 16.2),
    nn.Tanh: ("tanh", False, 8.8),
    nn.GELU: ("gelu", False, 0.0),
}


def _buffer(size: int, dtype: Any = np.float32) -> Parameter:
    """A free (unregistered) zero vector Parameter the graph writes; never part of a checkpoint."""
    _buffer.count += 1
    return Parameter(Tensor(np.zeros(size, dtype)), name=f"_msdoctor_probe_{_buffer.count}", requires_grad=False)


_buffer.count = 0
PROBE_PHASE_SUFFIX = "_msdoctor_probe"


def _f32(x: Any) -> Any:
    """float32 view; no Cast kernel when it already is (each kernel of a compiled graph costs host memory)."""
    return x if x.dtype == ms.float32 else x.astype(ms.float32)


_grad_sums = C.MultitypeFuncGraph("msdoctor_grad_sums")


_half_square_sum = ops.L2Loss()


@_grad_sums.register("Tensor")
def _grad_sums_one(grad):
    return _half_square_sum(_f32(grad))


_map = C.HyperMap()


class ProbedOptimizer(nn.Cell):
    """Calls the real optimizer; when probing, also records the sums of g² and |g| of each gradient."""

    def __init__(self, optimizer: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.probing = False
        object.__setattr__(self, "grad_sums", _buffer(len(optimizer.parameters)))
        object.__setattr__(self, "calls", _buffer(1, dtype=np.int32))

    def construct(self, grads):  # noqa: D401 - MindSpore construct
        if not self.probing:
            return self.optimizer(grads)
        ops.assign(self.grad_sums, ops.stack(_map(_grad_sums, grads)))
        done = self.optimizer(grads)
        ops.assign_add(self.calls, ops.ones((1,), ms.int32))
        return done


def _update_sample(weight: Parameter) -> np.ndarray:
    """At most ``UPDATE_SAMPLE`` evenly strided elements of a weight, as a flat view of its host data."""
    flat = weight.asnumpy().reshape(-1)
    return flat[::-(-flat.size // UPDATE_SAMPLE)]


def _abs_sum_max(values: np.ndarray, scratch: np.ndarray, minus: np.ndarray | None = None) -> tuple[float, float]:
    """(sum, max) of ``|values - minus|`` in float64, in chunks through ``scratch``: no full-size temporary.

    float64 cannot overflow on float32/float16 input, so both are non-finite exactly when an element is.
    """
    total = largest = 0.0
    for start in range(0, values.size, scratch.size):
        part = values[start:start + scratch.size]
        chunk = scratch[:part.size]
        chunk[:] = part
        if minus is not None:
            chunk -= minus[start:start + scratch.size]
        np.abs(chunk, out=chunk)
        total += float(chunk.sum())
        largest = float(np.maximum(largest, chunk.max()))  # NaN propagates, as in the sum
    return total, largest


def _probed_activation_class(base: type) -> type:
    kind, relu_like, saturation = ACTIVATION_KINDS[next(k for k in ACTIVATION_KINDS if issubclass(base, k))]

    class ProbedActivation(base):
        _msd_relu_like = relu_like
        _msd_saturation = saturation

        def construct(self, *args):
            y = base.construct(self, *args)
            if self._msd_probing:
                x = _f32(ops.stop_gradient(args[0]))
                a = _f32(ops.stop_gradient(y))
                dead = ops.zeros((), ms.float32)
                saturated = ops.zeros((), ms.float32)
                dead_units = Tensor(-1.0, ms.float32)
                if self._msd_relu_like:
                    off = a <= 0
                    dead = _f32(off).mean()
                    if a.ndim >= 2 and a.shape[0] >= MIN_BATCH_FOR_UNITS:
                        dead_units = _f32(off.all(axis=0)).mean()  # reduces the batch axis only
                if self._msd_saturation > 0:
                    saturated = _f32(ops.abs(x) > self._msd_saturation).mean()
                stats = ops.stack([dead, saturated, ops.abs(a).mean(), dead_units])
                ops.assign(self._msd_stats, stats)
            return y

    ProbedActivation.__name__ = base.__name__
    ProbedActivation.__qualname__ = base.__qualname__
    ProbedActivation._msd_kind = kind
    return ProbedActivation


def activation_kind(cell: Any) -> str | None:
    for cls, (kind, _, _) in ACTIVATION_KINDS.items():
        if isinstance(cell, cls):
            return kind
    return None


class Instrumentation:
    """Installs the probes into a train cell and its network; ``restore()`` undoes everything."""

    def __init__(self, train_cell: nn.Cell, network: nn.Cell, optimizer: nn.Cell) -> None:
        self.train_cell = train_cell
        self.network = network
        self.optimizer = optimizer
        self.parameter_names = [p.name for p in optimizer.parameters]
        self.parameter_shapes = {p.name: list(p.shape) for p in optimizer.parameters}
        self._optimizer_slot = self._find_optimizer_slot()
        self.probed_optimizer = ProbedOptimizer(optimizer)
        self.activations: dict[str, nn.Cell] = {
            path: cell for path, cell in network.cells_and_names() if path and activation_kind(cell) is not None
        }
        self._swapped: list[tuple[Any, type]] = []
        self._probing = False
        self._last_calls = 0
        self._weights_before: list[np.ndarray] | None = None
        self._install()

    def _find_optimizer_slot(self) -> tuple[nn.Cell, str]:
        for _, cell in self.train_cell.cells_and_names():
            for name, child in cell._cells.items():  # pylint: disable=protected-access
                if child is self.optimizer:
                    return cell, name
        raise LookupError(f"the optimizer {type(self.optimizer).__name__} is not a child cell of the train network")

    def _install(self) -> None:
        owner, name = self._optimizer_slot
        owner._cells[name] = self.probed_optimizer  # pylint: disable=protected-access (no parameter renaming)
        for cell in self.activations.values():
            base = type(cell)
            object.__setattr__(cell, "_msd_stats", _buffer(_ACT_ROWS))
            cell.__class__ = _probed_activation_class(base)
            cell._msd_probing = False  # pylint: disable=protected-access
            self._swapped.append((cell, base))
        base = type(self.train_cell)
        instrumentation = self

        class DispatchingTrainCell(base):
            def __call__(self, *args, **kwargs):
                if not instrumentation._probing:
                    return base.__call__(self, *args, **kwargs)
                plain_phase = self.phase  # GRAPH mode caches one compiled graph per phase
                self.phase = f"{plain_phase}{PROBE_PHASE_SUFFIX}"
                try:
                    return base.__call__(self, *args, **kwargs)
                finally:
                    self.phase = plain_phase

        DispatchingTrainCell.__name__ = base.__name__
        DispatchingTrainCell.__qualname__ = base.__qualname__
        self.train_cell.__class__ = DispatchingTrainCell
        self._swapped.append((self.train_cell, base))

    def set_probing(self, probing: bool) -> None:
        """Choose the graph the next step runs: probes on, or the plain step.

        Before a probe step, copies each weight's update sample, so ``read()`` can measure the true update.
        """
        self._weights_before = [_update_sample(p).copy() for p in self.optimizer.parameters] if probing else None
        if probing == self._probing:
            return
        self._probing = probing
        self.probed_optimizer.probing = probing
        for cell in self.activations.values():
            cell._msd_probing = probing  # pylint: disable=protected-access

    def read_into(self, signals: StepSignals) -> None:
        """Fill ``signals`` with the statistics of the last probed step; no parameter statistics when the
        optimizer did not run (e.g. loss-scale overflow)."""
        calls = int(self.probed_optimizer.calls.asnumpy()[0])
        before, self._weights_before = self._weights_before, None
        if calls != self._last_calls and before is not None:
            self._last_calls = calls
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/Inf are signals here
                self._read_parameters(before, signals)
        for order, (path, cell) in enumerate(self.activations.items()):
            row = cell._msd_stats.asnumpy().astype(np.float64)
            mean_abs = float(row[ACT_MEAN_ABS])
            signals.activations[path] = ActivationStats(
                kind=cell._msd_kind, mean_abs=mean_abs, dead_fraction=float(row[ACT_DEAD]),
                saturated_fraction=float(row[ACT_SATURATED]), dead_unit_fraction=float(row[ACT_DEAD_UNITS]),
                nonfinite=int(not math.isfinite(mean_abs)), order=order)

    def _read_parameters(self, before: list[np.ndarray], out: StepSignals) -> None:
        grad_sums = self.probed_optimizer.grad_sums.asnumpy().astype(np.float64)
        scratch = np.empty(_CHUNK, np.float64)
        for i, (name, weight) in enumerate(zip(self.parameter_names, self.optimizer.parameters)):
            size = max(1, weight.size)
            weight_abs, _ = _abs_sum_max(weight.asnumpy().reshape(-1), scratch)
            update_abs, update_max_abs = _abs_sum_max(_update_sample(weight), scratch, minus=before[i])
            square_sum = 2.0 * grad_sums[i]
            grad_rms, weight_mean_abs = np.sqrt(square_sum / size), weight_abs / size
            out.grad_norm[name] = float(np.sqrt(square_sum))
            out.grad_rms[name] = float(grad_rms)
            out.grad_nonfinite[name] = int(not np.isfinite(grad_rms))
            out.weight_nonfinite[name] = int(not np.isfinite(weight_abs))
            out.update_abs[name] = update_max_abs
            out.weight_mean_abs[name] = weight_mean_abs
            update_mean_abs = update_abs / max(1, before[i].size)
            out.update_ratio[name] = float(update_mean_abs / weight_mean_abs) if weight_mean_abs > 0 else float("inf")

    def restore(self) -> None:
        """Put back every swapped class and the real optimizer."""
        self.set_probing(False)
        for cell, base in reversed(self._swapped):
            cell.__class__ = base
            cell.__dict__.pop("_msd_stats", None)
            cell.__dict__.pop("_msd_probing", None)
        self._swapped.clear()
        owner, name = self._optimizer_slot
        owner._cells[name] = self.optimizer  # pylint: disable=protected-access
