"""Evaluation probes: eval loss/metrics, the trivial baseline, and train- vs eval-mode outputs.

Do no harm: in a GRAPH_MODE run the eval-mode passes of one input shape run in
a graph of the Doctor's own (``_CompiledForward``, compiled at the first
evaluation: eager kernels cost ~2 ms of dispatch each on CPU), every other pass
eagerly (``forward.eager()``: the eager kernels are instances of their own, so a
Dropout's random stream in the training graph is not the one they draw from);
every cell's attributes are restored exactly afterwards, and the train-mode
forward of the mode-switch probe restores the BatchNorm moving statistics it
updates: with BatchNorm, training after evaluations is bitwise identical
(tests/test_evaluation.py). With Dropout it cannot be checked on CPU: MindSpore
2.10's CPU Dropout differs between fresh runs without the Doctor too.
The loss on those outputs runs compiled in a GRAPH_MODE run (``_CompiledLoss``):
an eager loss call keeps host memory for good, a compiled one does not.
Datasets are read through their own bounded iterator.

Wiring in the Doctor (``Doctor(eval_dataset=..., eval_every=1)``)::

    evaluator = Evaluator(config.eval_dataset, config)                  # before training
    evaluator.run(backbone, loss_fn, epoch, train_dataset=train_dataset)  # at an epoch end
    evaluation_findings(evaluator.records, config, evaluator.mode_change, evaluator.metric_skipped)  # judged
"""
from __future__ import annotations

import hashlib
import math
import re
from contextlib import closing, nullcontext
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any, Iterator, Sequence

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn

from mindspore_doctor.cells import loss_family
from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.forward import CellStateSnapshot, eager, gc_frozen, traceless
from mindspore_doctor.signals import EvalRecord, Metric

Batch = tuple[np.ndarray, ...]
_MODE_DEPENDENT = ("BatchNorm", "Dropout")


def _numpy_batches(dataset: Any) -> Iterator[Batch]:
    """The batches of a fresh iterator (training's is untouched) as numpy tuples. Closed (``contextlib.closing``),
    it stops the iterator, so the pipeline's threads do not outlive the read; a failing pipeline raises
    CheckSkipped (MSD002: the user's pipeline failed, not a check of ours)."""
    iterator = None
    try:
        iterator = dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
        for row in iterator:
            yield tuple(np.asarray(column) for column in row)
    except Exception as exc:  # noqa: BLE001 - said as MSD002, with the pipeline's own message
        raise CheckSkipped(f"reading the dataset raised {pipeline_error(exc)}") from None
    finally:
        if iterator is not None:
            iterator.stop()


def read_batches(dataset: Any, max_batches: int) -> list[Batch]:
    """Up to ``max_batches`` batches as numpy tuples, through a fresh iterator."""
    with closing(_numpy_batches(dataset)) as source:
        return list(islice(source, max_batches))


def read_sample(dataset: Any, max_batches: int, max_samples: int, max_bytes: float) -> list[Batch]:
    """The first batches of a fresh iterator, as numpy, within ``max_batches``, ``max_samples`` samples and
    ``max_bytes`` of host memory: whole batches (the graph compiled for the batch shape is reused), except a first
    batch larger than the budget, which is cut. Empty when one sample is larger than ``max_bytes``."""
    batches: list[Batch] = []
    count, size = 0, 0
    with closing(_numpy_batches(dataset)) as source:
        for batch in source:
            rows = _rows(batch)
            per_row = sum(column.nbytes for column in batch) / max(rows, 1)
            room = min(max_samples - count, int((max_bytes - size) // max(per_row, 1)))
            if room <= 0 or (rows > room and batches):
                break
            if rows > room:
                batch = tuple(c[:room] if c.ndim and c.shape[0] == rows else c for c in batch)
                rows = room
            batches.append(batch)
            count += rows
            size += int(rows * per_row)
            if len(batches) >= max_batches or count >= max_samples:
                break
    return batches


def _rows(batch: Batch) -> int:
    """Samples in a batch: the label column's first dimension."""
    label = batch[-1]
    return int(label.shape[0]) if label.ndim else 1


def row_hashes(batches: Sequence[Batch]) -> list[str]:
    """sha1 of each sample's input bytes (every column but the label), 12 hex digits: finds the sample again in
    the user's files whatever the dataset's order."""
    hashes = []
    for batch in batches:
        inputs = [np.ascontiguousarray(column) for column in batch[:-1]]
        for i in range(_rows(batch)):
            digest = hashlib.sha1()
            for column in inputs:
                digest.update(column[i].tobytes() if column.ndim and column.shape[0] == _rows(batch)
                              else column.tobytes())
            hashes.append(digest.hexdigest()[:12])
    return hashes


DIGEST_VALUES = 64
"""Input values per sample that ``batches_digest`` reads (evenly spaced): enough to tell another order or other
samples, cheap on images."""


def batches_digest(batches: Sequence[Batch]) -> str:
    """A fingerprint of what the batches hold, in order: the labels whole and at most ``DIGEST_VALUES`` values of
    each sample's inputs. Tells whether two reads of a dataset yielded the same samples in the same order."""
    digest = hashlib.sha1()
    for batch in batches:
        rows = _rows(batch)
        for index, column in enumerate(batch):
            values = np.asarray(column)
            if index < len(batch) - 1 and values.ndim and values.shape[0] == rows and rows:
                flat = values.reshape(rows, -1)
                values = flat[:, ::max(1, -(-flat.shape[1] // DIGEST_VALUES))]
            digest.update(np.ascontiguousarray(values).tobytes())
    return digest.hexdigest()


def sample_inputs(batches: Sequence[Batch], positions: Sequence[int]) -> np.ndarray | None:
    """The first input column of the samples at ``positions`` (in the order the batches hold them), stacked as
    the pipeline yields one sample; None when the batches have no input column."""
    if not positions or len(batches[0]) < 2:
        return None
    starts = np.cumsum([0] + [_rows(b) for b in batches])
    rows = []
    for position in positions:
        index = int(np.searchsorted(starts, position, side="right")) - 1
        rows.append(np.asarray(batches[index][0][position - starts[index]]))
    return np.stack(rows)


def pipeline_error(exc: Exception) -> str:
    """The error a dataset pipeline raised, as the user wrote it: MindSpore wraps a Python source's exception in a
    RuntimeError whose text holds the original traceback; its last ``SomeError: message`` line is the user's."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt): ", line)]
    return (raised[-1] if raised else f"{type(exc).__name__}: {lines[0] if lines else ''}")[:300]


def as_numpy(output: Any) -> np.ndarray:
    if isinstance(output, (tuple, list)):
        output = output[0]
    return np.asarray(output.asnumpy() if hasattr(output, "asnumpy") else output, dtype=np.float64)


def _is_binary(values: np.ndarray) -> bool:
    return bool(values.size) and bool(np.isin(values, (0.0, 1.0)).all())


def _is_onehot(values: np.ndarray) -> bool:
    """Rows (last axis) of non-negative weights summing to 1: one-hot or label-smoothed class targets."""
    return values.ndim >= 2 and values.shape[-1] > 1 and bool((values >= 0).all()) and bool(
        np.allclose(values.sum(axis=-1), 1.0, atol=1e-4))


@dataclass(frozen=True)
class Task:
    """What the network predicts, inferred from its loss and the shapes of its outputs and labels; each task is
    judged with its own metric against its own trivial predictor."""

    kind: str
    """"binary" (one logit or probability per sample), "multiclass" (class scores along ``class_axis``: per
    sample, per token or per pixel), "multilabel" (one logit/probability per label, multi-hot targets) or
    "regression" (any target shaped like the outputs, an autoencoder's included)."""
    family: str | None = None
    """The loss family (``cells.LOSS_FAMILIES``); None for a loss of the user's own."""
    class_axis: int = -1
    threshold: float = 0.0
    """binary/multilabel: a positive prediction is an output above this (0 for logits, 0.5 for probabilities)."""
    ignore_index: int | None = None
    """multiclass: the label the loss skips; negative labels are never scored either."""

    def _ids(self, outputs_shape: tuple[int, ...], labels: np.ndarray) -> np.ndarray:
        """Class ids shaped like the outputs without their class axis (one-hot rows: their argmax)."""
        axis = self.class_axis % len(outputs_shape)
        target = outputs_shape[:axis] + outputs_shape[axis + 1:]
        if labels.size != int(np.prod(target)):
            return labels.argmax(axis=-1).reshape(target)
        return labels.reshape(target).astype(np.int64)

    def _valid(self, ids: np.ndarray) -> np.ndarray:
        """Positions that are scored: a real class, not the loss's ignore_index (padding)."""
        return (ids >= 0) & (ids != self.ignore_index) if self.ignore_index is not None else ids >= 0

    def metric(self, outputs: np.ndarray, labels: np.ndarray) -> Metric:
        """The model's score: accuracy (binary, multi-class, per label) or mean squared error."""
        if self.kind == "binary":
            truth = labels.reshape(-1) > 0.5
            return Metric("accuracy", float(np.mean((outputs.reshape(-1) > self.threshold) == truth)), True)
        if self.kind == "multiclass":
            ids = self._ids(outputs.shape, labels)
            valid = self._valid(ids)
            hits = outputs.argmax(axis=self.class_axis) == ids
            return Metric("accuracy", float(np.mean(hits[valid])) if valid.any() else float("nan"), True)
        if self.kind == "multilabel":
            truth = labels.reshape(outputs.shape) > 0.5
            return Metric("label accuracy", float(np.mean((outputs > self.threshold) == truth)), True)
        target = labels.reshape(outputs.shape).astype(np.float64)
        with np.errstate(over="ignore"):
            predicted = 1.0 / (1.0 + np.exp(-outputs)) if self.family == "logits" else outputs
        return Metric("mse", float(np.mean((predicted - target) ** 2)), False)

    def per_sample_classes(self, outputs_shape: tuple[int, ...]) -> bool:
        """One class label per sample (binary, or multi-class scores of shape (n, k)): what confident learning
        judges (MSD311)."""
        if self.kind == "binary":
            return int(np.prod(outputs_shape[1:])) == 1
        return self.kind == "multiclass" and len(outputs_shape) == 2

    def class_ids(self, outputs_shape: tuple[int, ...], labels: np.ndarray) -> np.ndarray:
        """The given class of each sample, (n,) ints (binary: 0/1; one-hot rows: their argmax)."""
        if self.kind == "binary":
            return (labels.reshape(-1) > 0.5).astype(np.int64)
        return self._ids(outputs_shape, labels).reshape(-1)

    def probabilities(self, outputs: np.ndarray) -> np.ndarray:
        """(n, k) class probabilities from per-sample outputs: binary -> [1 - p, p] (logits through a sigmoid);
        multi-class rows that are already probabilities as they are, scores (logits, log-probabilities) through
        a softmax."""
        n = outputs.shape[0]
        if self.kind == "binary":
            values = outputs.reshape(n).astype(np.float64)
            if self.threshold == 0.0:  # logits
                with np.errstate(over="ignore"):
                    values = 1.0 / (1.0 + np.exp(-values))
            values = np.clip(values, 0.0, 1.0)
            return np.stack([1.0 - values, values], axis=1)
        scores = outputs.reshape(n, -1).astype(np.float64)
        if (scores >= 0).all() and np.allclose(scores.sum(axis=1), 1.0, atol=1e-3):
            return scores / scores.sum(axis=1, keepdims=True)
        if self.family == "probabilities" and (scores >= 0).all() and (scores <= 1).all():
            return scores / np.maximum(scores.sum(axis=1, keepdims=True), 1e-12)
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    def baseline(self, outputs_shape: tuple[int, ...], labels: np.ndarray,
                 reference: np.ndarray | None = None) -> Metric:
        """The trivial predictor fitted on ``reference`` (default: ``labels``) and scored on ``labels``.

        binary/multi-class: always the majority class; multi-label: each label's majority value; regression:
        the mean target (per output position).
        """
        reference = labels if reference is None else reference
        if self.kind == "binary":
            majority = np.mean(reference.reshape(-1) > 0.5) >= 0.5
            return Metric("accuracy", float(np.mean((labels.reshape(-1) > 0.5) == majority)), True,
                          "predicting the majority class")
        if self.kind == "multiclass":
            shape = (reference.shape[0],) + outputs_shape[1:]
            ref = self._ids(shape, reference)
            ref = ref[self._valid(ref)]
            ids = self._ids((labels.shape[0],) + outputs_shape[1:], labels)
            valid = self._valid(ids)
            majority = np.bincount(ref).argmax() if ref.size else 0
            value = float(np.mean(ids[valid] == majority)) if valid.any() else float("nan")
            where = "the majority class" if len(outputs_shape) == 2 else "the most frequent class at every position"
            return Metric("accuracy", value, True, f"predicting {where}")
        rows = labels.reshape(labels.shape[0], -1).astype(np.float64)
        fitted = reference.reshape(reference.shape[0], -1).astype(np.float64).mean(axis=0)
        if self.kind == "multilabel":
            return Metric("label accuracy", float(np.mean((rows > 0.5) == (fitted >= 0.5))), True,
                          "predicting each label's majority value")
        return Metric("mse", float(np.mean((rows - fitted) ** 2)), False,
                      "predicting the label mean" if rows.shape[1] == 1 else "predicting the mean target per position")


def infer_task(outputs: np.ndarray, labels: np.ndarray, loss_fn: Any = None) -> Task:
    """The task of a network from its (eval-mode) outputs, the labels and the loss; CheckSkipped when none fits."""
    family, ignore = loss_family(loss_fn)
    o, y = outputs.shape, labels.shape
    shapes = f"outputs of shape {o} and labels of shape {y}"
    if not o or not y or o[0] != y[0]:
        raise CheckSkipped(f"{shapes} do not pair one label with each output")
    per_output, per_label = int(np.prod(o[1:])), int(np.prod(y[1:]))
    probabilities = family == "probabilities" or (family is None and outputs.min() >= 0 and outputs.max() <= 1)
    threshold = 0.5 if probabilities else 0.0
    if per_output == per_label:
        if family == "regression":
            return Task("regression", family)
        if per_output == 1 and (family in ("logits", "probabilities") or (family is None and _is_binary(labels))):
            return Task("binary", family, threshold=threshold)
        if per_output > 1 and family != "logits" and _is_onehot(labels.reshape(o)):
            return Task("multiclass", family, ignore_index=ignore)
        if per_output > 1 and _is_binary(labels) and family in ("logits", "probabilities", None):
            return Task("multilabel", family, threshold=threshold)
        if family != "classes":  # e.g. a BCE autoencoder of grey images: its sigmoid outputs regress the pixels
            return Task("regression", family)
    elif family != "regression" and np.array_equal(labels, np.round(labels)):  # integer class ids
        squeezed = y[:-1] if len(y) > 1 and y[-1] == 1 else y
        for axis in (len(o) - 1, 1):
            if len(o) >= 2 and o[:axis] + o[axis + 1:] in (y, squeezed):
                return Task("multiclass", family, class_axis=axis, ignore_index=ignore)
    raise CheckSkipped(f"{shapes} fit no task the evaluation knows (one logit or probability per sample, class "
                       f"scores per sample/token/pixel, multi-hot labels, or targets shaped like the outputs)"
                       + (f" under a {family} loss" if family else ""))


NOISE_GROUPS = 32
"""A mean loss's standard error is estimated from the mean losses of about this many groups of samples
(``_group_size``; or of the batches, when there are more): 31 degrees of freedom put the estimate within ~13 %, for
about this many extra loss calls per measurement (on outputs already computed: no extra forward pass)."""


def _group_size(samples: int, longest: int) -> int:
    """The one size of a measurement's loss-noise groups: the longest batch cut into equal groups, as many as
    ``NOISE_GROUPS`` groups of all ``samples`` would give it, or the nearer whole number of them.

    One size: the loss compiles once per input shape (~90 ms on CPU), and groups cut evenly from each batch came in
    two sizes a measurement (11, 11 and 10 of a batch of 32), four shapes an evaluation. What is left of a batch
    (fewer samples than a group) counts in the loss, not in the spread, whose estimate over the samples it reads is
    scaled to all of them."""
    per_batch = longest / -(-samples // NOISE_GROUPS)  # groups of the longest batch at n / NOISE_GROUPS samples
    sizes = {longest // max(1, math.floor(per_batch)), longest // max(1, math.ceil(per_batch))}
    return min(sizes, key=lambda size: (abs(longest // size - per_batch), longest % size))


def standard_error(means: np.ndarray, weights: np.ndarray) -> float | None:
    """Standard error of the weighted mean of group means (the between-group spread; std / sqrt(n) for groups
    of one sample); None for fewer than two groups or a non-finite group."""
    if means.size < 2 or not np.isfinite(means).all():
        return None
    w = weights / weights.sum()
    spread = np.sum(w ** 2 * (means - np.sum(w * means)) ** 2)
    return float(np.sqrt(means.size / (means.size - 1) * spread))


@dataclass
class Measured:
    """Outputs, labels and mean loss of the network over some batches."""

    outputs: np.ndarray
    labels: np.ndarray
    loss: float | None
    loss_se: float | None = None
    """Standard error of ``loss`` over the samples (``measure(noise=True)``); None when not estimated."""


class _CompiledLoss(nn.Cell):
    """The user's loss as the root of a graph of its own: compiled once per input shape, then run with no host
    memory kept per call. An eager call keeps some for good (MindSpore 2.10 CPU: a cross-entropy ~14 KB a call, and
    an evaluation makes tens of calls: 0.8 MB per evaluation of a wine MLP; docs/doctor.md). The loss cell's own attributes
    are put back after each measurement (``Probe.measure``); no prefix is added to its parameters' names."""

    def __init__(self, loss_fn: Any) -> None:
        super().__init__(auto_prefix=False)
        self.loss_fn = loss_fn

    def construct(self, outputs, labels):
        return self.loss_fn(outputs, labels)


class _CompiledForward(nn.Cell):
    """The network as the root of an eval-mode graph of the Doctor's own, compiled at the first evaluation for one
    input shape: MindSpore 2.10's eager kernels cost ~2 ms of dispatch each on CPU (an ECAPA-TDNN forward of 32
    samples: 207 ms eager, 6.6 ms compiled). No prefix is added to its parameters' names."""

    def __init__(self, network: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.network = network

    def construct(self, *inputs):
        return self.network(*inputs)


def _fewer_samples(shapes: tuple, compiled: tuple | None) -> bool:
    """Inputs that are the compiled inputs but for fewer samples along axis 0, the same in all of them."""
    if compiled is None or len(shapes) != len(compiled) or not shapes:
        return False
    rows = {shape[0] if shape else None for shape, _ in shapes}
    return (len(rows) == 1 and None not in rows and all(
        dtype == c_dtype and shape[1:] == c_shape[1:] and shape[0] < c_shape[0]
        for (shape, dtype), (c_shape, c_dtype) in zip(shapes, compiled)))


def _same_outputs(got: np.ndarray, expected: np.ndarray) -> bool:
    """Equal but for float rounding (the compiled and eager kernels differ in it)."""
    if got.shape != expected.shape or not np.all(np.isfinite(expected)):
        return False
    return bool(np.max(np.abs(got - expected), initial=0.0) <= 1e-4 * (np.max(np.abs(expected), initial=0.0) + 1e-6))


class Probe:
    """Forward passes of one network, ``forward.traceless``: every cell's state and the BatchNorm statistics
    restored. ``compiled`` (a probe measured again and again: every evaluation of a run), in a GRAPH_MODE run: the
    eval-mode passes of the first batch's shapes run in a graph of their own (``_CompiledForward``), and so do
    partial batches of them, padded; others eagerly, and the loss on their outputs is compiled too
    (``_CompiledLoss``); otherwise everything runs eagerly, as in PyNative."""

    def __init__(self, network: nn.Cell, loss_fn: Any = None, compiled: bool = False) -> None:
        self.network = network
        self.loss_fn = loss_fn
        self._compile = compiled and ms.get_context("mode") == ms.GRAPH_MODE
        self._loss_call: Any = None
        """What ``_loss`` calls: ``loss_fn``, or its ``_CompiledLoss``; made at the first call, in that call's mode."""
        self._forward: _CompiledForward | None = _CompiledForward(network) if self._compile else None
        self._forward_shapes: tuple | None = None
        """The input shapes and dtypes ``_forward`` compiled for (None: not compiled yet)."""
        self._padded: dict[tuple, bool] = {}
        """Shapes with fewer samples than ``_forward_shapes`` -> whether their pass, padded to those shapes, gives
        the eager outputs (checked at the first one)."""
        self._loss_signatures: set[tuple] = set()
        """The (outputs shape, labels shape, labels dtype) ``_CompiledLoss`` has compiled for."""

    def release(self) -> None:
        """Drop the compiled forward pass and loss (their graphs with them): the run is over."""
        self._loss_call = self._forward = None

    def _eval_outputs(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        """One eval-mode pass (inside ``traceless``, the network set to eval mode): compiled for the shapes of the
        first batch (a second graph per shape would be kept for the run), a partial batch padded to them
        (``_padded_outputs``); eagerly otherwise (variable lengths) or when the network does not compile on its own."""
        shapes = tuple((x.shape, x.dtype.str) for x in inputs)
        if self._forward is not None and self._forward_shapes in (None, shapes):
            try:
                with gc_frozen() if self._forward_shapes is None else nullcontext():  # the first call compiles
                    outputs = as_numpy(self._forward(*(Tensor(x) for x in inputs)))
            except Exception:  # noqa: BLE001 - eager next; its error, if it fails too, is the one that leaves
                self._forward = None
            else:
                self._forward_shapes = shapes
                return outputs
        checked = self._padded.get(shapes)
        if self._forward is not None and (checked or checked is None and _fewer_samples(shapes, self._forward_shapes)):
            return self._padded_outputs(inputs, shapes, checked)
        return self._eager_outputs(inputs)

    def _eval_mode(self) -> None:
        """The network, and the compiled pass around it, in eval mode (inside ``traceless``): once per ``measure``,
        not per batch, as ``set_train`` walks every cell (RegNet: 1.3 ms a call, 40 batches an evaluation)."""
        (self._forward or self.network).set_train(False)

    def _eager_outputs(self, inputs: Sequence[np.ndarray]) -> np.ndarray:
        with eager():
            return as_numpy(self.network(*(Tensor(x) for x in inputs)))

    def _padded_outputs(self, inputs: Sequence[np.ndarray], shapes: tuple, checked: bool | None) -> np.ndarray:
        """A batch with fewer samples (a partial last batch) through the compiled pass: its samples repeated to the
        compiled batch size, the outputs of the real ones kept. Checked against the eager pass the first time, per
        shape (``checked`` None): a network that mixes samples (batch statistics in eval mode, axis 0 not the
        samples) stays eager."""
        rows, size = len(inputs[0]), self._forward_shapes[0][0][0]
        repeated = np.arange(size) % rows
        try:
            outputs = as_numpy(self._forward(*(Tensor(np.ascontiguousarray(x[repeated])) for x in inputs)))
        except Exception:  # noqa: BLE001 - this shape runs eagerly
            outputs = None
        outputs = outputs[:rows] if outputs is not None and outputs.ndim and len(outputs) == size else None
        if checked and outputs is not None:
            return outputs
        expected = self._eager_outputs(inputs)
        self._padded[shapes] = checked is None and outputs is not None and _same_outputs(outputs, expected)
        return expected

    def measure(self, batches: Sequence[Batch], noise: bool = False) -> Measured:
        """Eval-mode outputs and the loss (label = last column) over ``batches``; with ``noise``, also the
        loss's standard error (``loss_se``)."""
        outputs, labels = [], []
        with traceless(self.network, run_eagerly=False):
            self._eval_mode()
            for batch in batches:
                outputs.append(self._eval_outputs(batch[:-1]))
                labels.append(batch[-1])
        measured = Measured(np.concatenate(outputs), np.concatenate(labels), None)
        if self.loss_fn is not None:
            with CellStateSnapshot(self.loss_fn) if isinstance(self.loss_fn, nn.Cell) else nullcontext():
                losses = [self._loss(out, label) for out, label in zip(outputs, labels)]
                measured.loss = float(np.mean(losses))
                measured.loss_se = self._loss_noise(outputs, labels, losses) if noise else None
        return measured

    def _loss(self, outputs: np.ndarray, labels: np.ndarray) -> float:
        if self._loss_call is None:  # a PyNative run's loss stays eager: a first compile would start graph mode's runtime
            self._loss_call = (_CompiledLoss(self.loss_fn) if self._compile and isinstance(self.loss_fn, nn.Cell)
                               else self.loss_fn)
        inputs = (Tensor(outputs.astype(np.float32)), Tensor(labels))
        if self._loss_call is self.loss_fn:
            return self._eager_loss(inputs)
        signature = (outputs.shape, labels.shape, labels.dtype.str)
        try:
            with nullcontext() if signature in self._loss_signatures else gc_frozen():  # a new signature compiles
                loss = float(as_numpy(self._loss_call(*inputs)).mean())
        except Exception:  # noqa: BLE001 - eager next; its error, if it fails too, is the one that leaves
            loss = self._eager_loss(inputs)
            self._loss_call = self.loss_fn  # the loss runs eagerly but does not compile on its own: eager from now on
            return loss
        self._loss_signatures.add(signature)
        return loss

    def _eager_loss(self, inputs: tuple[Tensor, Tensor]) -> float:
        with eager():
            return float(as_numpy(self.loss_fn(*inputs)).mean())

    def _loss_noise(self, outputs: Sequence[np.ndarray], labels: Sequence[np.ndarray],
                    batch_losses: Sequence[float]) -> float | None:
        """Standard error of the mean loss: from the losses of about ``NOISE_GROUPS`` groups of samples, all of one
        size (``_group_size``; a batch no larger than a group is one group), scaled to all the samples.

        None when it cannot be told: outputs without a leading sample axis (a (T, N, C) CTC layout) or a loss
        that fails on part of a batch (a loss of the user's own may need a whole batch).
        """
        samples = sum(len(label) for label in labels)
        size = _group_size(samples, max(len(label) for label in labels))
        means, weights = [], []
        for out, label, whole in zip(outputs, labels, batch_losses):
            if len(label) <= size:
                means.append(whole)
                weights.append(len(label))
                continue
            if out.shape[0] != len(label):
                return None
            for start in range(0, len(label) - size + 1, size):
                try:
                    means.append(self._loss(out[start:start + size], label[start:start + size]))
                except Exception:  # noqa: BLE001 - the noise is then unknown; the evaluation goes on
                    return None
                weights.append(size)
        spread = standard_error(np.asarray(means), np.asarray(weights, dtype=np.float64))
        return None if spread is None else spread * float(np.sqrt(sum(weights) / samples))

    def mode_switch(self, batch: Batch) -> tuple[float, list[str]]:
        """||train-mode outputs - eval-mode outputs|| / the smaller norm of the two on ``batch``, and the mode-dependent cells.

        The train-mode pass updates BatchNorm moving statistics: they are put back bit for bit.
        """
        cells = [path for path, cell in self.network.cells_and_names()
                 if path and any(k in type(cell).__name__ for k in _MODE_DEPENDENT)]
        with traceless(self.network, run_eagerly=False):
            self.network.set_train(True)
            with eager():  # a train-mode graph would be kept for the run for this one pass per evaluation
                trained = as_numpy(self.network(*(Tensor(x) for x in batch[:-1])))
            self._eval_mode()
            evaluated = self._eval_outputs(batch[:-1])
        # relative to the smaller of the two: a mode whose outputs blow up (stale BatchNorm statistics) counts fully
        smaller = min(np.linalg.norm(trained), np.linalg.norm(evaluated))
        change = float(np.linalg.norm(trained - evaluated) / (smaller + 1e-12))
        return change, cells


OTHER_SETS = {"target_eval": "target_eval_dataset", "holdout": "holdout_dataset"}
"""The evaluations besides ``eval_dataset``: EvalRecord field prefix -> run option holding the dataset."""


def _ignored(task: Task, class_ids: np.ndarray) -> bool:
    """Whether some labels are ones the loss ignores (negative, or the task's ``ignore_index``): no class to judge."""
    return bool((class_ids < 0).any() or (task.ignore_index is not None and (class_ids == task.ignore_index).any()))


@dataclass
class Evaluator:
    """The Doctor's periodic evaluation: one ``run`` per evaluated epoch; ``rules.evaluation`` judges them.

    With a ``train_dataset`` and ``config.label_sample_size`` > 0, the first run keeps a fixed sample of the
    training set (``train_sample``: the first batches of a fresh iterator, bounded by ``eval_max_batches``,
    ``label_sample_size`` and ``label_sample_max_mb``) and every run measures the train loss/metric on it; from
    the same forward pass, ``score_labels`` feeds each sample's class probabilities to ``trajectory``
    (``analysis.labels.Trajectory``, MSD311). ``last_eval``/``last_train`` hold the last run's outputs and labels
    for the end-of-run analyses (bounded by ``eval_max_batches`` like the runs themselves).
    """

    eval_dataset: Any
    config: DoctorConfig = field(default_factory=DoctorConfig)
    records: list[EvalRecord] = field(default_factory=list)
    mode_change: tuple[float, list[str]] | None = None
    """MSD405's train- vs eval-mode change: measured at the first run, and again by ``final_mode_switch`` when the
    run finishes (its train-mode pass is eager: 0.3-0.4 s on ECAPA-TDNN or ShuffleNetV2, and MSD405 is judged
    once, at the end)."""
    metric_skipped: str = ""
    """Why MSD402/MSD404 cannot be judged (no task fits the outputs and labels); "" when they can."""
    task: Task | None = None
    """The task the last run inferred from the eval set (None: none fits, or no run yet)."""
    last_eval: Measured | None = None
    last_train: Measured | None = None
    train_sample: list[Batch] | None = None
    """The fixed training sample (None: not kept, ``label_sample_size=0`` or no train dataset)."""
    train_sha1: list[str] | None = None
    """sha1 of each kept training sample's inputs (``row_hashes``)."""
    trajectory: Any = None
    """``analysis.labels.Trajectory`` of the training sample's per-sample probabilities, one row per run."""
    labels_skipped: str = ""
    """Why the training sample's labels are not scored (the task has no single class per sample...)."""
    eval_trajectory: Any = None
    """``analysis.labels.Trajectory`` of the eval set's per-sample probabilities (MSD311's "eval" source: their
    mean over the evaluations); restarted when the eval set yields other samples or another order (shuffled)."""
    _eval_digest: str = ""
    """``batches_digest`` of the last run's eval batches."""
    _eval_sha1: list[str] | None = None
    """``row_hashes`` of those batches (hashed again only when the digest changes)."""
    _trajectory_digest: str = ""
    """``batches_digest`` of the eval batches ``eval_trajectory`` averages over."""
    _trajectory_sha1: list[str] | None = None
    _probe: Probe | None = None
    _switch_batch: Batch | None = None
    """The last run's first eval batch: ``final_mode_switch``'s input."""

    def release(self) -> None:
        """The run is over: drop what only later evaluations would reuse (the compiled forward pass and loss)."""
        if self._probe is not None:
            self._probe.release()

    def run(self, network: nn.Cell, loss_fn: Any, epoch: int, train_loss: float | None = None,
            train_dataset: Any = None) -> EvalRecord:
        """Evaluate after ``epoch``; with ``train_dataset``, also measure the train loss/metric in eval mode.

        The metric and its trivial baseline follow the task (``infer_task``); when no task fits, only the
        losses are recorded (MSD401/MSD405 still judge them) and ``findings()`` says why with MSD002.
        An empty eval dataset raises ``CheckSkipped`` (the Doctor reports MSD002 and stops evaluating).
        """
        if self._probe is None or self._probe.network is not network:
            self._probe = Probe(network, loss_fn, compiled=True)
        limit = self.config.eval_max_batches
        eval_batches = read_batches(self.eval_dataset, limit)
        if not eval_batches:
            raise CheckSkipped("the eval dataset is empty")
        evaluated = self._probe.measure(eval_batches, noise=True)
        digest = batches_digest(eval_batches)
        if digest != self._eval_digest:  # other samples, or another order, than the last run's
            self._eval_sha1 = row_hashes(eval_batches)
        self._eval_digest = digest
        trained = None
        if train_dataset is not None:
            train_batches = self._train_batches(train_dataset, limit)
            trained = self._probe.measure(train_batches, noise=True) if train_batches else None
        self.last_eval, self.last_train, self.task = evaluated, trained, None
        record = EvalRecord(epoch=epoch, train_loss=trained.loss if trained else train_loss,
                            eval_loss=evaluated.loss, eval_samples=len(evaluated.labels),
                            train_samples=len(trained.labels) if trained else None,
                            train_loss_se=trained.loss_se if trained else None, eval_loss_se=evaluated.loss_se)
        try:
            task = infer_task(evaluated.outputs, evaluated.labels, loss_fn)
        except CheckSkipped as why:
            self.metric_skipped = str(why)
        else:
            self.task = task
            shape = evaluated.outputs.shape
            record.task = task.kind
            record.eval_metric = task.metric(evaluated.outputs, evaluated.labels)
            record.baseline = task.baseline(shape, evaluated.labels, trained.labels if trained else None)
            if trained is not None:
                record.train_metric = task.metric(trained.outputs, trained.labels)
                record.train_baseline = task.baseline(shape, trained.labels)
        self._switch_batch = eval_batches[0]
        if not self.records:
            self.mode_change = self._probe.mode_switch(eval_batches[0])
        self.records.append(record)
        return record

    def final_mode_switch(self) -> None:
        """``mode_change`` measured again on the trained network (the run finished), on the last run's first batch."""
        if self._probe is not None and self._switch_batch is not None:
            self.mode_change = self._probe.mode_switch(self._switch_batch)

    def _train_batches(self, train_dataset: Any, limit: int) -> list[Batch]:
        """The fixed training sample (read at the first run), or fresh batches with ``label_sample_size=0`` or when
        one sample is over ``label_sample_max_mb`` (the train metric is measured either way)."""
        config = self.config
        if config.label_sample_size <= 0:
            return read_batches(train_dataset, limit)
        if self.train_sample is None:
            self.train_sample = read_sample(train_dataset, limit, config.label_sample_size,
                                            config.label_sample_max_mb * 2 ** 20)
            self.train_sha1 = row_hashes(self.train_sample)
            if not self.train_sample:
                self.labels_skipped = (f"one training sample is larger than label_sample_max_mb="
                                       f"{config.label_sample_max_mb:g}")
        return self.train_sample or read_batches(train_dataset, limit)

    def run_other(self, record: EvalRecord, name: str) -> None:
        """Score ``record``'s network on another set (``OTHER_SETS``: "target_eval", "holdout") as on the eval
        set: ``<name>_loss`` and its standard error ``<name>_loss_se``, ``<name>_metric`` (with the eval set's task),
        ``<name>_samples``."""
        dataset = getattr(self.config, OTHER_SETS[name])
        batches = read_batches(dataset, self.config.eval_max_batches)
        if not batches:
            raise CheckSkipped(f"{OTHER_SETS[name]} is empty")
        measured = self._probe.measure(batches, noise=True)
        setattr(record, f"{name}_loss", measured.loss)
        setattr(record, f"{name}_loss_se", measured.loss_se)
        setattr(record, f"{name}_samples", len(measured.labels))
        if self.task is not None:
            setattr(record, f"{name}_metric", self.task.metric(measured.outputs, measured.labels))

    def score_labels(self) -> None:
        """Add the last run's class probabilities of the eval set to ``eval_trajectory`` and those of the training
        sample to ``trajectory`` (computed from that run's forward passes: no pass of its own), each within
        ``label_sample_max_mb`` (``Trajectory.footprint``): beyond it the eval set is judged on its last evaluation
        and the training sample is not scored. A task without one class per sample (regression, per-token,
        multi-label) leaves ``labels_skipped`` saying so."""
        from mindspore_doctor.analysis.labels import Trajectory

        task, evaluated, trained = self.task, self.last_eval, self.last_train
        bound = self.config.label_sample_max_mb * 2 ** 20
        if task is not None and evaluated is not None and task.per_sample_classes(evaluated.outputs.shape):
            given = task.class_ids(evaluated.outputs.shape, evaluated.labels)
            probs = task.probabilities(evaluated.outputs)
            if _ignored(task, given) or Trajectory.footprint(*probs.shape) > bound:
                self.eval_trajectory = None  # judged on the last evaluation (``_eval_request``), or not at all
            else:
                if self.eval_trajectory is None or self._trajectory_digest != self._eval_digest:
                    self.eval_trajectory = Trajectory(given)
                    self._trajectory_digest, self._trajectory_sha1 = self._eval_digest, self._eval_sha1
                self.eval_trajectory.add(probs)
        if trained is None or not self.train_sample:
            return
        if task is None or not task.per_sample_classes(trained.outputs.shape):
            self.labels_skipped = (f"the {task.kind} task has no single class label per sample" if task else
                                   "no classification task fits the outputs and labels")
            return
        given = task.class_ids(trained.outputs.shape, trained.labels)
        probs = task.probabilities(trained.outputs)
        if self.trajectory is None:
            if _ignored(task, given):
                self.labels_skipped = "the training sample holds labels the loss ignores"
                return
            if Trajectory.footprint(*probs.shape) > bound:
                self.labels_skipped = (f"the training sample's probabilities over the evaluations would exceed "
                                       f"label_sample_max_mb={self.config.label_sample_max_mb:g} "
                                       f"({probs.shape[1]} classes)")
                return
            self.trajectory = Trajectory(given)
        self.trajectory.add(probs)

    def _eval_request(self) -> tuple[dict[str, Any], str] | None:
        """What cleanlab gets for the eval set, and the ``batches_digest`` of the batches it describes: the mean of
        the probabilities over the evaluations, or the last evaluation's when that mean would exceed
        ``label_sample_max_mb``; None when the eval set cannot be judged (no class per sample, ignored labels)."""
        held_out, evaluated, task = self.eval_trajectory, self.last_eval, self.task
        note = "the eval set is not trained on: out of sample"
        if held_out is not None:
            n = held_out.evaluations
            return dict(labels=held_out.labels, pred_probs=held_out.mean_probs(), sha1=self._trajectory_sha1,
                        method=f"the model's eval-mode probabilities averaged over {n} evaluation"
                               f"{'s' if n != 1 else ''} ({note})"), self._trajectory_digest
        if evaluated is None or task is None or not task.per_sample_classes(evaluated.outputs.shape):
            return None
        given = task.class_ids(evaluated.outputs.shape, evaluated.labels)
        if _ignored(task, given):
            return None
        return dict(labels=given, pred_probs=task.probabilities(evaluated.outputs), sha1=self._eval_sha1,
                    method=f"the model's eval-mode probabilities after the last evaluation ({note}; their mean over "
                           "the evaluations would exceed label_sample_max_mb)"), self._eval_digest

    def label_reports(self) -> tuple[list[Any], dict[str, tuple[np.ndarray, np.ndarray]], dict[str, str]]:
        """Confident learning on the eval set's probabilities (out of sample: "eval") and on the training sample's
        trajectory ("train-sample"); the inputs of each source's top ``analysis_top`` suspects
        (``export.labels.write_label_files``'s ``suspect_inputs``); and why a source could not be judged (its
        probabilities or labels are invalid, e.g. not finite), by source."""
        from mindspore_doctor.analysis.labels import label_reports_apart

        requests, eval_digest = [], ""
        eval_request = self._eval_request()
        if eval_request is not None:
            request, eval_digest = eval_request
            requests.append(dict(request, source="eval",
                                 positions_note="index in the order the eval dataset yields its samples"))
        trajectory = self.trajectory
        if trajectory is not None and trajectory.evaluations:
            evaluations = trajectory.evaluations
            requests.append(dict(labels=trajectory.labels, pred_probs=trajectory.pred_probs(), source="train-sample",
                                 method=f"eval-mode probabilities of a fixed training sample over {evaluations} "
                                        f"evaluation{'s' if evaluations != 1 else ''} (trajectory)",
                                 positions_note="index in the order the training dataset first yielded its samples",
                                 sha1=self.train_sha1))
        reports, skipped = [], {}
        trajectories = {"eval": self.eval_trajectory, "train-sample": trajectory}
        for request, result in zip(requests, label_reports_apart(requests) if requests else []):
            if isinstance(result, str):
                skipped[request["source"]] = result
            else:
                if trajectories[result.source] is not None:
                    trajectories[result.source].annotate(result.flagged)
                reports.append(result)
        inputs = {}
        for report in reports:
            positions = [s.position for s in report.flagged[:self.config.analysis_top]]
            if not positions:
                continue
            batches = self._eval_again(eval_digest) if report.source == "eval" else self.train_sample
            found = sample_inputs(batches, positions) if batches else None
            if found is not None:
                inputs[report.source] = (found, np.asarray(positions, dtype=np.int64))
        return reports, inputs, skipped

    def _eval_again(self, digest: str) -> list[Batch] | None:
        """The eval set read again (no forward pass) for its suspects' inputs; None unless it yields the batches of
        ``digest``, the samples judged, in the same order (a shuffling or randomly augmented eval set does not)."""
        batches = read_batches(self.eval_dataset, self.config.eval_max_batches)
        return batches if batches and batches_digest(batches) == digest else None

    def to_dict(self) -> dict[str, Any]:
        """The evaluations as plain data, for ``report.meta["evaluation"]`` (JSON report, HTML chart)."""
        change = None
        if self.mode_change is not None:
            change = {"relative_change": self.mode_change[0], "cells": list(self.mode_change[1])}
        return {"records": [asdict(r) for r in self.records], "mode_switch": change}
