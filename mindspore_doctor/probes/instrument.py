"""In-graph probes: what only the compiled training step can see, kept for the host.

How it works (see docs/doctor.md, "How the probes work"):

* One graph, but for a small network. The probes are part of the user's step,
  which compiles once, as it would without the Doctor; a second compiled graph
  of a larger network's step cost more host memory on its own than the whole
  budget. A network of at most 16 optimizer tensors and 2^20 weights trained
  through a train cell in GRAPH mode runs its probe steps under a phase of
  their own (``PROBE_PHASE``): MindSpore compiles that cell twice, once with the
  probes' Python switches on, and the other steps run the user's own graph
  (unless the first graph proved too large: ``settle_probe_phase``).
* The optimizer's class is swapped, in place, for a subclass whose ``construct``
  calls the real one and, on probe steps only, also reduces each gradient to
  one sum. "Probe step" is a bool ``Parameter`` the host writes in place, read
  by an ``if`` the graph compiles as control flow: the reductions cost nothing
  on the other steps, the control flow a fixed amount and host memory; the
  reductions of a network up to ~1M weights cost less than that, and run on
  every step instead (``SUMS_EVERY_STEP_ELEMENTS``). Every training style hands its gradients to
  ``optimizer(grads)`` — ``TrainOneStepCell``, ``TrainOneStepWithLossScaleCell``,
  a user's own cell, a ``value_and_grad`` step under ``@ms.jit`` or in
  PyNative — so one probe fits them all. The gradients of ``nn.Momentum``, ``nn.Adam`` and ``nn.AdamWeightDecay``
  (MindSpore's own step, float32 tensors) are not read in the graph at all: the host derives them from the
  optimizer's state before and after the probe step (``probes/state_gradients.py``), and an optimizer whose every
  gradient is derived keeps its own class; its ``global_step`` counts its runs.
* The weights are read on the host, in place: a strided sample of each is
  copied before the probe step, so the true update ``w_after - w_before`` is
  measured after the real optimizer ran, whatever it is.
* Activation cells (ReLU, Sigmoid, Tanh, GELU...) get a subclass whose
  ``construct`` also copies a fixed-size strided sample of its output (16
  samples x 256 units) into a buffer: one gather and one copy per call. Under
  ``Model.train`` in GRAPH mode only a forward pass of the Doctor's own on
  probe steps carries that subclass (``_SampleForward``); elsewhere in GRAPH
  mode the train step samples on every step (an ``if`` in the forward pass
  would be control flow inside the differentiated graph, measured at 8 MB per
  cell), in PyNative on probe steps only. The host computes the statistics
  from the sample.
* Buffers are Parameters written with ``ops.assign`` and *not* registered on
  any cell: they never show up in checkpoints or ``parameters_and_names()``.

``restore()`` puts every class back.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import weakref
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.generator import default_generator
from mindspore.ops import composite as C
from mindspore.ops import constexpr
from mindspore.ops import functional as F
from mindspore.ops.function import random_func
from mindspore.ops.primitive import Primitive

from mindspore_doctor.forward import SAMPLING_SWITCH, gc_frozen, traceless
from mindspore_doctor.library import mindspore_classes
from mindspore_doctor.probes.host import host_flat
from mindspore_doctor.probes.state_gradients import StateGradients, loss_unscale
from mindspore_doctor.probes.swap import CannotProbe, class_functions, probed_class, swap, user_class
from mindspore_doctor.rule import CheckSkipped
from mindspore_doctor.signals import ACTIVATION_KINDS, DEAD_AT_ZERO, ActivationStats, StepSignals

# The probed optimizer's ``_msd_grad_sums`` holds one number per optimizer parameter: half the sum of g² (one L2Loss
# kernel each). Every node of a compiled graph costs host memory (measured on CPU: ~0.08 MB per kernel
# mapped with ``HyperMap``, ~0.5-0.7 MB per kernel unrolled from a Python loop in ``construct``), so
# one kernel per gradient replaced the earlier Σg² and Σ|g| (five kernels each: -14 MB on a small
# ResNet); mean |g| became the RMS. Everything about the weights is computed on the host, where a
# Parameter reads as a view (no copy). Non-finite flags: a sum of squares is non-finite exactly when
# g holds a NaN/Inf (or, in the float32 graph, when it passes 3.4e38).
# The update is measured on at most this many evenly strided elements per parameter (exact below it):
# a host copy of every weight would cost as much memory as the in-graph snapshot it replaces.
UPDATE_SAMPLE = 1 << 16
# An ``if`` on a Parameter inside a compiled step is control flow, whose cost depends on the network (MindSpore 2.10
# CPU, paired timing, scripts/bench_overhead.py): on a 64-128-64-10 MLP (6 tensors, 17k elements) the Doctor's mean
# step ratio is 2.0-2.1 with the switch and 1.6 with the sums computed on every step instead; LeNet (61k elements)
# measured the same both ways (mean ratio 0.66-0.80 with the switch, 0.65-0.81 without; two rounds). On the
# real-code corpus's models of 19k-892k elements in 10-169 tensors (MHA, LSTM, Transformer LM, ECAPA-TDNN,
# ShuffleNetV2, MobileNetV3) the every-step sums measured as cheap as the switch or cheaper (ECAPA-TDNN +7.5-11 % vs
# +12-13 %, a 2-layer LSTM +5 % against +9-10 %), and the ``if`` itself costs host memory (peak RSS without it:
# MobileNetV3 -20 MB, ECAPA-TDNN -15, ShuffleNetV2 -8); on RegNet (2.3M elements) and a ResNet (4.9M) the sums read
# too much on every step (RegNet +7.6 % against +3.4 %; the ResNet +5.8 ms against +1.7 ms). Only a network this small
# takes the sums on every step.
SUMS_EVERY_STEP_ELEMENTS = 1 << 20
_CHUNK = 1 << 18  # float64 scratch, in elements, for the host sums

# The activation sample: the first SAMPLE_ROWS samples of the batch (axis 0) x SAMPLE_COLS units (output
# positions of one sample), evenly strided. 16 samples: a healthy unit (active half the time) looks dead
# on all of them with probability 2**-16. Smaller outputs are padded with SAMPLE_PAD, a value no probed
# activation outputs (ReLU, ReLU6, Sigmoid >= 0; Tanh >= -1; GELU > -0.2).
SAMPLE_ROWS, SAMPLE_COLS = 16, 256
SAMPLE_PAD = -2.0
# Per-unit deadness needs enough samples that a healthy unit is almost never off on all of them: 2**-8 < 0.4 %.
MIN_BATCH_FOR_UNITS = 8
# A Sigmoid/Tanh unit is saturated when its local derivative, computed from the output as MindSpore's
# SigmoidGrad/TanhGrad compute it, is below this in magnitude: it passes back less than 1e-7 of the
# gradient. Sigmoid: |x| > ~16.2. Tanh: where the float32 output rounds to +-1, which MindSpore's CPU
# kernel reaches from |x| ~ 5.1 (TanhGrad is then exactly 0).
SATURATED_SLOPE = 1e-7

_SLOPE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": lambda y: y * (1.0 - y),
    "tanh": lambda y: 1.0 - y * y,
}


def free_parameter(value: np.ndarray) -> Parameter:
    """A Parameter on no cell, which the graph writes or reads; never part of a checkpoint."""
    free_parameter.count += 1
    return Parameter(Tensor(value), name=f"_msdoctor_probe_{free_parameter.count}", requires_grad=False)


free_parameter.count = 0


def _f32(x: Any) -> Any:
    """float32 view; no Cast kernel when it already is (each kernel of a compiled graph costs host memory)."""
    return x if x.dtype == ms.float32 else x.astype(ms.float32)


_grad_sums = C.MultitypeFuncGraph("msdoctor_grad_sums")


_half_square_sum = ops.L2Loss()
_NO_SUM = Tensor(np.float32(0.0))
"""The sum of a gradient the graph does not read: a constant, where ``ops.zeros`` is a kernel a step (ShuffleNetV2's
168 tensors read on the host: 2.2 ms a step)."""


@_grad_sums.register("Bool", "Tensor")
def _grad_sums_one(read, grad):
    if read:  # a constant: the branch not taken is not compiled
        return _half_square_sum(_f32(grad))
    return _NO_SUM


_map = C.HyperMap()


def _written(buffer: Parameter, value: Any, counter: Parameter, count: Any) -> Any:
    """Write the sums and the counter; what the step must depend on."""
    return F.depend(ops.assign(counter, count), ops.assign(buffer, value))


def _optimizer_sums(self, gradients):
    return ops.stack(_map(_grad_sums, self._msd_read, gradients))


def _optimizer_probe(self, gradients, *args, **kwargs):
    """The probed optimizer's ``construct``: the user's, then, on probe steps (``_msd_probing`` holds True),
    Σg²/2 of each gradient. The gradients are a named parameter, as in the optimizers' own ``construct``: a
    compiled call takes them as the graph's input."""
    done = self._msd_inner(gradients, *args, **kwargs)
    # Both branches return values that two unconditional assigns write: with the assigns inside the branch,
    # MindSpore 2.10 dropped them after AdamWeightDecay (tests/test_probes.py, every optimizer).
    if self._msd_probing:
        sums, calls = _optimizer_sums(self, gradients), self._msd_calls + 1  # calls: the optimizer ran
    else:
        sums, calls = self._msd_grad_sums, self._msd_calls
    return F.depend(done, _written(self._msd_grad_sums, sums, self._msd_calls, calls))


def _optimizer_probe_constant(self, gradients, *args, **kwargs):
    """``_optimizer_probe`` with a Python switch, ``_msd_probe_now``, a constant when the graph compiles: under a phase
    of its own (``PROBE_PHASE``) the other steps run the user's graph; always on, the sums run on every step, for
    small networks, where they cost less than the control flow of an ``if`` on a Parameter
    (``SUMS_EVERY_STEP_ELEMENTS``)."""
    done = self._msd_inner(gradients, *args, **kwargs)
    if self._msd_probe_now:
        return F.depend(done, _written(self._msd_grad_sums, _optimizer_sums(self, gradients), self._msd_calls,
                                       self._msd_calls + 1))
    return done


@_grad_sums.register("Tensor", "Bool", "Tensor", "Tensor")
def _decayed_grad_sums_one(weight_decay, decays, weight, decayed):
    """Σg²/2 of a gradient read back from ``decayed`` = g + wd·w, where the decay wrote it."""
    if decays:
        return _half_square_sum(_f32(decayed - weight * F.cast(weight_decay, F.dtype(weight))))
    return _NO_SUM


def _decayed_sums(self, decayed):
    weight_decay = self.get_weight_decay()
    if self.is_group:
        return ops.stack(_map(_grad_sums, weight_decay, self._msd_decay_read, self._parameters, decayed))
    return ops.stack(_map(F.partial(_grad_sums, weight_decay), self._msd_decay_read, self._parameters, decayed))


def _decay_probe(self, gradients):
    """The probed ``nn.Optimizer.decay_weight``: MindSpore's, then, on probe steps, Σg²/2 of each decayed gradient
    from its decayed value.

    Why not read g itself: a gradient summed from several uses of its weight (a recurrent layer's, a CRF's
    transitions, a tied weight) is an ``AddN``, which MindSpore merges into the decay's ``AddN`` only while the
    decay is its one reader (``MergeAddN``); a second reader changed the summation order and the decayed update in
    the last bit (MindSpore 2.10 CPU). Reading the decay's own output leaves that merge alone."""
    decayed = self._msd_decay_weight(gradients)
    if self._msd_probing:
        sums, calls = _decayed_sums(self, decayed), self._msd_decay_calls + 1
    else:
        sums, calls = self._msd_decay_sums, self._msd_decay_calls
    return F.depend(decayed, _written(self._msd_decay_sums, sums, self._msd_decay_calls, calls))


def _decay_probe_constant(self, gradients):
    """``_decay_probe`` with a Python switch (see ``_optimizer_probe_constant``)."""
    decayed = self._msd_decay_weight(gradients)
    if self._msd_probe_now:
        return F.depend(decayed, _written(self._msd_decay_sums, _decayed_sums(self, decayed),
                                          self._msd_decay_calls, self._msd_decay_calls + 1))
    return decayed


def _unit_stride(units):
    """The stride over a sample's units: SAMPLE_COLS evenly spaced, odd (an even stride over C*H*W would sample the
    same few image columns)."""
    stride = units // SAMPLE_COLS if units >= SAMPLE_COLS else 1
    if stride > 2 and stride % 2 == 0:
        stride = stride - 1
    return stride


@constexpr
def _sample_positions(shape: tuple, dtype: Any) -> tuple[Tensor, Tensor | None, Tensor | None] | None:
    """Where ``_output_sample`` reads in an output of ``shape``, flattened: a (SAMPLE_ROWS, SAMPLE_COLS) grid of
    positions. An output smaller than the grid has fewer positions (as a flat list), a one-element pad value of
    ``dtype``, and a grid of indices into the list with the pad appended: ``(positions, pad, grid)``; otherwise
    ``(grid of positions, None, None)``. Runs once, when the graph compiles: a constant of it. None when a dimension
    is dynamic (``set_inputs`` with None): not known when the graph compiles.

    The positions: the first SAMPLE_ROWS samples (axis 0; a 0-/1-d output is one sample) x SAMPLE_COLS of their
    units, at ``_unit_stride``."""
    if any(not isinstance(n, int) or n < 0 for n in shape):
        return None
    rows = int(shape[0]) if len(shape) >= 2 else 1
    units = int(np.prod(shape[1:] if len(shape) >= 2 else shape, dtype=np.int64))
    stride = _unit_stride(units)
    taken_rows, taken_units = min(rows, SAMPLE_ROWS), min(units, SAMPLE_COLS)
    index_type = np.int32 if rows * units < 2**31 else np.int64
    positions = (np.arange(taken_rows, dtype=index_type)[:, None] * units
                 + np.arange(taken_units, dtype=index_type)[None, :] * stride)
    if (taken_rows, taken_units) == (SAMPLE_ROWS, SAMPLE_COLS):
        return Tensor(positions), None, None
    grid = np.full((SAMPLE_ROWS, SAMPLE_COLS), positions.size, np.int32)
    grid[:taken_rows, :taken_units] = np.arange(positions.size).reshape(taken_rows, taken_units)
    return Tensor(positions.reshape(-1)), Tensor(np.full(1, SAMPLE_PAD), dtype), Tensor(grid)


def _output_sample(a):
    """(SAMPLE_ROWS, SAMPLE_COLS) strided sample of an activation output, padded with SAMPLE_PAD.

    A Gather at positions fixed when the graph compiles (``_sample_positions``); an output smaller than the sample
    then gets the pad value appended and a second Gather lays it out on the grid (both on at most 4097 elements).
    It replaced a StridedSlice and a Pad, which an output with a dynamic dimension still takes: 13 MB less peak
    memory on MobileNetV3 and on a digits autoencoder (docs/doctor.md, "Fast steps").
    """
    found = _sample_positions(a.shape, a.dtype)
    if found is None:
        return _sliced_sample(a)
    positions, pad, grid = found
    sample = ops.gather(a.reshape(-1), positions, 0)
    if pad is not None:
        sample = ops.gather(ops.concat((sample, pad)), grid, 0)
    return _f32(sample)


def _sliced_sample(a):
    """``_output_sample`` of an output whose shape is known only when it runs: a slice, padded."""
    flat = a.reshape(a.shape[0], -1) if a.ndim >= 2 else a.reshape(1, -1)
    rows, units = flat.shape
    stride = _unit_stride(units)
    sample = flat[:SAMPLE_ROWS, 0:stride * SAMPLE_COLS:stride]
    if rows < SAMPLE_ROWS or units < SAMPLE_COLS:
        sample = ops.pad(sample, (0, SAMPLE_COLS - sample.shape[1], 0, SAMPLE_ROWS - sample.shape[0]),
                         value=SAMPLE_PAD)
    return _f32(sample)


def _strided(flat: np.ndarray) -> np.ndarray:
    """At most ``UPDATE_SAMPLE`` evenly strided elements of a flat array, as a view."""
    return flat[::-(-flat.size // UPDATE_SAMPLE)]


def _update_sample(weight: Parameter) -> np.ndarray:
    """At most ``UPDATE_SAMPLE`` evenly strided elements of a weight, as a flat view of its host data."""
    return _strided(host_flat(weight))


class _AbsSums:
    """``_abs_sum_max`` of a series of arrays, to the same bits: the arrays that fit are copied side by side into
    the scratch and take one ``abs`` pass together (a small network's numpy calls per tensor were most of a probe
    step's read), the larger ones go through it in chunks. Each array is copied as it comes: a weight's host read
    is not held while the next is taken."""

    def __init__(self, count: int, elements: int = _CHUNK) -> None:
        self.scratch = np.empty(min(_CHUNK, max(1, elements)), np.float64)  # a small network's: no 2 MB to map
        self.results: list[tuple[float, float]] = [(0.0, 0.0)] * count
        self._packed: list[tuple[int, int, int]] = []  # (array, start, size) in the scratch
        self._end = 0

    def add(self, index: int, values: np.ndarray, minus: np.ndarray | None = None) -> None:
        size = values.size
        if size == 0:
            return
        if size > self.scratch.size:
            self._flush()
            self.results[index] = _abs_sum_max(values, self.scratch, minus)
            return
        if self._end + size > self.scratch.size:
            self._flush()
        part = self.scratch[self._end:self._end + size]
        part[:] = values
        if minus is not None:
            part -= minus
        self._packed.append((index, self._end, size))
        self._end += size

    def finish(self) -> list[tuple[float, float]]:
        self._flush()
        return self.results

    def _flush(self) -> None:
        if not self._packed:
            return
        packed = self.scratch[:self._end]
        np.abs(packed, out=packed)
        for index, start, size in self._packed:
            part = packed[start:start + size]
            self.results[index] = (float(part.sum()), float(part.max()))  # max >= 0 of |x|; NaN propagates
        self._packed, self._end = [], 0


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


def _activation_probe(self, x, *args, **kwargs):
    """The probed activation's ``construct``: the user's, and a sample of its output while sampling."""
    y = self._msd_inner(x, *args, **kwargs)
    if self._msd_sampling:  # SAMPLING_SWITCH: compiled, so spelled out
        ops.assign(self._msd_sample, _output_sample(ops.stop_gradient(y)))
    return y


def activation_stats(kind: str, sample: np.ndarray, order: int) -> ActivationStats | None:
    """Statistics of one activation's output sample; None when the cell never ran (all padding)."""
    pad = sample == SAMPLE_PAD
    if pad.any():  # the output was smaller than the sample
        rows = ~pad.all(axis=1)
        values = sample[rows][:, ~pad[rows].all(axis=0)].astype(np.float64)
    else:
        values = sample.astype(np.float64)
    if values.size == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf are signals here
        stats = ActivationStats(kind=kind, mean_abs=float(np.abs(values).mean()),
                                nonfinite=int(not np.isfinite(values).all()), order=order)
        if kind in DEAD_AT_ZERO:
            off = values <= 0
            stats.dead_fraction = float(off.mean())
            if values.shape[0] >= MIN_BATCH_FOR_UNITS:
                stats.dead_unit_fraction = float(off.all(axis=0).mean())
                stats.units = int(values.shape[1])
        if kind in _SLOPE:
            stats.saturated_fraction = float((np.abs(_SLOPE[kind](values)) < SATURATED_SLOPE).mean())
    return stats


def activation_kind(cell: Any) -> str | None:
    """The kind of a MindSpore activation cell, or of a user subclass of one; None for any other cell."""
    return next((ACTIVATION_KINDS[c.__name__] for c in mindspore_classes(type(cell)) if c.__name__ in ACTIVATION_KINDS),
                None)


def _gradients_first(optimizer_class: type) -> None:
    """The probe reads the gradients as the optimizer's first positional argument, as every train cell passes them."""
    construct = optimizer_class.construct
    while hasattr(construct, "__wrapped__"):
        construct = construct.__wrapped__
    try:
        first = list(inspect.signature(construct).parameters.values())[1:2]
    except (TypeError, ValueError):
        return
    if first and first[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                       inspect.Parameter.VAR_POSITIONAL):
        raise CannotProbe(f"{optimizer_class.__name__}.construct takes no positional gradients argument")


PROBE_PHASE = "_msdoctor_probe"
"""Appended to the train cell's phase on probe steps (``Instrumentation.train_cell``): MindSpore compiles and caches
one graph per phase, so the other steps run the user's own graph, without a kernel of the Doctor's."""
PROBE_PHASE_MAX_PARAMETERS = 16
"""The most optimizer parameters (tensors) of a network whose probe steps run under ``PROBE_PHASE``."""
PROBE_PHASE_MAX_GROWTH = 0.5
"""A first step whose compile grew the process by more than this fraction of its resident memory keeps running the
probe graph (``Instrumentation.settle_probe_phase``). The user's graph compiled beside it cost 0.06-0.39 of the
first step's growth on the corpus (a CRF unrolled over time steps: +382 MB on ~370 at the first step, +148 MB for the
second graph; MLPs, LSTMs, a CRNN, DeepFM: +37 to +107 MB on ~410, then +2 to +20 MB)."""
PROBE_NOW = "_msd_probe_now"
"""The probed optimizer's Python switch (``_optimizer_probe_constant``): a constant of each phase's graph under
``PROBE_PHASE``, always on with the sums on every step."""


FORWARD_SAMPLES_MIN_CELLS = 8
"""The fewest activation cells whose samples a forward pass of the Doctor's own takes on probe steps
(``_SampleForward``), rather than the train step on every step. Sampled in the train step each cell costs 35-50 us a
step on CPU; the pass costs a forward pass every ``probe_every`` steps (MobileNetV3: 20 ms against a 32 ms step) and
the host memory of its graph (corpus, peak RSS: ECAPA-TDNN +30 MB, ShuffleNetV2 +22, RegNet-X +15, and a
two-activation attention model +21 MB, which took it from 1.07 to 1.10 of the plain run's)."""


def _spread_out(activations: dict[str, nn.Cell], keep: int | None) -> list[str]:
    """Keep ``keep`` of ``activations`` (in network order), spread evenly from the first to the last; the paths of the
    others, removed. Each sampled cell of a compiled step costs a gather and a copy on every step: 35-50 us on CPU
    (ShuffleNetV2's 37 ReLUs 1.2 ms a step, RegNet-X's 40 1.9 ms)."""
    paths = list(activations)
    if keep is None or len(paths) <= keep:
        return []
    kept = set(np.linspace(0, len(paths) - 1, max(keep, 1)).round().astype(int).tolist()) if keep > 0 else set()
    removed = [path for i, path in enumerate(paths) if i not in kept]
    for path in removed:
        del activations[path]
    return removed


def _probe_phase_pays(train_cell: Any, optimizer: Any, few_weights: bool) -> bool:
    """Whether probe steps get a compiled graph of their own (``PROBE_PHASE``): only a small network's. The other
    steps then run without the probes' kernels, which on CPU cost ~10-15 us each per step, a third of a small MLP's
    step; a second graph costs host memory by the network's size (corpus, peak RSS over the one-graph Doctor: MLPs of
    4-10 tensors +1 to +7 MB, a CRNN of 16 +16 MB; attention models of 28-31 +42 to +51 MB, MobileNetV3 +44,
    ShuffleNetV2 +88). ``few_weights``: the optimizer holds at most ``SUMS_EVERY_STEP_ELEMENTS`` weights."""
    return few_weights and isinstance(train_cell, nn.Cell) and len(optimizer.parameters) <= PROBE_PHASE_MAX_PARAMETERS


_BUFFERS: "weakref.WeakKeyDictionary[nn.Cell, dict[str, Any]]" = weakref.WeakKeyDictionary()
"""Each probed cell's buffers, kept while the cell lives: a graph compiled with the probes in (a model trained
again, a reused Doctor) keeps reading and writing these very Parameters, so a later run hands the same ones to the
probes and they work again."""


_EMPTY_SAMPLE = Tensor(np.full((SAMPLE_ROWS, SAMPLE_COLS), SAMPLE_PAD, np.float32))


def _decayed(optimizer: Any) -> set[str] | None:
    """The parameters ``optimizer`` applies weight decay to; None when it cannot be told (a hand-written one)."""
    if hasattr(optimizer, "exec_weight_decay") and hasattr(optimizer, "decay_flags"):  # nn.Optimizer
        if not optimizer.exec_weight_decay:
            return set()
        return {p.name for p, flag in zip(optimizer.parameters, optimizer.decay_flags) if flag}
    groups = getattr(optimizer, "param_groups", None)  # mint.optim
    if isinstance(groups, (list, tuple)):
        return {p.name for group in groups if float(group.get("weight_decay", 0) or 0) != 0
                for p in group.get("params", ())}
    return None


def _decays_through_library(optimizer: Any) -> bool:
    """An ``nn.Optimizer`` applying weight decay with MindSpore's own ``decay_weight``, which its ``construct``
    (or a parent's) calls: the probe reads the decayed gradients there (``_decay_probe``)."""
    if not (isinstance(optimizer, nn.Optimizer) and optimizer.exec_weight_decay
            and type(optimizer).decay_weight is nn.Optimizer.decay_weight):
        return False
    for cls in type(optimizer).__mro__:
        construct = vars(cls).get("construct")
        while hasattr(construct, "__wrapped__"):
            construct = construct.__wrapped__
        if construct is not None and "decay_weight" in getattr(getattr(construct, "__code__", None), "co_names", ()):
            return True
    return False


def _gradients_left_unread(network: nn.Cell, optimizer: nn.Cell) -> list[str]:
    """Decayed gradients the probe cannot read safely. A second reader of a gradient summed from several uses
    (see ``_decay_probe``) changes the decayed update in the last bit; where the decay is not MindSpore's
    ``decay_weight`` only the recurrent layers (``nn.LSTM``/``GRU``/``RNN``) were measured doing so, and are left
    alone: an ``nn.Optimizer`` with its own ``decay_weight`` leaves every decayed gradient unread."""
    decayed = _decayed(optimizer)
    if decayed == set():
        return []
    if isinstance(optimizer, nn.Optimizer) and type(optimizer).decay_weight is not nn.Optimizer.decay_weight:
        return [p.name for p in optimizer.parameters if p.name in decayed]
    recurrent = {p.name for _, cell in network.cells_and_names()
                 if any(k in c.__name__ for c in mindspore_classes(type(cell)) for k in ("LSTM", "GRU", "RNN"))
                 for p in cell.get_parameters()}
    return [p.name for p in optimizer.parameters if p.name in recurrent and (decayed is None or p.name in decayed)]


_RANDOM_FUNCTIONS = frozenset(random_func.__all__) | {
    "bernoulli", "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu",
    "gumbel_softmax", "rand_ext", "randn_ext", "normal_", "uniform_", "exponential_", "random_", "bernoulli_"}
"""Random draws a cell's code may call by name (``ops.standard_normal``, ``ops.dropout``, ``Tensor.uniform_``)."""
_SEED_ATTRS = ("seed", "seed2", "Seed0", "Seed1")


def _dropout_cell(cell: nn.Cell) -> bool:
    """A MindSpore dropout cell (or a subclass keeping its ``construct``), which draws nothing in eval mode."""
    kinds = [c for c in mindspore_classes(type(cell)) if c.__name__.startswith("Dropout")]
    return bool(kinds) and type(cell).construct is kinds[0].construct


def _draws_random(cell: nn.Cell) -> bool:
    """Whether ``cell``'s own forward pass may draw random numbers, a dropout cell's aside: a primitive with a seed
    among its attributes, or a random function named in its class's code (what is an attribute of the cell, as
    BatchNorm's ``self.gamma``, is not one)."""
    if any(isinstance(value, Primitive) and any(k in value.attrs for k in _SEED_ATTRS)
           for value in (*vars(cell).values(), *getattr(cell, "_primitives", {}).values())):
        return True
    return any(not hasattr(cell, name) for name in _forward_names(type(cell)) & _RANDOM_FUNCTIONS)


def _forward_names(cls: type) -> set[str]:
    """The names the forward pass of a cell of class ``cls`` reads: in each ``construct`` of its classes and in
    the methods they call, as far as they go (an ``_initialize_weights`` run once is not read)."""
    methods = {}
    for klass in reversed(cls.__mro__[:-1]):
        if klass is not nn.Cell:
            methods.update({function.__name__: function for function in class_functions(klass)})
    names: set[str] = set()
    todo = [function for klass in cls.__mro__ if klass is not nn.Cell
            for function in class_functions(klass) if function.__name__ == "construct"]
    seen: set[int] = set()
    while todo:
        function = todo.pop()
        if id(function) in seen:
            continue
        seen.add(id(function))
        read = set(_code_names(function.__code__))
        names |= read
        todo.extend(methods[name] for name in read if name in methods)
    return names


def _code_names(code: Any) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            yield from _code_names(const)


def forward_samples_safely(network: nn.Cell) -> bool:
    """Whether a train-mode pass of ``network`` of the Doctor's own, its dropout cells in eval mode, leaves the
    user's training as it is: nothing else in it draws random numbers. A random op's state is shared by every graph
    that runs it (MindSpore 2.10 CPU: one extra pass through an ``nn.Dropout`` changed the next training step's
    mask)."""
    return not any(_draws_random(cell) for _, cell in network.cells_and_names() if not _dropout_cell(cell))


def called_loss_network(train_cell: Any) -> nn.Cell | None:
    """The loss network a train cell calls with the step's inputs as they are, when a pass of it of the Doctor's own
    leaves training as it is (``forward_samples_safely``); None when that call is not known. Known: MindSpore's
    ``TrainOneStepCell`` and its loss-scale kin, and a subclass whose ``construct(self, *inputs)`` calls
    ``self.network(*inputs)`` without touching ``inputs`` (mindcv's ``TrainStep``)."""
    cls = user_class(train_cell)
    if cls not in (nn.TrainOneStepCell, nn.TrainOneStepWithLossScaleCell) and not _passes_its_inputs(cls):
        return None
    network = getattr(train_cell, "network", None)
    return network if isinstance(network, nn.Cell) and forward_samples_safely(network) else None


def _passes_its_inputs(cls: type) -> bool:
    """``cls.construct(self, *inputs)`` calls ``self.network(*inputs)`` and never rebinds ``inputs``."""
    construct = next((vars(k)["construct"] for k in cls.__mro__ if "construct" in vars(k)), None)
    while hasattr(construct, "__wrapped__"):
        construct = construct.__wrapped__
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(construct)))
    except (OSError, TypeError, SyntaxError):
        return False
    function = tree.body[0] if tree.body else None
    if not isinstance(function, ast.FunctionDef) or function.args.vararg is None:
        return False
    inputs = function.args.vararg.arg
    if function.args.args[1:] or any(isinstance(node, ast.Name) and node.id == inputs
                                     and isinstance(node.ctx, (ast.Store, ast.Del)) for node in ast.walk(function)):
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "network"
               and isinstance(node.func.value, ast.Name) and node.func.value.id == "self" and not node.keywords
               and len(node.args) == 1 and isinstance(node.args[0], ast.Starred)
               and isinstance(node.args[0].value, ast.Name) and node.args[0].value.id == inputs
               for node in ast.walk(function))


class _SampleForward(nn.Cell):
    """The train cell's loss network, called as the train cell calls it, compiled as a graph of the Doctor's own with
    the activation probes in: on probe steps only, so the user's train graph carries none of the samples' gathers
    and copies (35-50 us a cell on every step on CPU).

    A cell of its own (``auto_prefix=False``: the user's parameters keep their names): a graph MindSpore caches
    under its key, never one the user compiles from the loss network."""

    def __init__(self, network: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.network = network
        self._compiled = False

    def construct(self, *inputs):
        return self.network(*inputs)

    def run(self, inputs: tuple, probes: list[tuple[nn.Cell, type, dict[str, Any]]]) -> None:
        """One pass over ``inputs``, each ``(cell, probed class, buffers)`` of ``probes`` swapped in for it."""
        with (traceless(self.network, run_eagerly=False), _generator_kept(),
              nullcontext() if self._compiled else gc_frozen()):
            for _, cell in self.network.cells_and_names():
                if _dropout_cell(cell):
                    cell.training = False
            undo = [swap(cell, probed, {**buffers, SAMPLING_SWITCH: True}) for cell, probed, buffers in probes]
            try:
                self(*inputs)
                self._compiled = True
            finally:
                for step in reversed(undo):
                    step()


@contextmanager
def _generator_kept() -> Iterator[None]:
    """The default generator's state (``mint`` dropout's seed and offset), put back when the block ends."""
    state = default_generator.get_state()
    try:
        yield
    finally:
        default_generator.set_state(state)


class Instrumentation:
    """Installs the probes into an optimizer and a network, in place; ``restore()`` undoes everything.

    In place (classes are swapped, nothing is re-parented; see ``probes/swap.py``), so the probes run wherever
    the user calls them: a ``TrainOneStepCell`` Model built, one the user calls by hand, or ``optimizer(grads)``
    inside the user's own ``@ms.jit`` step or a PyNative loop. Install before the first compiled call: a graph
    compiled earlier keeps the classes it was compiled with. All or nothing: when installing raises, whatever was
    swapped is put back before the error leaves. A cell whose class cannot take probes safely is left alone and
    named in ``unprobed`` (the optimizer under the key ``"optimizer"``), with the reason.
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Cell, train_cell: Any = None,
                 sampled_activations: int | None = None, loss_network: Any = None) -> None:
        self.network = network
        self.optimizer = optimizer
        self.parameter_names = [p.name for p in optimizer.parameters]
        self.parameter_shapes = {p.name: list(p.shape) for p in optimizer.parameters}
        self._weight_elements = sum(p.size for p in optimizer.parameters)
        self.activations: dict[str, nn.Cell] = {
            path: cell for path, cell in network.cells_and_names() if path and activation_kind(cell) is not None
        }
        self.unprobed: dict[str, str] = {}
        self._derived = StateGradients.of(optimizer, UPDATE_SAMPLE)
        """The gradients the host derives from the optimizer's state (``probes/state_gradients.py``): no kernel in the
        graph for them, which in the one-graph design would run on every step."""
        derived = self._derived.indices if self._derived else ()
        self._derived_names = frozenset(self.parameter_names[i] for i in derived)
        self._optimizer_in_graph = len(derived) < len(self.parameter_names)
        """Some gradient is read in the graph: the optimizer gets its probed class. Otherwise it keeps its own, and
        nothing of the Doctor's runs in its step (RegNet's switch, with no sums left behind it, cost 3 ms a step)."""
        self._unscale = loss_unscale(optimizer)
        """The optimizer's own loss scale, 1/s: the gradients the graph reads are ``s`` times the true ones."""
        through_library = _decays_through_library(optimizer)
        self._read_at_decay = (frozenset(_decayed(optimizer) or ()) - self._derived_names if through_library
                               else frozenset())
        """Parameters whose gradient the probed ``decay_weight`` reads (``_decay_probe``), not the probed construct."""
        self.unread_gradients = [] if through_library else [
            name for name in _gradients_left_unread(network, optimizer) if name not in self._derived_names]
        """Parameters whose gradient the probe does not read (their updates and weights are still measured)."""
        graph = ms.get_context("mode") == ms.GRAPH_MODE
        few_weights = self._weight_elements <= SUMS_EVERY_STEP_ELEMENTS
        forward = (_SampleForward(loss_network) if graph and loss_network is not None
                   and len(self.activations) >= FORWARD_SAMPLES_MIN_CELLS else None)
        in_graph = self._optimizer_in_graph or (bool(self.activations) and forward is None)
        self.train_cell = (train_cell if graph and in_graph and _probe_phase_pays(train_cell, optimizer, few_weights)
                           else None)
        """The train cell whose probe steps run under a phase of their own (``PROBE_PHASE``); None: one graph."""
        self._forward = forward if self.train_cell is None else None
        """The Doctor's own forward graph that samples the activations on probe steps (``sample_activations``);
        None: the train step samples them."""
        self._probed_activations: list[tuple[nn.Cell, type, dict[str, Any]]] = []
        """Each activation cell, its probed class and buffers, swapped in only around ``self._forward``'s runs."""
        # A compiled step cannot switch the sampling off without control flow; PyNative runs Python each step.
        self._sample_every_step = graph and self.train_cell is None and self._forward is None
        self.unsampled = _spread_out(self.activations, sampled_activations) if self._sample_every_step else []
        """Activation cells left unsampled: a compiled step samples at most ``sampled_activations`` on every step."""
        self.sums_every_step = self._sample_every_step and few_weights
        """The optimizer's probe sums the gradients on every step, without a switch (``SUMS_EVERY_STEP_ELEMENTS``)."""
        self._undo: list[Callable[[], None]] = []
        self._probe_phase_only = False
        self.probing = False
        """Whether the probes are on: what ``set_probing`` last switched them to (read it; switch with that)."""
        self._calls_before = (0, 0)
        self._weights_before: list[np.ndarray] | None = None
        try:
            self._install()
        except BaseException:
            self._put_back()
            raise

    @property
    def optimizer_probed(self) -> bool:
        return "optimizer" not in self.unprobed

    @property
    def grad_sums(self) -> Parameter:
        """Σg²/2 of each optimizer parameter at the last probe step."""
        return self.optimizer._msd_grad_sums  # pylint: disable=protected-access

    @property
    def optimizer_calls(self) -> int:
        """Runs of the optimizer the probe counted: on probe steps, or on every step (``sums_every_step``); those
        ``global_step`` counted when the optimizer keeps its own class."""
        if not self._optimizer_in_graph:
            return int(self.optimizer.global_step.item())
        return int(self.optimizer._msd_calls.item())  # pylint: disable=protected-access

    @property
    def decay_calls(self) -> int:
        """Runs of the optimizer's ``decay_weight`` the probe counted, as ``optimizer_calls`` (0 when it is not
        probed)."""
        calls = getattr(self.optimizer, "_msd_decay_calls", None)
        return 0 if calls is None else int(calls.item())  # item(): 0.4 us, asnumpy()[0]: 6.6 us

    def _probed(self, key: str, cell: nn.Cell, probe: Callable[..., Any], state: Callable[[], dict[str, Any]],
                check: Callable[[type], None] = lambda cls: None,
                extra: dict[str, Any] | None = None) -> tuple[type, dict[str, Any]] | None:
        """``cell``'s probed class and buffers; None (and ``unprobed[key]`` says why) when its class cannot take one.
        ``state`` makes the buffers, kept for the cell's life (``_BUFFERS``)."""
        try:
            check(type(cell))
            probed = probed_class(type(cell), probe, extra)
        except CannotProbe as why:
            self.unprobed[key] = str(why)
            return None
        buffers = _BUFFERS.get(cell)
        if buffers is None:
            buffers = _BUFFERS[cell] = state()
        return probed, buffers

    def _swap(self, key: str, cell: nn.Cell, probe: Callable[..., Any], state: Callable[[], dict[str, Any]],
              check: Callable[[type], None] = lambda cls: None, extra: dict[str, Any] | None = None,
              switches: dict[str, Any] | None = None) -> bool:
        """Give ``cell`` its probed class (``_probed``); ``switches``, Python flags set anew."""
        found = self._probed(key, cell, probe, state, check, extra)
        if found is None:
            return False
        probed, buffers = found
        self._undo.append(swap(cell, probed, {**buffers, **(switches or {})}))
        return True

    def _install(self) -> None:
        if self._optimizer_in_graph:
            self._install_optimizer()
        for path, cell in list(self.activations.items()):
            found = self._probed(path, cell, _activation_probe, lambda c=cell: {
                "_msd_sample": free_parameter(_EMPTY_SAMPLE.asnumpy()),
                "_msd_kind": activation_kind(c),
            })
            if found is None:
                del self.activations[path]
                continue
            probed, buffers = found
            if self._forward is not None:
                self._probed_activations.append((cell, probed, buffers))
            else:
                self._undo.append(swap(cell, probed, {**buffers, SAMPLING_SWITCH: self._sample_every_step}))
            ops.assign(buffers["_msd_sample"], _EMPTY_SAMPLE)

    def _install_optimizer(self) -> None:
        optimizer, count, at_decay = self.optimizer, len(self.optimizer.parameters), bool(self._read_at_decay)
        switched = self.train_cell is None and not self.sums_every_step  # the switch is a Parameter
        probe, decay_probe = ((_optimizer_probe, _decay_probe) if switched else
                              (_optimizer_probe_constant, _decay_probe_constant))
        self._swap("optimizer", optimizer, probe, lambda: {
            "_msd_probing": free_parameter(np.array(False)),
            "_msd_grad_sums": free_parameter(np.zeros(count, np.float32)),
            "_msd_calls": free_parameter(np.zeros(1, np.int32)),
            "_msd_read": tuple(name not in self.unread_gradients and name not in self._read_at_decay
                               and name not in self._derived_names for name in self.parameter_names),
            **({"_msd_decay_sums": free_parameter(np.zeros(count, np.float32)),
                "_msd_decay_calls": free_parameter(np.zeros(1, np.int32)),
                "_msd_decay_read": tuple(name in self._read_at_decay for name in self.parameter_names)}
               if at_decay else {}),
        }, check=_gradients_first, switches={PROBE_NOW: self.sums_every_step},
            extra={"decay_weight": decay_probe, "_msd_decay_weight": nn.Optimizer.decay_weight} if at_decay else None)

    def set_probing(self, probing: bool) -> None:
        """Make the next step a probe step, or not.

        Before a probe step, copies each weight's update sample, so ``read()`` can measure the true update.
        """
        parameters, in_graph = self.optimizer_probed, self.optimizer_probed and self._optimizer_in_graph
        self._weights_before = ([_update_sample(p).copy() for p in self.optimizer.parameters]
                                if probing and parameters else None)
        if probing and parameters:  # the counters say whether the optimizer (and its decay) ran on the probe step
            self._calls_before = (self.optimizer_calls, self.decay_calls)
            if self._derived is not None:
                self._derived.before()
        if probing == self.probing:
            return
        self.probing = probing
        if self.train_cell is not None:
            if not self._probe_phase_only:  # else the probe graph, compiled with its switches on, runs every step
                self._switch_phase(probing)
                if in_graph:
                    setattr(self.optimizer, PROBE_NOW, probing)
        elif in_graph and not self.sums_every_step:  # the every-step probe has no switch to read it
            # An in-place write: a graph compiled from the user's own ``@ms.jit`` function keeps reading the
            # flag's first storage, which ``set_data`` would replace (measured: the probes then never switch off).
            ops.assign(self.optimizer._msd_probing, Tensor(probing))  # pylint: disable=protected-access
        if not self._sample_every_step and not self._probe_phase_only and self._forward is None:
            for cell in self.activations.values():
                setattr(cell, SAMPLING_SWITCH, probing)

    def sample_activations(self, inputs: Any) -> None:
        """Before a probe step, when the train step does not sample the activations (``self._forward``): one pass of
        the loss network over the step's ``inputs`` in a graph of the Doctor's own, with the probed activation
        classes swapped in for it alone: the weights and the batch of the step's own forward pass. It leaves no
        trace (``traceless``: cell attributes, BatchNorm statistics; the default generator's state, which ``mint``
        dropout advances). Raises ``CheckSkipped`` when the step handed over no inputs or the pass fails; the
        activations are not read from then on."""
        if self._forward is None or not self.probing:
            return
        if not inputs:
            self.activations.clear()
            raise CheckSkipped("the step handed over no inputs for the activation samples' forward pass")
        try:
            self._forward.run(tuple(inputs), self._probed_activations)
        except Exception as exc:
            self.activations.clear()
            first_line = next(iter(str(exc).strip().splitlines()), "")
            raise CheckSkipped(f"the activation samples' forward pass cannot run: {type(exc).__name__}: "
                               f"{first_line}") from exc

    def settle_probe_phase(self, resident_before_mb: float, resident_after_mb: float) -> None:
        """After the first step (a probe step), from the process's resident memory before and after it: when the
        probe graph's compile grew it by more than ``PROBE_PHASE_MAX_GROWTH`` of what it held, every step runs the
        probe graph from now on, as the one-graph design runs this network's probes on every step, rather than
        compiling the user's graph beside it."""
        if (self.train_cell is not None and self.probing
                and resident_after_mb - resident_before_mb > PROBE_PHASE_MAX_GROWTH * resident_before_mb):
            self._probe_phase_only = True

    def _switch_phase(self, probing: bool) -> None:
        """Run the train cell's next call under its probe phase, or back under its own: each phase compiles once,
        with the probes' Python switches as they are then."""
        cell = self.train_cell
        if probing:
            cell.phase = cell.phase + PROBE_PHASE
        elif cell.phase.endswith(PROBE_PHASE):
            cell.phase = cell.phase[:-len(PROBE_PHASE)]

    def read_into(self, signals: StepSignals, updates_of: Collection[str] = ()) -> dict[str, np.ndarray]:
        """Fill ``signals`` with the statistics of the last probed step; no parameter statistics when the
        optimizer did not run (e.g. loss-scale overflow). Returns the update samples (``w_after - w_before``,
        strided as in ``_update_sample``) of the parameters named in ``updates_of``, for histograms."""
        before, self._weights_before = self._weights_before, None
        updates: dict[str, np.ndarray] = {}
        signals.probed()
        calls = 0 if before is None else self.optimizer_calls - self._calls_before[0]
        if calls:
            decay_read = self.decay_calls != self._calls_before[1]
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # NaN/Inf are signals here
                self._read_parameters(before, signals, decay_read=decay_read, one_update=calls == 1)
                updates = {name: _update_sample(weight) - before[i] for i, (name, weight)
                           in enumerate(zip(self.parameter_names, self.optimizer.parameters)) if name in updates_of}
        for order, (path, cell) in enumerate(self.activations.items()):
            buffers = _BUFFERS[cell]
            sample = buffers["_msd_sample"]
            stats = activation_stats(buffers["_msd_kind"], host_flat(sample).reshape(sample.shape), order)
            if stats is not None:
                signals.activations[path] = stats
        if self.train_cell is not None:  # back to the user's graph now: whatever runs before the next step too
            self.set_probing(False)
        return updates

    def _read_parameters(self, before: list[np.ndarray], out: StepSignals, decay_read: bool, one_update: bool) -> None:
        """``decay_read``: the probed ``decay_weight`` ran on this step, so the decayed gradients were read there;
        ``one_update``: the optimizer ran once since ``set_probing`` (the derived gradients are that step's)."""
        grad_sums = (host_flat(self.grad_sums).astype(np.float64) if self._optimizer_in_graph
                     else np.zeros(len(before)))
        if decay_read:
            decay_sums = host_flat(self.optimizer._msd_decay_sums)  # pylint: disable=protected-access
            grad_sums = np.where([name in self._read_at_decay for name in self.parameter_names], decay_sums, grad_sums)
        if self._unscale is not None:
            grad_sums *= np.float64(self._unscale) ** 2
        unread = set(self.unread_gradients) | (set() if decay_read else self._read_at_decay)
        derived = self._derived.sums(before) if self._derived is not None and one_update else {}
        if derived:
            grad_sums[list(derived)] = list(derived.values())
        else:  # several optimizer runs since the state was copied (a sunk dataset): not one step's gradients
            unread |= self._derived_names
        weight_sums = _AbsSums(len(before), self._weight_elements)
        update_sums = _AbsSums(len(before), sum(sample.size for sample in before))
        for i, weight in enumerate(self.optimizer.parameters):
            values = host_flat(weight)  # one host read per weight
            weight_sums.add(i, values)
            update_sums.add(i, _strided(values), minus=before[i])
        weight_sums, update_sums = weight_sums.finish(), update_sums.finish()
        for i, (name, weight) in enumerate(zip(self.parameter_names, self.optimizer.parameters)):
            size = max(1, weight.size)
            weight_abs, _ = weight_sums[i]
            update_abs, update_max_abs = update_sums[i]
            weight_mean_abs = weight_abs / size
            if name not in unread:
                square_sum = 2.0 * grad_sums[i]
                grad_rms = np.sqrt(square_sum / size)
                out.grad_norm[name] = float(np.sqrt(square_sum))
                out.grad_rms[name] = float(grad_rms)
                out.grad_nonfinite[name] = int(not np.isfinite(grad_rms))
            out.weight_nonfinite[name] = int(not np.isfinite(weight_abs))
            out.update_abs[name] = update_max_abs
            out.weight_mean_abs[name] = weight_mean_abs
            update_mean_abs = update_abs / max(1, before[i].size)
            out.update_ratio[name] = float(update_mean_abs / weight_mean_abs) if weight_mean_abs > 0 else float("inf")

    def restore(self) -> None:
        """Put back every swapped class and the train cell's phase, whatever else fails on the way."""
        try:
            if self.train_cell is not None:
                self._probe_phase_only = False
                self._switch_phase(False)
            if self.optimizer_probed and self._undo:
                self.set_probing(False)  # a graph compiled with the probes keeps them: leave them switched off
        finally:
            self._put_back()

    def _put_back(self) -> None:
        undo, self._undo = self._undo, []
        failures = []
        for step in reversed(undo):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - every other cell still goes back
                failures.append(exc)
        if failures:
            raise failures[0]
