"""``find_label_errors()`` and ``msdoctor labels``: exact out-of-sample label scores by K-fold training.

The whole training set is read once into memory (bounded by ``max_samples``), split into K stratified folds, and
each fold is scored by a fresh ``build(params)`` trained with ``Model.train`` on the other folds: every sample gets
class probabilities from a network that never saw it, the input confident learning (cleanlab) needs. Costs K
trainings; the in-training scores of the Doctor (``label_sample_size``) are the cheap alternative.

    report = find_label_errors(build, make_data, folds=5, epochs=10)
    report.noise_rate, report.per_class, report.swapped, report.flagged[:20]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from mindspore_doctor.analysis.labels import LabelReport
    from mindspore_doctor.findings import Finding

DEFAULT_FOLDS = 5
DEFAULT_EPOCHS = 10
DEFAULT_BATCH_SIZE = 32
"""The training batch size when neither the caller nor the pipeline (its ``batch``) gives one."""
MAX_SAMPLES = 100_000
"""At most this many samples are read into memory (``max_samples=``, ``--max-samples``): a larger set is refused
with one line, never truncated silently (a subset would leave the rest of the set unscored)."""
PREDICT_BATCH = 256
POSITIONS_NOTE = ("index in the order the dataset yields its samples (the source index when the pipeline does not "
                  "shuffle)")
NUMPY_POSITIONS_NOTE = "row index in the arrays given"


class LabelsError(ValueError):
    """Bad input to ``find_label_errors`` (data, build, folds) or a fold whose training failed: one line."""


@dataclass
class LabelData:
    """The training set in memory: input columns and the label column as read (what training is given), the label
    as one class id per sample (what is judged)."""

    inputs: tuple[np.ndarray, ...]
    labels: np.ndarray
    classes: np.ndarray
    columns: tuple[str, ...]
    batch_size: int | None
    positions_note: str


@dataclass
class LabelRun:
    """One K-fold run: the report, and what it was computed from."""

    report: "LabelReport"
    pred_probs: np.ndarray
    classes: np.ndarray
    folds: int
    epochs: int
    batch_size: int
    fold_accuracy: list[float]
    findings: list["Finding"] = field(default_factory=list)
    inputs: tuple[np.ndarray, ...] = ()
    seconds: float = 0.0

    @property
    def accuracy(self) -> float:
        """Out-of-sample accuracy against the given labels, over the whole set."""
        return float(np.mean(self.pred_probs.argmax(axis=1) == self.classes))


# --- the data --------------------------------------------------------------------------------------------------------


def _is_dataset(value: Any) -> bool:
    return hasattr(value, "create_tuple_iterator")


def _resolve(data: Any) -> Any:
    """A pipeline, or an (inputs, labels) pair of arrays; a zero-argument factory is called; the ``(train, eval)``
    datasets ``msdoctor tune`` takes give their training set."""
    from mindspore_doctor.tuner.failures import TrialFailed, failing_as

    if callable(data) and not _is_dataset(data):
        try:
            with failing_as("data()"):
                data = data()
        except TrialFailed as exc:
            raise LabelsError(str(exc)) from None
    if _is_dataset(data):
        return data
    if isinstance(data, (tuple, list)) and data and _is_dataset(data[0]):
        return data[0]
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data
    raise LabelsError(f"data must be a mindspore.dataset pipeline, a zero-argument factory returning one, or an "
                      f"(inputs, labels) pair of arrays; got {type(data).__name__}")


def _from_arrays(pair: Any, max_samples: int) -> tuple[tuple[np.ndarray, ...], np.ndarray, tuple[str, ...]]:
    inputs, labels = pair
    inputs = tuple(np.asarray(x) for x in inputs) if isinstance(inputs, (tuple, list)) else (np.asarray(inputs),)
    labels = np.asarray(labels)
    if labels.ndim == 0 or any(x.ndim == 0 for x in inputs):
        raise LabelsError("the (inputs, labels) arrays must have one row per sample")
    n = len(labels)
    if any(len(x) != n for x in inputs):
        raise LabelsError(f"inputs of {[len(x) for x in inputs]} rows and labels of {n} rows do not pair up")
    if n > max_samples:
        raise LabelsError(f"the data holds {n} samples, more than max_samples={max_samples}: K-fold training "
                          f"reads the whole set into memory; raise max_samples (--max-samples) or pass a subset")
    # numpy's defaults (float64, int64: scikit-learn's arrays) are not MindSpore's; a network's weights are float32
    inputs = tuple(x.astype(np.float32) if x.dtype == np.float64 else x for x in inputs)
    labels = labels.astype(np.float32 if labels.dtype == np.float64 else np.int32) \
        if labels.dtype in (np.float64, np.int64) else labels
    names = tuple(f"input_{i}" for i in range(len(inputs))) if len(inputs) > 1 else ("inputs",)
    return inputs, labels, (*names, "label")


def _from_pipeline(dataset: Any, network: Any, config: Any, max_samples: int
                   ) -> tuple[tuple[np.ndarray, ...], np.ndarray, tuple[str, ...], int | None]:
    """Every row of the pipeline, batches split into samples, in the order it yields them."""
    from mindspore_doctor.data.roles import RolesUnknown, assign_roles
    from mindspore_doctor.data.sampling import is_batched, rows_are_batches
    from mindspore_doctor.probes.evaluation import pipeline_error

    try:
        columns = list(dataset.get_col_names())
        batched = is_batched(dataset)
        batch_size = int(dataset.get_batch_size()) if batched else None
    except Exception as exc:  # noqa: BLE001 - the user's pipeline
        raise LabelsError(f"cannot read the dataset's columns: {pipeline_error(exc)}") from None
    try:
        roles = assign_roles(columns, network, config)
    except RolesUnknown as exc:
        raise LabelsError(str(exc)) from None
    if roles.label is None:
        raise LabelsError(f"the dataset's columns {columns} have no label column: name it with label_column= "
                          f"(--label-column)")
    names = (*roles.inputs, roles.label)
    parts: dict[str, list[np.ndarray]] = {c: [] for c in names}
    count = 0
    try:
        for row in dataset.create_dict_iterator(num_epochs=1, output_numpy=True):
            row = {c: np.asarray(row[c]) for c in names}
            if count == 0 and not batched and rows_are_batches(row, roles):
                batched = True
            rows = len(row[roles.label]) if batched else 1
            count += rows
            if count > max_samples:
                raise LabelsError(f"the dataset holds more than max_samples={max_samples} samples: K-fold "
                                  f"training reads the whole set into memory; raise max_samples (--max-samples) "
                                  f"or pass a subset (dataset.take(N))")
            for c in names:
                parts[c].append(row[c] if batched else row[c][None])
    except LabelsError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's pipeline failed: say how, in its words
        raise LabelsError(f"reading the dataset raised {pipeline_error(exc)}") from None
    if count == 0:
        raise LabelsError("the dataset yields no sample: is it empty, or filtered to nothing?")
    try:
        arrays = {c: np.concatenate(parts[c]) for c in names}
    except ValueError as exc:
        raise LabelsError(f"the dataset's samples differ in shape ({exc}); pad or resize them to one shape") from None
    return tuple(arrays[c] for c in roles.inputs), arrays[roles.label], names, batch_size


def class_ids(labels: np.ndarray) -> np.ndarray:
    """One class id per sample: integer ids ((n,) or (n, 1)), or the argmax of one-hot rows; ``LabelsError`` for
    labels that are not (regression targets, multi-hot rows, per-token or per-pixel labels)."""
    shape = labels.shape
    values = labels.reshape(len(labels)) if labels.ndim == 2 and shape[1] == 1 else labels
    if values.ndim == 2 and values.shape[1] > 1 and np.issubdtype(values.dtype, np.number):
        rows = values.astype(np.float64)
        if (rows >= 0).all() and np.allclose(rows.sum(axis=1), 1.0, atol=1e-4):
            return rows.argmax(axis=1).astype(np.int64)
    if values.ndim != 1:
        raise LabelsError(f"labels of shape {shape} are not one class id per sample (multi-label, per-token or "
                          f"per-pixel labels?): label errors are found for single-label classification")
    if not np.issubdtype(values.dtype, np.number) or np.issubdtype(values.dtype, np.complexfloating):
        raise LabelsError(f"labels of dtype {values.dtype} are not class ids")
    as_float = values.astype(np.float64)
    if not np.isfinite(as_float).all() or not np.array_equal(as_float, np.round(as_float)) or as_float.min() < 0:
        raise LabelsError("the labels are not class ids (non-negative integers): a regression target? label errors "
                          "are found for classification")
    ids = as_float.astype(np.int64)
    if len(np.unique(ids)) < 2:
        raise LabelsError(f"every label is {ids[0]}: there is no other class to confuse it with")
    return ids


def read_data(data: Any, network: Any = None, config: Any = None, max_samples: int = MAX_SAMPLES) -> LabelData:
    """``data`` (pipeline, factory or arrays) read once into memory; ``network`` tells a pipeline's label column
    (``Model.train``'s convention: the last column the network does not take)."""
    from mindspore_doctor.config import DoctorConfig

    config = config or DoctorConfig()
    data = _resolve(data)
    if _is_dataset(data):
        inputs, labels, columns, batch_size = _from_pipeline(data, network, config, max_samples)
        note = POSITIONS_NOTE
    else:
        inputs, labels, columns = _from_arrays(data, max_samples)
        batch_size, note = None, NUMPY_POSITIONS_NOTE
    if len(labels) == 0:
        raise LabelsError("the data holds no sample")
    return LabelData(inputs, labels, class_ids(labels), columns, batch_size, note)


# --- the folds -------------------------------------------------------------------------------------------------------


def check_folds(classes: np.ndarray, folds: int) -> None:
    if folds < 2:
        raise LabelsError(f"folds must be at least 2, got {folds}")
    counts = np.bincount(classes)
    present = np.flatnonzero(counts)
    rare = present[counts[present].argmin()]
    if counts[rare] < folds:
        raise LabelsError(f"class {rare} has {counts[rare]} sample(s): folds must be at most {counts[rare]} "
                          f"(each fold holds some of every class), got {folds}")


def to_probabilities(outputs: np.ndarray, labels: np.ndarray, loss_fn: Any, classes: int) -> np.ndarray:
    """(m, k) class probabilities from the network's eval-mode outputs, as the Doctor's evaluation reads them
    (``probes.evaluation``: the task from the loss family and the shapes, then ``Task.probabilities``): class scores
    (logits, log-probabilities) -> softmax; one output per sample (binary) -> sigmoid, unless it is a probability
    already. Other tasks (regression, multi-label, per-token or per-pixel classes) raise ``LabelsError``."""
    from mindspore_doctor.checks import CheckSkipped
    from mindspore_doctor.probes.evaluation import infer_task

    outputs = np.asarray(outputs, dtype=np.float64)
    try:
        task = infer_task(outputs, np.asarray(labels), loss_fn)
    except CheckSkipped as exc:
        raise LabelsError(str(exc)) from None
    if task.kind not in ("binary", "multiclass") or (task.kind == "multiclass" and outputs.ndim != 2):
        what = "per-token or per-pixel classes" if task.kind == "multiclass" else task.kind
        raise LabelsError(f"the network's outputs of shape {outputs.shape} under a {type(loss_fn).__name__} loss are "
                          f"a {what} task: label errors are found for single-label classification")
    if task.kind == "binary" and classes > 2:
        raise LabelsError(f"the network gives one output per sample but the labels name {classes} classes")
    if task.kind == "multiclass" and outputs.shape[1] < classes:
        raise LabelsError(f"the network gives {outputs.shape[1]} class scores but the labels go up to {classes - 1}")
    return task.probabilities(outputs)


def input_sha1s(inputs: tuple[np.ndarray, ...]) -> list[str]:
    """Each sample's fingerprint, as the Doctor's other label sources give it (``probes.evaluation.row_hashes``:
    SHA-1 of its input columns' bytes, 12 hex digits): the same sample has the same sha1 in every report."""
    from mindspore_doctor.probes.evaluation import row_hashes

    return row_hashes([(*inputs, np.zeros(len(inputs[0]), dtype=np.int8))])


def _predict(network: Any, inputs: tuple[np.ndarray, ...]) -> np.ndarray:
    from mindspore import Tensor

    from mindspore_doctor.probes.evaluation import as_numpy

    network.set_train(False)
    out = []
    for start in range(0, len(inputs[0]), PREDICT_BATCH):
        batch = [Tensor(x[start:start + PREDICT_BATCH]) for x in inputs]
        out.append(as_numpy(network(*batch)))
    return np.concatenate(out)


ENSEMBLE_SHARE = 1.0
"""A fold's held-out probabilities are the mean over its last ``ENSEMBLE_SHARE`` of the epochs (at least the last
one): a network trained on noisy folds ends overconfident on its own mistakes, and the mean over its epochs (a
snapshot ensemble) is better calibrated, which is what confident learning's per-class thresholds need. Measured at
10 % symmetric noise (F1; cleanlab's anchor recipe 0.75 on wine, 0.80 on breast_cancer): the last epoch only 0.69 /
0.76, the last half 0.71 / 0.85, every epoch 0.81 / 0.89."""


class _HeldOutScores:
    """The held-out fold's outputs at the end of each of the last epochs, in eval mode, the train flags restored."""

    def __init__(self, network: Any, inputs: tuple[np.ndarray, ...], epochs: int) -> None:
        from mindspore.train import Callback

        self.network, self.inputs = network, inputs
        self.first = epochs - max(1, round(ENSEMBLE_SHARE * epochs)) + 1  # the first epoch read
        self.outputs: list[np.ndarray] = []
        scores = self

        class _Callback(Callback):
            def on_train_epoch_end(self, run_context: Any) -> None:
                if run_context.original_args().cur_epoch_num >= scores.first:
                    scores.read()

        self.callback = _Callback()

    def read(self) -> None:
        from mindspore_doctor.forward import ModeSnapshot

        with ModeSnapshot(self.network):
            self.outputs.append(_predict(self.network, self.inputs))


class _DatasetSeed:
    """The dataset seed set for a fold's shuffle, the user's restored afterwards."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        from mindspore import dataset as ds

        self.saved = ds.config.get_seed()
        ds.config.set_seed(self.seed)

    def __exit__(self, *exc: Any) -> None:
        from mindspore import dataset as ds

        ds.config.set_seed(self.saved)


def run_folds(build: Callable[[dict[str, Any]], tuple[Any, Any, Any]], data: Any, folds: int = DEFAULT_FOLDS, *,
              epochs: int = DEFAULT_EPOCHS, batch_size: int | None = None, seed: int = 0,
              params: dict[str, Any] | None = None, max_samples: int = MAX_SAMPLES,
              progress: Callable[[str], None] | None = None, **options: Any) -> LabelRun:
    """The K-fold run behind ``find_label_errors`` (its arguments); also the per-fold accuracies and the
    probabilities, for the command line."""
    import mindspore as ms
    from mindspore import dataset as ds
    from mindspore.train import Model
    from sklearn.model_selection import StratifiedKFold

    from mindspore_doctor.analysis.labels import label_report
    from mindspore_doctor.cells import loss_family
    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.tuner.failures import TrialFailed, TuneError, failing_as
    from mindspore_doctor.tuner.trainer import build_once

    started = time.perf_counter()
    try:
        config = DoctorConfig.from_options(options)
    except (TypeError, ValueError) as exc:
        raise LabelsError(str(exc)) from None
    if not callable(build):
        raise LabelsError(f"build must be callable (build(params) returning (net, loss_fn, optimizer)), got "
                          f"{type(build).__name__}")
    if epochs < 1:
        raise LabelsError(f"epochs must be at least 1, got {epochs}")
    if batch_size is not None and batch_size < 1:
        raise LabelsError(f"batch_size must be at least 1, got {batch_size}")
    if max_samples < 1:
        raise LabelsError(f"max_samples must be at least 1, got {max_samples}")
    if folds < 2:
        raise LabelsError(f"folds must be at least 2, got {folds}")
    params = dict(params or {})

    def fresh() -> tuple[Any, Any, Any]:
        try:
            return build_once(build, params)
        except (TrialFailed, TuneError) as exc:
            raise LabelsError(str(exc)) from None

    ms.set_seed(seed)
    built = fresh()  # the first fold's network; it also tells a pipeline's label column
    if loss_family(built[1])[0] == "regression":
        raise LabelsError(f"the loss ({type(built[1]).__name__}) is a regression loss: label errors are found for "
                          f"classification")
    loaded = read_data(data, built[0], config, max_samples)
    check_folds(loaded.classes, folds)
    batch = batch_size or loaded.batch_size or DEFAULT_BATCH_SIZE
    n, k = len(loaded.classes), int(loaded.classes.max()) + 1
    probs: np.ndarray | None = None
    accuracy = []
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for fold, (train_idx, held_idx) in enumerate(splitter.split(np.zeros(n), loaded.classes), start=1):
        if fold > 1:
            ms.set_seed(seed)
            built = fresh()
        net, loss_fn, optimizer = built
        columns = tuple(x[train_idx] for x in (*loaded.inputs, loaded.labels))
        with _DatasetSeed(seed + fold):
            train = ds.NumpySlicesDataset(columns, column_names=list(loaded.columns), shuffle=True).batch(batch)
            try:
                held = tuple(x[held_idx] for x in loaded.inputs)
                scores = _HeldOutScores(net, held, epochs)
                with failing_as(f"training fold {fold}"):
                    Model(net, loss_fn, optimizer).train(epochs, train, callbacks=[scores.callback],
                                                                         dataset_sink_mode=False)
            except TrialFailed as exc:
                raise LabelsError(str(exc)) from None
        outputs = scores.outputs
        if any(len(o) != len(held_idx) for o in outputs):
            raise LabelsError(f"the network gives {len(outputs[-1])} outputs for {len(held_idx)} samples")
        if not all(np.isfinite(o).all() for o in outputs):
            raise LabelsError(f"fold {fold}'s network gives non-finite outputs after training: did training "
                              f"diverge? (a smaller learning rate, or fewer epochs)")
        fold_probs = np.mean([to_probabilities(o, loaded.labels[held_idx], loss_fn, k) for o in outputs], axis=0)
        if probs is None:
            probs = np.zeros((n, fold_probs.shape[1]))
        elif fold_probs.shape[1] != probs.shape[1]:
            raise LabelsError(f"fold {fold}'s network gives {fold_probs.shape[1]} class scores, the first "
                              f"{probs.shape[1]}")
        probs[held_idx] = fold_probs
        accuracy.append(float(np.mean(fold_probs.argmax(axis=1) == loaded.classes[held_idx])))
        if progress:
            progress(f"fold {fold}/{folds}: trained on {len(train_idx)} samples, held-out accuracy "
                     f"{accuracy[-1]:.3f}")
    assert probs is not None
    method = (f"{folds}-fold out-of-sample probabilities: each fold scored by a fresh build() trained {epochs} "
              f"epoch(s) on the other folds (batch {batch}, seed {seed}); held-out probabilities averaged over "
              f"the last {max(1, round(ENSEMBLE_SHARE * epochs))} epoch(s)")
    report = label_report(loaded.classes, probs, source="folds", method=method, positions_note=loaded.positions_note,
                          positions=np.arange(n), sha1=input_sha1s(loaded.inputs))
    run = LabelRun(report, probs, loaded.classes, folds, epochs, batch, accuracy, inputs=loaded.inputs)
    run.findings = _judge(report, config)
    run.seconds = time.perf_counter() - started
    return run


def _judge(report: "LabelReport", config: Any) -> list["Finding"]:
    """MSD311 on the report, as the Doctor judges its own (select/ignore honoured)."""
    from mindspore_doctor.checks import selector
    from mindspore_doctor.rules.data.label_errors import label_error_findings

    wanted = selector(config)
    return [f for f in label_error_findings([report], config) if wanted(f.code)]


def write_outputs(run: LabelRun, summary_dir: str | Path, top: int) -> None:
    """The label files of a run directory (``doctor_label_issues.csv``, ``doctor_label_suspects.npz``)."""
    from mindspore_doctor.export.labels import write_label_files

    positions = np.array([s.position for s in run.report.flagged[:top]], dtype=np.int64)
    suspects = {run.report.source: (run.inputs[0][positions], positions)} if run.inputs else {}
    write_label_files(str(summary_dir), [run.report], suspects)


def find_label_errors(build: Callable[[dict[str, Any]], tuple[Any, Any, Any]], data: Any,
                      folds: int = DEFAULT_FOLDS, *, epochs: int = DEFAULT_EPOCHS, batch_size: int | None = None,
                      seed: int = 0, params: dict[str, Any] | None = None, summary_dir: str | Path | None = None,
                      max_samples: int = MAX_SAMPLES, **options: Any) -> "LabelReport":
    """Label errors of a whole training set from exact out-of-sample probabilities (K-fold training).

    ``build(params)`` returns a fresh ``(net, loss_fn, optimizer)``, as for ``tune``; ``params`` (default ``{}``)
    is passed to it. ``data``: a ``mindspore.dataset`` pipeline (its label column as ``Model.train`` takes it, or
    ``label_column=``), a zero-argument factory returning one, or an ``(inputs, labels)`` pair of arrays. It is read
    once into memory (at most ``max_samples`` samples, else ``LabelsError``); ``position`` in the report is the
    index in that read order. Each of the ``folds`` stratified folds is predicted (eval mode) by a fresh network
    trained ``epochs`` epochs on the others (batches of ``batch_size``, default: the pipeline's, else 32;
    shuffled with ``seed``); confident learning (cleanlab) judges the assembled probabilities.

    ``summary_dir``: also write ``doctor_label_issues.csv`` and ``doctor_label_suspects.npz`` there.
    ``options``: ``DoctorConfig`` fields (``label_column``, ``analysis_top``, MSD311's options...).
    Raises ``LabelsError`` (one line) for bad input or a fold whose training fails.
    """
    run = run_folds(build, data, folds, epochs=epochs, batch_size=batch_size, seed=seed, params=params,
                    max_samples=max_samples, **options)
    if summary_dir is not None:
        from mindspore_doctor.config import DoctorConfig

        write_outputs(run, summary_dir, DoctorConfig.from_options(options).analysis_top)
    return run.report


# --- the command line --------------------------------------------------------------------------------------------


def add_labels_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``msdoctor labels`` (the CLI owns the parser, this module its options)."""
    parser.add_argument("build", metavar="BUILD", help="pkg.module:attr of build(params) returning a fresh "
                        "(net, loss_fn, optimizer), as for `msdoctor tune`; called with params {}")
    parser.add_argument("--data", required=True, metavar="DATA", help="pkg.module:attr of the training set: a "
                        "mindspore.dataset pipeline, a zero-argument factory returning one (or tune's (train, eval)), "
                        "or an (inputs, labels) pair of arrays")
    parser.add_argument("--folds", type=int, default=DEFAULT_FOLDS, help=f"K (default {DEFAULT_FOLDS})")
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help=f"epochs per fold (default "
                        f"{DEFAULT_EPOCHS})")
    parser.add_argument("--batch-size", type=int, metavar="B", help="training batch size (default: the pipeline's, "
                        f"else {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--seed", type=int, default=0, help="folds, initialisation and shuffling (default 0)")
    parser.add_argument("--label-column", metavar="NAME", help="the pipeline's label column (default: Model.train's "
                        "convention, the last column the network does not take)")
    parser.add_argument("--max-samples", type=int, default=MAX_SAMPLES, metavar="N", help="refuse a set larger "
                        f"than this (it is read into memory; default {MAX_SAMPLES})")
    parser.add_argument("--top", type=int, default=20, metavar="N", help="suspects shown (default 20)")
    parser.add_argument("--csv", metavar="OUT", help="write every flagged sample to OUT (source, position, given, "
                        "likely, quality, sha1)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--summary-dir", metavar="DIR", help="write doctor_label_issues.csv and "
                        "doctor_label_suspects.npz (the top suspects' inputs) into DIR")
    parser.add_argument("--fail-on-noise", action="store_true", help="exit 1 when MSD311 (label-errors) is raised")
    parser.add_argument("--quiet", action="store_true", help="no per-fold progress on stderr")


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def format_labels_text(run: LabelRun, top: int = 20) -> str:
    """Noise rate overall and per class, the most swapped pairs, the top suspects, the findings."""
    r = run.report
    lines = [f"msdoctor labels: {r.samples} samples, {r.classes} classes; {r.method}",
             f"  out-of-sample accuracy {run.accuracy:.3f} (per fold: "
             f"{', '.join(f'{a:.3f}' for a in run.fold_accuracy)}); {run.seconds:.1f} s",
             f"  estimated label noise: {_pct(r.noise_rate)}; {len(r.flagged)} sample(s) flagged"]
    if r.per_class:
        shown = sorted(r.per_class, key=lambda c: -c.noise_rate)
        shown = shown if len(shown) <= 20 else shown[:max(top, 10)]
        lines.append("  per class, noisiest first (label: support, estimated noise):")
        lines += [f"    {c.label:>5}: {c.support:>6}  {_pct(c.noise_rate):>7}" for c in shown]
        if len(shown) < len(r.per_class):
            lines.append(f"    ... {len(r.per_class) - len(shown)} more classes (--json has them all)")
    if r.swapped:
        lines.append("  most swapped (given -> likely: count, share of the given class):")
        lines += [f"    {p.given} -> {p.likely}: {p.count} ({_pct(p.rate)})" for p in r.swapped[:10]]
    if r.flagged and top > 0:
        lines.append(f"  top suspects (position: {r.positions}; score: label quality, lower = more likely wrong):")
        lines.append(f"    {'position':>8}  {'given':>5}  {'likely':>6}  {'score':>8}")
        lines += [f"    {s.position:>8}  {s.given:>5}  {s.likely:>6}  {s.quality:>8.2g}" for s in r.flagged[:top]]
        if len(r.flagged) > top:
            lines.append(f"    ... {len(r.flagged) - top} more (--csv OUT writes them all)")
    lines += [f"  {f.severity.value} {f.code} [{f.rule}] {f.message}" for f in run.findings]
    if not run.findings:
        lines.append("  no finding: the estimated noise is below what MSD311 warns about")
    return "\n".join(lines)


def labels_json(run: LabelRun) -> dict[str, Any]:
    return {"report": run.report.to_dict(), "accuracy": run.accuracy, "fold_accuracy": run.fold_accuracy,
            "folds": run.folds, "epochs": run.epochs, "batch_size": run.batch_size, "seconds": run.seconds,
            "findings": [f.to_dict() for f in run.findings]}


def run_labels_command(args: argparse.Namespace) -> int:
    """``msdoctor labels``. Exit codes: 0 done, 1 MSD311 with ``--fail-on-noise``, 2 bad input or a fold whose
    training failed (one line on stderr)."""
    from mindspore_doctor._io import atomic_write_text
    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.export.labels import label_issues_csv
    from mindspore_doctor.loading import load_attr
    from mindspore_doctor.static.loader import LoadError

    try:
        if args.top < 0:
            raise LabelsError(f"--top must be at least 0, got {args.top}")
        build = load_attr(args.build, "BUILD")
        if not callable(build):
            raise LabelsError(f"{args.build} is not callable; give build(params) returning (net, loss_fn, optimizer)")
        data = load_attr(args.data, "--data")
        options = {"label_column": args.label_column} if args.label_column else {}
        say = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        run = run_folds(build, data, args.folds, epochs=args.epochs, batch_size=args.batch_size, seed=args.seed,
                        max_samples=args.max_samples, progress=say, **options)
    except (LoadError, LabelsError) as exc:
        print(f"msdoctor: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(labels_json(run), indent=2, default=str) if args.json else format_labels_text(run, args.top))
    try:
        if args.csv:
            atomic_write_text(args.csv, label_issues_csv([run.report]))
            print(f"msdoctor: {len(run.report.flagged)} flagged sample(s) written to {args.csv}", file=sys.stderr)
        if args.summary_dir:
            write_outputs(run, args.summary_dir, DoctorConfig.from_options(options).analysis_top)
            print(f"msdoctor: label files written to {args.summary_dir}", file=sys.stderr)
    except OSError as exc:
        print(f"msdoctor: cannot write {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 1 if args.fail_on_noise and run.findings else 0
