"""Evaluation probes: eval loss/metrics, the trivial baseline, and train- vs eval-mode outputs.

Do no harm: every forward pass runs the network in a wrapper cell of its own
(in GRAPH_MODE a separate graph, whose Dropout keeps its own random stream:
verified, training after an evaluation is bitwise identical), every cell's
train/eval flag is restored exactly afterwards, and the train-mode forward of
the mode-switch probe restores the BatchNorm moving statistics it updates.
Datasets are read through their own bounded iterator.

Wiring in the Doctor (``Doctor(eval_dataset=..., eval_every=1)``)::

    evaluator = Evaluator(config.eval_dataset, config)                  # on_train_begin
    evaluator.run(backbone, loss_fn, epoch, train_dataset=cb.train_dataset)  # on_train_epoch_end
    findings = evaluator.findings()                                     # on_train_end
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np
from mindspore import Tensor, nn

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding
from mindspore_doctor.probes.modes import BufferSnapshot, ModeSnapshot
from mindspore_doctor.rules.evaluation import EvalRecord, Metric, evaluation_findings

Batch = tuple[np.ndarray, ...]
_MODE_DEPENDENT = ("BatchNorm", "Dropout")


class _Forward(nn.Cell):
    """The network called from a graph of its own (so it never re-compiles or re-seeds the training graph)."""

    def __init__(self, network: nn.Cell) -> None:
        super().__init__(auto_prefix=False)
        self.network = network

    def construct(self, *inputs):
        return self.network(*inputs)


def read_batches(dataset: Any, max_batches: int) -> list[Batch]:
    """Up to ``max_batches`` batches as numpy tuples, through a fresh iterator (training's is untouched)."""
    batches: list[Batch] = []
    for row in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True):
        batches.append(tuple(np.asarray(column) for column in row))
        if len(batches) >= max_batches:
            break
    return batches


def _as_numpy(output: Any) -> np.ndarray:
    if isinstance(output, (tuple, list)):
        output = output[0]
    return np.asarray(output.asnumpy() if hasattr(output, "asnumpy") else output, dtype=np.float64)


def is_classification(outputs: np.ndarray) -> bool:
    return outputs.ndim == 2 and outputs.shape[1] >= 2


def _class_ids(labels: np.ndarray) -> np.ndarray:
    """Sparse ids from integer labels or one-hot rows."""
    return labels.argmax(axis=-1) if labels.ndim == 2 and labels.shape[1] > 1 else labels.reshape(-1).astype(np.int64)


def model_metric(outputs: np.ndarray, labels: np.ndarray) -> Metric:
    """Accuracy for (N, C) outputs, mean squared error otherwise."""
    if is_classification(outputs):
        return Metric("accuracy", float(np.mean(outputs.argmax(axis=1) == _class_ids(labels))), True)
    target = labels.reshape(outputs.shape).astype(np.float64)
    return Metric("mse", float(np.mean((outputs - target) ** 2)), False)


def baseline_metric(outputs: np.ndarray, labels: np.ndarray, reference_labels: np.ndarray | None = None) -> Metric:
    """The trivial predictor fitted on ``reference_labels`` (default: ``labels``), scored on ``labels``.

    Classification: always the majority class; regression: always the label mean.
    """
    reference = labels if reference_labels is None else reference_labels
    if is_classification(outputs):
        ids = _class_ids(reference)
        majority = np.bincount(ids[ids >= 0]).argmax() if ids.size else 0
        return Metric("accuracy", float(np.mean(_class_ids(labels) == majority)), True)
    mean = float(np.mean(reference.astype(np.float64)))
    return Metric("mse", float(np.mean((labels.astype(np.float64) - mean) ** 2)), False)


@dataclass
class Measured:
    """Outputs, labels and mean loss of the network over some batches."""

    outputs: np.ndarray
    labels: np.ndarray
    loss: float | None

    @property
    def metric(self) -> Metric:
        return model_metric(self.outputs, self.labels)


class Probe:
    """Forward passes of one network in eval mode, in graphs of their own, with the mode restored."""

    def __init__(self, network: nn.Cell, loss_fn: Any = None) -> None:
        self.network = network
        self.loss_fn = loss_fn
        self._forward = _Forward(network)

    def measure(self, batches: Sequence[Batch]) -> Measured:
        """Eval-mode outputs and the loss (label = last column) over ``batches``."""
        outputs, labels, losses = [], [], []
        with ModeSnapshot(self.network), BufferSnapshot(self.network):
            self._forward.set_train(False)  # the wrapper's phase keys the compiled graph: set it, not only the net's
            for batch in batches:
                out = _as_numpy(self._forward(*(Tensor(x) for x in batch[:-1])))
                outputs.append(out)
                labels.append(batch[-1])
                if self.loss_fn is not None:
                    losses.append(_as_numpy(self.loss_fn(Tensor(out.astype(np.float32)), Tensor(batch[-1]))).mean())
        loss = float(np.mean(losses)) if losses else None
        return Measured(np.concatenate(outputs), np.concatenate(labels), loss)

    def mode_switch(self, batch: Batch) -> tuple[float, list[str]]:
        """||train-mode outputs - eval-mode outputs|| / the smaller norm of the two on ``batch``, and the mode-dependent cells.

        The train-mode pass updates BatchNorm moving statistics: they are put back bit for bit.
        """
        cells = [path for path, cell in self.network.cells_and_names()
                 if path and any(k in type(cell).__name__ for k in _MODE_DEPENDENT)]
        inputs = [Tensor(x) for x in batch[:-1]]
        with ModeSnapshot(self.network), BufferSnapshot(self.network):
            self._forward.set_train(True)
            trained = _as_numpy(self._forward(*inputs))
            self._forward.set_train(False)
            evaluated = _as_numpy(self._forward(*inputs))
        # relative to the smaller of the two: a mode whose outputs blow up (stale BatchNorm statistics) counts fully
        smaller = min(np.linalg.norm(trained), np.linalg.norm(evaluated))
        change = float(np.linalg.norm(trained - evaluated) / (smaller + 1e-12))
        return change, cells


@dataclass
class Evaluator:
    """The Doctor's periodic evaluation: one ``run`` per evaluated epoch, ``findings()`` at the end."""

    eval_dataset: Any
    config: DoctorConfig = field(default_factory=DoctorConfig)
    records: list[EvalRecord] = field(default_factory=list)
    mode_change: tuple[float, list[str]] | None = None
    _probe: Probe | None = None

    def run(self, network: nn.Cell, loss_fn: Any, epoch: int, train_loss: float | None = None,
            train_dataset: Any = None) -> EvalRecord:
        """Evaluate after ``epoch``; with ``train_dataset``, also measure the train loss/metric in eval mode.

        An empty eval dataset raises ``CheckSkipped`` (the Doctor reports MSD002 and stops evaluating).
        """
        if self._probe is None or self._probe.network is not network:
            self._probe = Probe(network, loss_fn)
        limit = self.config.eval_max_batches
        eval_batches = read_batches(self.eval_dataset, limit)
        if not eval_batches:
            raise CheckSkipped("the eval dataset is empty")
        evaluated = self._probe.measure(eval_batches)
        record = EvalRecord(epoch=epoch, train_loss=train_loss, eval_loss=evaluated.loss,
                            eval_metric=evaluated.metric, eval_samples=len(evaluated.labels))
        reference = None
        if train_dataset is not None:
            trained = self._probe.measure(read_batches(train_dataset, limit))
            record.train_loss, record.train_metric, reference = trained.loss, trained.metric, trained.labels
        record.baseline = baseline_metric(evaluated.outputs, evaluated.labels, reference)
        if record.train_metric is not None:
            record.train_baseline = baseline_metric(evaluated.outputs, reference)
        self.mode_change = self._probe.mode_switch(eval_batches[0])
        self.records.append(record)
        return record

    def to_dict(self) -> dict[str, Any]:
        """The evaluations as plain data, for ``report.meta["evaluation"]`` (JSON report, HTML chart)."""
        change = None
        if self.mode_change is not None:
            change = {"relative_change": self.mode_change[0], "cells": list(self.mode_change[1])}
        return {"records": [asdict(r) for r in self.records], "mode_switch": change}

    def findings(self) -> list[Finding]:
        return evaluation_findings(self.records, self.config, self.mode_change)
