"""Streaming statistics over sampled batches (numpy only): batches in, signals out.

Memory stays bounded by the sample size times the number of features: images are
reduced to per-sample, per-channel numbers as they arrive.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import replace
from typing import Iterator

import numpy as np

from mindspore_doctor.data.signals import DatasetSignals, FeatureStats, LabelStats

IMAGE_MIN_SIDE = 8
"""A 2-D sample with both sides at least this long is a one-channel image, not a (steps, features) table."""
MAX_CHANNELS = 4
"""An image axis this short (or shorter) is the channel axis."""
FLAT_IMAGE_CHANNELS = (1, 3, 4)
"""Channel counts a flattened image vector (channels x side x side features) may have."""
FLAT_IMAGE_NEIGHBOUR_EXCESS = 0.2
"""A float vector is a flattened image when pixels next to each other on its square grid correlate more than
random pixel pairs by this much on average (digits 8x8: 0.40 vs 0.11; a 64-column table tiled from correlated
measurements: 0.40 vs 0.38; Gaussian noise: 0.00 vs 0.03)."""
FLAT_IMAGE_ROWS = 512
"""Rows used to decide whether a vector column is a flattened image (bounded cost)."""
MIN_GRID_ROWS = 32
"""Fewer rows than this say nothing reliable about pixel correlations."""


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
        self.positions = 1
        self._parts: dict[str, list[np.ndarray]] = {k: [] for k in ("mean", "meansq", "min", "max", "nonfinite")}

    def add(self, batch: np.ndarray) -> None:
        """Add a batch shaped (samples, *sample_shape)."""
        _check_numeric(self.column, batch)
        if self.num_features is None:
            self.kind, self.layout = _layout(batch.shape[1:], batch.dtype.kind in "iub")
        x = _features_first(batch, self.layout).astype(np.float64, copy=False)
        if self.num_features is None:
            self.num_features = x.shape[1]
            # a token vector's entries are its positions; any other column's positions are its values per feature
            self.positions = x.shape[1] if self.kind == "tokens" and self.layout == "F" else x.shape[2]
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
            # total variance = mean within-sample variance + variance of the sample means; not E[x^2] - E[x]^2
            # over everything, whose cancellation gives a constant float32 column a std of ~1e-9
            within = np.nanmean(np.clip(p["meansq"] - np.square(p["mean"]), 0.0, None), axis=0)
            var = within + np.nanvar(p["mean"], axis=0)
            lo, hi = np.nanmin(p["min"], axis=0), np.nanmax(p["max"], axis=0)
        return FeatureStats(
            column=self.column,
            kind=self.kind,
            feature_name="channel" if self.kind == "image" else "feature",
            layout=self.layout,
            mean=mean,
            std=_std(var, lo, hi),
            min=lo,
            max=hi,
            nonfinite=p["nonfinite"].sum(axis=0),
            per_sample=p["mean"],
            positions=self.positions,
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


def _std(var: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Standard deviation, exactly 0 where every value is the same (rounding leaves a constant a tiny variance)."""
    return np.where(hi > lo, np.sqrt(np.clip(var, 0.0, None)), 0.0)


def _grid_pairs(channels: int, side: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    """Feature indices of horizontally and vertically adjacent pixels of a flattened CHW or HWC image."""
    shape = (channels, side, side) if order == "CHW" else (side, side, channels)
    index = np.arange(channels * side * side).reshape(shape)
    if order == "HWC":
        index = np.moveaxis(index, -1, 0)
    first = np.r_[index[:, :, :-1].ravel(), index[:, :-1, :].ravel()]
    second = np.r_[index[:, :, 1:].ravel(), index[:, 1:, :].ravel()]
    return first, second


def _mean_correlation(z: np.ndarray, varying: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Mean correlation over the column pairs (a[i], b[i]) of standardised rows ``z`` (constant columns left out)."""
    keep = varying[a] & varying[b] & (a != b)
    return float(np.mean((z[:, a[keep]] * z[:, b[keep]]).mean(axis=0))) if keep.any() else 0.0


def flat_image_grid(rows: np.ndarray) -> tuple[tuple[int, int, int], str] | None:
    """((channels, side, side), "CHW" or "HWC") when a float vector column is a flattened square image.

    Judged by what makes an image an image: pixels next to each other on the grid correlate far more than
    random pixel pairs (FLAT_IMAGE_NEIGHBOUR_EXCESS); a table with a square number of columns does not.
    """
    rows = rows[:FLAT_IMAGE_ROWS]
    rows = rows[np.isfinite(rows).all(axis=1)]
    n, width = rows.shape
    if n < MIN_GRID_ROWS:
        return None
    std = rows.std(axis=0)
    varying = std > 0
    z = (rows - rows.mean(axis=0)) / np.where(varying, std, 1.0)
    background = abs(_mean_correlation(z, varying, np.arange(width), np.random.default_rng(0).permutation(width)))
    for channels in FLAT_IMAGE_CHANNELS:
        side = math.isqrt(width // channels)
        if channels * side * side != width or side < IMAGE_MIN_SIDE:
            continue
        for order in ("CHW", "HWC") if channels > 1 else ("CHW",):
            neighbours = _mean_correlation(z, varying, *_grid_pairs(channels, side, order))
            if neighbours - background >= FLAT_IMAGE_NEIGHBOUR_EXCESS:
                return (channels, side, side), order
    return None


def _per_channel(values: np.ndarray, grid: tuple[int, int, int], order: str) -> np.ndarray:
    """(..., features) -> (..., channels, pixels) for a flattened image."""
    channels, height, width = grid
    if order == "CHW":
        return values.reshape(values.shape[:-1] + (channels, height * width))
    return np.swapaxes(values.reshape(values.shape[:-1] + (height * width, channels)), -1, -2)


def channel_view(f: FeatureStats, grid: tuple[int, int, int], order: str) -> FeatureStats:
    """A flattened image column's statistics per channel, as an image column's are measured."""
    def split(values: np.ndarray) -> np.ndarray:
        return _per_channel(values, grid, order)

    with _quiet_nan_warnings():
        lo, hi = np.nanmin(split(f.min), axis=-1), np.nanmax(split(f.max), axis=-1)
        var = np.nanmean(split(np.square(f.std)), axis=-1) + np.nanvar(split(f.mean), axis=-1)
        return replace(f, kind="image", feature_name="channel", layout=order, grid=grid,
                       positions=grid[1] * grid[2], mean=np.nanmean(split(f.mean), axis=-1),
                       std=_std(var, lo, hi), min=lo, max=hi,
                       nonfinite=split(f.nonfinite).sum(axis=-1), per_sample=np.nanmean(split(f.per_sample), axis=-1))


def view_flat_images(train: DatasetSignals, eval_: DatasetSignals | None) -> None:
    """Judge flattened image columns per channel, as images are (a blank border pixel is not a broken feature).

    The training sample decides; the eval column of the same name is viewed the same way so MSD308 compares
    like with like.
    """
    evaluated = {f.column: i for i, f in enumerate(eval_.features)} if eval_ is not None else {}
    for i, f in enumerate(train.features):
        if f.kind != "tabular" or f.layout != "F":
            continue
        found = flat_image_grid(f.per_sample)
        if found is None:
            continue
        train.features[i] = channel_view(f, *found)
        j = evaluated.get(f.column)
        if j is not None and eval_.features[j].num_features == f.num_features:
            eval_.features[j] = channel_view(eval_.features[j], *found)


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
