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

# Rows of ProbedOptimizer.stats (one column per optimizer parameter).
GRAD_SQ, GRAD_MEAN_ABS, GRAD_NONFINITE, WEIGHT_NONFINITE, UPDATE_MEAN_ABS, UPDATE_MAX_ABS, WEIGHT_MEAN_ABS = range(7)
_PARAM_ROWS = 7

# Rows of an activation probe's stats.
ACT_DEAD, ACT_SATURATED, ACT_MEAN_ABS, ACT_NONFINITE = range(4)

# Activation cell classes we probe: kind, dead-fraction (ReLU-like), input saturation bound (|x| beyond it is flat).
ACTIVATION_KINDS: dict[type, tuple[str, bool, float]] = {
    nn.ReLU: ("relu", True, 0.0),
    nn.ReLU6: ("relu6", True, 0.0),
    nn.Sigmoid: ("sigmoid", False, 16.2),
    nn.Tanh: ("tanh", False, 8.8),
    nn.GELU: ("gelu", False, 0.0),
}


def _buffer(rows: int, cols: int | None = None, dtype: Any = np.float32) -> Parameter:
    """A free (unregistered) Parameter the graph writes its statistics into."""
    shape = (rows,) if cols is None else (rows, cols)
    _buffer.count += 1
    return Parameter(Tensor(np.zeros(shape, dtype)), name=f"_msdoctor_probe_{_buffer.count}", requires_grad=False)


_buffer.count = 0


def _f32(x: Any) -> Any:
    return x.astype(ms.float32)


def _nonfinite_count(x: Any) -> Any:
    return _f32(ops.logical_not(ops.isfinite(x))).sum()


class ProbedOptimizer(nn.Cell):
    """Calls the real optimizer; when probing, also records gradient and true update statistics."""

    def __init__(self, optimizer: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.probing = False
        object.__setattr__(self, "weights", optimizer.parameters)
        object.__setattr__(self, "stats", _buffer(_PARAM_ROWS, len(optimizer.parameters)))
        object.__setattr__(self, "calls", _buffer(1, dtype=np.int32))

    def construct(self, grads):  # noqa: D401 - MindSpore construct
        if not self.probing:
            return self.optimizer(grads)
        grad_sq = []
        grad_mean_abs = []
        grad_nonfinite = []
        before = []
        for g in grads:
            g32 = _f32(g)
            grad_sq.append((g32 * g32).sum())
            grad_mean_abs.append(ops.abs(g32).mean())
            grad_nonfinite.append(_nonfinite_count(g32))
        for w in self.weights:
            before.append(_f32(w) * 1.0)
        done = self.optimizer(grads)
        weight_nonfinite = []
        update_mean_abs = []
        update_max_abs = []
        weight_mean_abs = []
        for i in range(len(before)):
            after = _f32(ops.depend(self.weights[i], done))
            delta = ops.abs(after - before[i])
            weight_nonfinite.append(_nonfinite_count(after))
            update_mean_abs.append(delta.mean())
            update_max_abs.append(delta.max())
            weight_mean_abs.append(ops.abs(before[i]).mean())
        rows = (grad_sq, grad_mean_abs, grad_nonfinite, weight_nonfinite, update_mean_abs, update_max_abs, weight_mean_abs)
        ops.assign(self.stats, ops.stack([ops.stack(r) for r in rows]))
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
                if self._msd_relu_like:
                    dead = _f32(a <= 0).mean()
                if self._msd_saturation > 0:
                    saturated = _f32(ops.abs(x) > self._msd_saturation).mean()
                stats = ops.stack([dead, saturated, ops.abs(a).mean(), _nonfinite_count(a)])
                ops.assign(self._msd_stats, stats)
            return y

    ProbedActivation.__name__ = base.__name__
    ProbedActivation.__qualname__ = base.__qualname__
    ProbedActivation._msd_base = base
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
            object.__setattr__(cell, "_msd_stats", _buffer(4))
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
            for i, name in enumerate(self.parameter_names):
                out.grad_norm[name] = float(np.sqrt(stats[GRAD_SQ, i]))
                out.grad_mean_abs[name] = float(stats[GRAD_MEAN_ABS, i])
                out.grad_nonfinite[name] = int(stats[GRAD_NONFINITE, i])
                out.weight_nonfinite[name] = int(stats[WEIGHT_NONFINITE, i])
                out.update_abs[name] = float(stats[UPDATE_MAX_ABS, i])
                out.weight_mean_abs[name] = float(stats[WEIGHT_MEAN_ABS, i])
                mean_w = stats[WEIGHT_MEAN_ABS, i]
                out.update_ratio[name] = float(stats[UPDATE_MEAN_ABS, i] / mean_w) if mean_w > 0 else float("inf")
        for order, (path, cell) in enumerate(self.activations.items()):
            out.activations[path] = (cell._msd_kind, order, cell._msd_stats.asnumpy().astype(np.float64))
        return out

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
