"""In-graph probes: statistics computed inside the compiled training step.

How it works (see docs/doctor.md, "How the probes work"):

* The optimizer is replaced, inside the train cell, by ``ProbedOptimizer`` —
  a thin Cell that calls the real optimizer and, when *probing*, also reduces
  each gradient to a few numbers, snapshots the weights, and measures the true
  update ``w_after - w_before`` after the real optimizer ran. Every train cell
  (``TrainOneStepCell``, ``TrainOneStepWithLossScaleCell``, a user's own) hands
  its gradients to ``self.optimizer(grads)``, so one probe fits them all.
* Activation cells (ReLU, Sigmoid, Tanh, GELU...) get a subclass whose
  ``construct`` also reduces its output (under ``ops.stop_gradient``).
* Probing is a Python-constant switch, so GRAPH mode compiles two graphs: the
  train cell itself (probes off: the user's exact step, no extra cost), and
  ``ProbeStep`` — a wrapper holding the same train cell, compiled with probes
  on. The train cell's ``__call__`` dispatches to the wrapper on probe steps.
* Results are written with ``ops.assign`` into Parameters that are *not*
  registered on any cell: they never show up in checkpoints or
  ``parameters_and_names()``.

``restore()`` puts every class and child back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.ops import composite as C

# Rows of ProbedOptimizer.stats (one column per optimizer parameter): SUMS over each parameter's
# elements, the host divides by the sizes. Every node of a compiled graph costs host memory
# (measured on CPU: ~0.15 MB per kernel written straight, ~0.5-0.7 MB per kernel unrolled from a
# Python loop or list comprehension in ``construct``), so the statistics are computed on the
# flattened, concatenated tensors with segment reductions: a fixed dozen kernels whatever the
# number of parameters; the flattening goes through ``HyperMap`` (cheapest to compile) and adds
# no Cast for float32. Non-finite counts are not computed: a sum of |x| is non-finite exactly
# when x holds a NaN/Inf (or overflows).
GRAD_SQ, GRAD_ABS, UPDATE_ABS, UPDATE_MAX_ABS, WEIGHT_ABS = range(5)
_PARAM_ROWS = 5

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


def _buffer(rows: int, cols: int | None = None, dtype: Any = np.float32, value: np.ndarray | None = None) -> Parameter:
    """A free (unregistered) Parameter the graph reads or writes; never part of a checkpoint."""
    shape = (rows,) if cols is None else (rows, cols)
    _buffer.count += 1
    data = value if value is not None else np.zeros(shape, dtype)
    return Parameter(Tensor(data), name=f"_msdoctor_probe_{_buffer.count}", requires_grad=False)


_buffer.count = 0


def _f32(x: Any) -> Any:
    """float32 view; no Cast kernel when it already is (each kernel of a compiled graph costs host memory)."""
    return x if x.dtype == ms.float32 else x.astype(ms.float32)


_flat_part = C.MultitypeFuncGraph("msdoctor_flat_part")


@_flat_part.register("Tensor")
def _flat_one(t):
    return _f32(t).reshape(-1)


_map = C.HyperMap()


def _flat(tensors):
    """One flat float32 vector (a copy): the concat never aliases the tensors it reads."""
    return ops.concat(_map(_flat_part, tensors))


class ProbedOptimizer(nn.Cell):
    """Calls the real optimizer; when probing, also records gradient and true update statistics."""

    def __init__(self, optimizer: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.probing = False
        params = optimizer.parameters
        self.sizes = np.array([max(1, int(np.prod(p.shape))) for p in params], np.float64)
        self.segments = len(params)
        segment_ids = np.repeat(np.arange(len(params), dtype=np.int32), self.sizes.astype(np.int64))
        object.__setattr__(self, "weights", params)
        object.__setattr__(self, "segment_ids", _buffer(0, value=segment_ids))  # one int32 per weight element
        object.__setattr__(self, "stats", _buffer(_PARAM_ROWS, len(params)))
        object.__setattr__(self, "calls", _buffer(1, dtype=np.int32))

    def construct(self, grads):  # noqa: D401 - MindSpore construct
        if not self.probing:
            return self.optimizer(grads)
        g = _flat(grads)
        before = _flat(self.weights)  # the one copy of the weights, alive during this step only
        done = self.optimizer(grads)
        after = _flat(self.weights)  # loaded after the optimizer's in-place updates (auto-monad order)
        delta = ops.abs(after - before)
        ids, n = self.segment_ids, self.segments
        stats = ops.stack([
            ops.unsorted_segment_sum(g * g, ids, n),
            ops.unsorted_segment_sum(ops.abs(g), ids, n),
            ops.unsorted_segment_sum(delta, ids, n),
            ops.unsorted_segment_max(delta, ids, n),
            ops.unsorted_segment_sum(ops.abs(after), ids, n),
        ])
        ops.assign(self.stats, stats)
        ops.assign_add(self.calls, ops.ones((1,), ms.int32))
        return done


class ProbeStep(nn.Cell):
    """The same train cell compiled a second time, with the probes switched on."""

    def __init__(self, train_cell: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.train_cell = train_cell

    def construct(self, *inputs):
        return self.train_cell(*inputs)


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


@dataclass
class ProbeReading:
    """One read of the probe buffers, as plain numbers keyed by parameter name / cell path."""

    grad_norm: dict[str, float] = field(default_factory=dict)
    grad_mean_abs: dict[str, float] = field(default_factory=dict)
    grad_nonfinite: dict[str, int] = field(default_factory=dict)
    """1 when the gradient holds a NaN/Inf (a flag, not a count)."""
    weight_nonfinite: dict[str, int] = field(default_factory=dict)
    update_abs: dict[str, float] = field(default_factory=dict)
    update_ratio: dict[str, float] = field(default_factory=dict)
    weight_mean_abs: dict[str, float] = field(default_factory=dict)
    activations: dict[str, tuple[str, int, np.ndarray]] = field(default_factory=dict)
    """cell path -> (kind, order, stats row)."""


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
        self._in_probe_step = False
        self._last_calls = 0
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
        probe_step = ProbeStep(self.train_cell)
        base = type(self.train_cell)
        instrumentation = self

        class DispatchingTrainCell(base):
            def __call__(self, *args, **kwargs):
                # PyNative re-enters here from ProbeStep.construct: run the real step then.
                if instrumentation._probing and not instrumentation._in_probe_step:
                    instrumentation._in_probe_step = True
                    try:
                        return probe_step(*args, **kwargs)
                    finally:
                        instrumentation._in_probe_step = False
                return base.__call__(self, *args, **kwargs)

        DispatchingTrainCell.__name__ = base.__name__
        DispatchingTrainCell.__qualname__ = base.__qualname__
        self.train_cell.__class__ = DispatchingTrainCell
        self._swapped.append((self.train_cell, base))

    def set_probing(self, probing: bool) -> None:
        """Choose the graph the next step runs: probes on, or the plain step."""
        if probing == self._probing:
            return
        self._probing = probing
        self.probed_optimizer.probing = probing
        for cell in self.activations.values():
            cell._msd_probing = probing  # pylint: disable=protected-access

    def read(self) -> ProbeReading | None:
        """Statistics of the last probed step; None when the optimizer did not run (e.g. loss-scale overflow)."""
        calls = int(self.probed_optimizer.calls.asnumpy()[0])
        out = ProbeReading()
        if calls != self._last_calls:
            self._last_calls = calls
            stats = self.probed_optimizer.stats.asnumpy().astype(np.float64)
            sizes = self.probed_optimizer.sizes
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/Inf are signals here
                self._read_parameters(stats, sizes, out)
        for order, (path, cell) in enumerate(self.activations.items()):
            out.activations[path] = (cell._msd_kind, order, cell._msd_stats.asnumpy().astype(np.float64))
        return out

    def _read_parameters(self, stats: np.ndarray, sizes: np.ndarray, out: ProbeReading) -> None:
        for i, name in enumerate(self.parameter_names):
            grad_mean_abs = stats[GRAD_ABS, i] / sizes[i]
            weight_mean_abs = stats[WEIGHT_ABS, i] / sizes[i]
            out.grad_norm[name] = float(np.sqrt(stats[GRAD_SQ, i]))
            out.grad_mean_abs[name] = float(grad_mean_abs)
            out.grad_nonfinite[name] = int(not np.isfinite(grad_mean_abs))
            out.weight_nonfinite[name] = int(not np.isfinite(weight_mean_abs))
            out.update_abs[name] = float(stats[UPDATE_MAX_ABS, i])
            out.weight_mean_abs[name] = float(weight_mean_abs)
            update_mean_abs = stats[UPDATE_ABS, i] / sizes[i]
            out.update_ratio[name] = float(update_mean_abs / weight_mean_abs) if weight_mean_abs > 0 else float("inf")

    def cells_not_training(self) -> list[str]:
        """Paths of network cells that are in eval mode (``set_train(False)``) while training."""
        return [path or "<network>" for path, cell in self.network.cells_and_names() if not cell.training]

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
