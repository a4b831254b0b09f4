"""Streaming statistics over sampled batches (numpy only): batches in, signals out.

Memory stays bounded by the sample size times the number of features: images are
reduced to per-sample, per-channel numbers as they arrive.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import numpy as np

from mindspore_doctor.data.signals import FeatureStats, LabelStats

IMAGE_MIN_SIDE = 8
"""A 2-D sample with both sides at least this long is a one-channel image, not a (steps, features) table."""
MAX_CHANNELS = 4
"""An image axis this short (or shorter) is the channel axis."""


class UnsupportedColumn(Exception):
    """The column cannot be summarised numerically (strings, ragged shapes); the message says why."""


def _check_numeric(column: str, batch: np.ndarray) -> None:
    if batch.dtype.kind in "USOV":
        raise UnsupportedColumn(f"column `{column}` holds {batch.dtype} values (strings/bytes/objects), not numbers")


def _layout(shape: tuple[int, ...], integer: bool) -> tuple[str, str]:
    """(kind, per-sample layout) of an input column from one sample's shape and dtype."""
    ndim = len(shape)
    if ndim <= 1:
        return ("tokens" if integer else "tabular"), ("F" if ndim else "")
    if ndim == 2:
        if min(shape) >= IMAGE_MIN_SIDE:
            return "image", "HW"
        return ("tokens" if integer else "tabular"), "TF"
    if ndim == 3 and shape[-1] <= MAX_CHANNELS < shape[0]:
        return "image", "HWC"
    return "image", "CHW"


def _features_first(batch: np.ndarray, layout: str) -> np.ndarray:
    """Reshape a batch to (samples, features, values per feature)."""
    b = batch.shape[0]
    if layout == "":
        return batch.reshape(b, 1, 1)
    if layout == "F":
        return batch.reshape(b, -1, 1)
    if layout == "HW":
        return batch.reshape(b, 1, -1)
    if layout in ("TF", "HWC"):
        return np.moveaxis(batch, -1, 1).reshape(b, batch.shape[-1], -1)
    return batch.reshape(b, batch.shape[1], -1)  # channels first


class FeatureAccumulator:
    """Per-sample, per-feature mean, mean square, min, max and non-finite count of one input column."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.kind = self.layout = ""
        self.num_features: int | None = None
        self._parts: dict[str, list[np.ndarray]] = {k: [] for k in ("mean", "meansq", "min", "max", "nonfinite")}

    def add(self, batch: np.ndarray) -> None:
        """Add a batch shaped (samples, *sample_shape)."""
        _check_numeric(self.column, batch)
        if self.num_features is None:
            self.kind, self.layout = _layout(batch.shape[1:], batch.dtype.kind in "iub")
        x = _features_first(batch, self.layout).astype(np.float64, copy=False)
        if self.num_features is None:
            self.num_features = x.shape[1]
        elif x.shape[1] != self.num_features:
            raise UnsupportedColumn(
                f"column `{self.column}` has ragged samples: {self.num_features} then {x.shape[1]} "
                f"{'channels' if self.kind == 'image' else 'features'} (shape {batch.shape[1:]})"
            )
        finite = np.isfinite(x)
        parts = self._parts
        if finite.all():
            parts["mean"].append(x.mean(axis=2))
            parts["meansq"].append(np.square(x).mean(axis=2))
            parts["min"].append(x.min(axis=2))
            parts["max"].append(x.max(axis=2))
            parts["nonfinite"].append(np.zeros(x.shape[:2], dtype=np.int64))
            return
        masked = np.where(finite, x, np.nan)
        with _quiet_nan_warnings():
            parts["mean"].append(np.nanmean(masked, axis=2))
            parts["meansq"].append(np.nanmean(np.square(masked), axis=2))
            parts["min"].append(np.nanmin(masked, axis=2))
            parts["max"].append(np.nanmax(masked, axis=2))
        parts["nonfinite"].append((~finite).sum(axis=2))

    def result(self) -> FeatureStats:
        p = {k: np.concatenate(v) for k, v in self._parts.items()}
        with _quiet_nan_warnings():
            mean = np.nanmean(p["mean"], axis=0)
            var = np.nanmean(p["meansq"], axis=0) - np.square(mean)
            lo, hi = np.nanmin(p["min"], axis=0), np.nanmax(p["max"], axis=0)
        return FeatureStats(
            column=self.column,
            kind=self.kind,
            feature_name="channel" if self.kind == "image" else "feature",
            layout=self.layout,
            mean=mean,
            std=np.sqrt(np.clip(var, 0.0, None)),
            min=lo,
            max=hi,
            nonfinite=p["nonfinite"].sum(axis=0),
            per_sample=p["mean"],
        )


class LabelAccumulator:
    """The label column in stream order (dense per-position labels: only the distinct ids)."""

    def __init__(self, column: str) -> None:
        self.column = column
        self._rows: list[np.ndarray] = []
        self._dense_ids: set[int] = set()
        self._nonfinite = 0

    def add(self, batch: np.ndarray) -> None:
        _check_numeric(self.column, batch)
        if batch.dtype.kind == "f":
            finite = np.isfinite(batch)
            self._nonfinite += int((~finite).sum())
            batch = np.where(finite, batch, np.nan)
        per_sample = batch.reshape(batch.shape[0], -1)
        if batch.dtype.kind in "iu" and per_sample.shape[1] > 1:
            self._dense_ids.update(np.unique(per_sample).tolist())
            return
        if self._rows and self._rows[0].shape[1] != per_sample.shape[1]:
            raise UnsupportedColumn(f"label column `{self.column}` has ragged samples (shape {batch.shape[1:]})")
        self._rows.append(per_sample)

    def result(self) -> LabelStats:
        if self._dense_ids:
            return LabelStats(self.column, "dense", np.array(sorted(self._dense_ids)), self._nonfinite)
        rows = np.concatenate(self._rows).astype(np.float64)
        kind, values, width = _label_kind(rows, self._rows[0].dtype.kind in "iub")
        return LabelStats(self.column, kind, values, self._nonfinite, width)


def _label_kind(rows: np.ndarray, integer: bool) -> tuple[str, np.ndarray, int | None]:
    """Class ids, one-hot rows or regression targets, judged from the values themselves."""
    finite_rows = rows[np.isfinite(rows).all(axis=1)]
    if rows.shape[1] == 1:
        values = rows[:, 0]
        binary_floats = finite_rows.size and np.isin(finite_rows, (0.0, 1.0)).all()
        if integer or binary_floats:
            return "class", values, None
        return "regression", values, None
    is_onehot = finite_rows.size and np.isin(finite_rows, (0.0, 1.0)).all() and (finite_rows.sum(axis=1) == 1).all()
    if is_onehot:
        return "onehot", np.argmax(np.nan_to_num(rows), axis=1).astype(np.float64), rows.shape[1]
    return "regression", rows[:, 0], None


@contextlib.contextmanager
def _quiet_nan_warnings() -> Iterator[None]:
    """All-NaN slices are expected (a feature NaN in every sample): MSD301 reports them, numpy need not."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield
