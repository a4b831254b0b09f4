"""Read a bounded, deterministic sample of a dataset without perturbing training.

The sample is the first samples the pipeline yields (after its shuffle, maps and
batching), read through a fresh ``create_tuple_iterator(num_epochs=1)`` on the
same dataset object: MindSpore builds every iterator from its own copy of the
pipeline tree, so training's iterator, its order and its shuffle seed are not
touched. The iterator is stopped as soon as the sample is complete.
"""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, TypeVar

import numpy as np

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.data.roles import ColumnRoles, RolesUnknown, assign_roles
from mindspore_doctor.data.signals import DatasetSignals
from mindspore_doctor.data.stats import FeatureAccumulator, LabelAccumulator, UnsupportedColumn


T = TypeVar("T")


class DataUnavailable(Exception):
    """The dataset cannot be sampled (empty, its pipeline raises, one-shot source); says why."""


@dataclass
class Sample:
    signals: DatasetSignals
    first_batch: dict[str, np.ndarray]
    """The first row as the iterator yields it (a batch when batched): MSD306's forward pass input."""
    batched: bool = False
    """Rows are batches (a batching node, or a source that yields batches)."""

    def sample_shape(self, column: str) -> tuple[int, ...]:
        """One sample's shape in ``column``."""
        shape = tuple(self.first_batch[column].shape)
        return shape[1:] if self.batched else shape


_PYTHON_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*")


def error_summary(exc: BaseException) -> str:
    """One line: the exception type and message, plus the user's own Python error MindSpore wraps."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    summary = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    user_error = next((line for line in str(exc).splitlines() if _PYTHON_ERROR_LINE.match(line)), None)
    return f"{summary} ({user_error})" if user_error and user_error not in summary else summary


def _ask(dataset_name: str, what: str, call: Callable[[], T]) -> T:
    """A pipeline query; its failure is the user's pipeline problem (MSD002), not our bug."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - e.g. "not a tree", a failing map, a missing file
        raise DataUnavailable(f"{what} of the {dataset_name} dataset raised {error_summary(exc)}") from exc


def column_names(dataset: Any, dataset_name: str) -> list[str]:
    from mindspore.dataset import Dataset

    if not isinstance(dataset, Dataset):
        raise DataUnavailable(f"the {dataset_name} dataset is a {type(dataset).__name__}, not a mindspore.dataset pipeline")
    return list(_ask(dataset_name, "get_col_names()", dataset.get_col_names))


def _pipeline_nodes(dataset: Any) -> list[Any]:
    nodes, stack = [], [dataset]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(getattr(node, "children", None) or [])
    return nodes


def _generator_sources(dataset: Any) -> list[Any]:
    from mindspore.dataset import GeneratorDataset

    return [n for n in _pipeline_nodes(dataset) if isinstance(n, GeneratorDataset)]


def _one_shot_source(dataset: Any) -> str:
    """Why sampling would steal samples from training ("" when it would not)."""
    for node in _generator_sources(dataset):
        source = node.source
        if hasattr(source, "__next__") and not hasattr(source, "__getitem__"):
            return (
                f"the {type(node).__name__} reads a one-shot Python iterator ({type(source).__name__}); "
                "sampling it would consume samples training needs (pass a generator *function* or a "
                "random-access source to enable the data checks)"
            )
    return ""


def _num_shards(dataset: Any) -> int:
    """How many shards the source is split into (msrun data parallel: one per rank), 1 when not sharded."""
    shards = [getattr(n, "num_shards", None) for n in _pipeline_nodes(dataset)]
    return max([int(s) for s in shards if isinstance(s, int) and s > 1] or [1])


def _shuffle_ignored(dataset: Any) -> bool:
    """GeneratorDataset(shuffle=True/None) over a source without ``__getitem__`` silently keeps its order."""
    from mindspore.dataset import RandomSampler

    return any(
        isinstance(n.sampler, RandomSampler) and not hasattr(n.source, "__getitem__") for n in _generator_sources(dataset)
    )


def is_batched(dataset: Any) -> bool:
    """A batching node in the pipeline: ``batch``, ``padded_batch`` (not a BatchDataset subclass) or
    ``bucket_batch_by_length``."""
    from mindspore.dataset.engine.datasets import BatchDataset, BucketBatchByLengthDataset, PaddedBatchDataset

    batching = (BatchDataset, PaddedBatchDataset, BucketBatchByLengthDataset)
    return any(isinstance(n, batching) for n in _pipeline_nodes(dataset))


def rows_are_batches(row: dict[str, np.ndarray], roles: ColumnRoles) -> bool:
    """A pipeline without a batching node whose source already yields batches (a generator of
    ``(images[N, ...], labels[N])``, common in code ported from other frameworks).

    Judged from the first row: every column has the same leading length N >= 2, the label is one value per
    sample ((N,) or (N, 1)), and some input has more axes than that. A single sample rarely looks so: a token sequence
    with per-token tags has 1-D inputs, a segmentation sample a 2-D mask. Without a label column there is no
    such evidence and rows stay samples.
    """
    label = row[roles.label] if roles.label is not None else None
    if label is None or not roles.inputs or not (label.ndim == 1 or (label.ndim == 2 and label.shape[1] == 1)):
        return False
    lengths = {a.shape[0] if a.ndim else None for a in row.values()}
    return len(lengths) == 1 and (lengths.pop() or 0) >= 2 and any(row[c].ndim >= 2 for c in roles.inputs)


def _known_size(dataset: Any, name: str) -> int | None:
    """Batches per epoch, unless finding out would run a length-less generator through."""
    if getattr(dataset, "dataset_size", None) is None and any(
        getattr(n, "source_len", 0) == -1 for n in _generator_sources(dataset)
    ):
        return None
    return int(_ask(name, "get_dataset_size()", dataset.get_dataset_size))


def _sample_hashes(arrays: list[np.ndarray]) -> list[int]:
    """One 64-bit hash per sample over all input columns; constant samples (padding, blanks) get none."""
    out = []
    for i in range(arrays[0].shape[0]):
        rows = [np.ascontiguousarray(a[i]) for a in arrays]
        if all(r.size == 0 or r.min() == r.max() for r in rows):
            continue
        h = hashlib.blake2b(digest_size=8)
        for r in rows:
            h.update(str((r.dtype.str, r.shape)).encode())
            h.update(r.tobytes())
        out.append(int.from_bytes(h.digest(), "little"))
    return out


def read_sample(dataset: Any, name: str, roles: ColumnRoles, config: DoctorConfig) -> Sample:
    """Stream up to ``data_max_samples`` samples (or ``data_max_seconds``) into statistics."""
    why = _one_shot_source(dataset)
    if why:
        raise DataUnavailable(why)
    columns = column_names(dataset, name)
    batched = is_batched(dataset)
    inputs = {c: FeatureAccumulator(c) for c in roles.inputs}
    label = LabelAccumulator(roles.label) if roles.label else None
    signals = DatasetSignals(name=name, samples=0)
    hashes: list[int] = []
    first_batch: dict[str, np.ndarray] = {}
    rows_read = 0
    exhausted = False
    start = time.perf_counter()
    iterator = _ask(name, "create_tuple_iterator()", lambda: dataset.create_tuple_iterator(num_epochs=1, output_numpy=True))
    try:
        while signals.samples < config.data_max_samples:
            if signals.samples and time.perf_counter() - start > config.data_max_seconds:
                signals.truncated_by_time = True  # at least one batch is always read
                break
            try:
                row = next(iterator)
            except StopIteration:
                exhausted = True
                break
            except Exception as exc:  # noqa: BLE001 - the user's pipeline raising is a finding, not our crash
                raise DataUnavailable(f"reading the {name} dataset raised {error_summary(exc)}") from exc
            if not first_batch:
                first_batch = {c: np.asarray(a) for c, a in zip(columns, row)}
                batched = batched or rows_are_batches(first_batch, roles)
                signals.batch_size = _leading_length(first_batch) if batched else 1
            batch = {c: (np.asarray(a) if batched else np.asarray(a)[None]) for c, a in zip(columns, row)}
            signals.samples += _add_batch(batch, inputs, label, signals)
            rows_read += 1
            if inputs:
                hashes.extend(_sample_hashes([batch[c] for c in inputs]))
    finally:
        iterator.stop()
    if signals.samples == 0:
        raise DataUnavailable(f"the {name} dataset yielded no samples")
    size = _known_size(dataset, name)
    # rows per epoch x samples per row as read: a padded, bucketed or partial last batch counts what it holds
    per_row = signals.samples / rows_read
    signals.total_samples = signals.samples if exhausted else (round(size * per_row) if size is not None else None)
    signals.shards = _num_shards(dataset)
    signals.features = [acc.result() for acc in inputs.values()]
    signals.label = label.result() if label is not None and label.column not in signals.skipped_columns else None
    signals.hashes = np.array(hashes, dtype=np.uint64)
    signals.shuffle_ignored = _shuffle_ignored(dataset)
    return Sample(signals, first_batch, batched)


def _leading_length(row: dict[str, np.ndarray]) -> int:
    """Samples in one batched row: the leading length of its columns."""
    return int(next(iter(row.values())).shape[0])


def _add_batch(batch: dict[str, np.ndarray], inputs: dict[str, FeatureAccumulator], label: LabelAccumulator | None, signals: DatasetSignals) -> int:
    """Feed one batch to the accumulators; a column that cannot be summarised is dropped with its reason."""
    accumulators: dict[str, Any] = dict(inputs)
    if label is not None and label.column not in signals.skipped_columns:
        accumulators[label.column] = label
    for column, acc in accumulators.items():
        try:
            acc.add(batch[column])
        except UnsupportedColumn as why:
            signals.skipped_columns[column] = str(why)
            inputs.pop(column, None)
    return int(next(iter(batch.values())).shape[0])


def first_batch_inputs(dataset: Any, network: Any, config: DoctorConfig) -> tuple:
    """``(inputs..., label)`` of the first training batch, for MSD114's forward pass.

    Read as the data checks read it (same column roles, a fresh iterator stopped after one batch), so the
    iterator training uses, its order and its seed are untouched.
    """
    if dataset is None:
        raise CheckSkipped("no training dataset to take a sample batch from")
    try:
        columns = column_names(dataset, "train")
        roles = assign_roles(columns, network, config)
        if roles.label is None or not roles.inputs:
            raise CheckSkipped(f"cannot tell the inputs from the label among the train dataset's columns {columns} "
                               "(set the `label_column` / `input_columns` options)")
        batch = read_sample(dataset, "train", roles, replace(config, data_max_samples=1)).first_batch
    except (DataUnavailable, RolesUnknown) as why:
        raise CheckSkipped(f"no sample batch from the train dataset: {why}") from why
    return (*(batch[c] for c in roles.inputs), batch[roles.label])
