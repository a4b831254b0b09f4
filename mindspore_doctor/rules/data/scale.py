"""MSD303 and MSD304: the inputs' scale, samples far outside the bulk and features far from mean 0 / std 1."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mindspore_doctor.data.signals import DataSignals, FeatureStats
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import INFO, Option, Rule, WARNING
from mindspore_doctor.rules.data.common import MIN_ORDER_SAMPLES, _g, _where

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _robust_z(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(|x - median| / (1.4826 MAD), median, 1.4826 MAD) per column; columns with MAD 0 (mostly one value) get z 0."""
    with np.errstate(all="ignore"):
        med = np.nanmedian(x, axis=0)
        scale = 1.4826 * np.nanmedian(np.abs(x - med), axis=0)
        z = np.abs(x - med) / np.where(scale > 0, scale, np.inf)
    return np.nan_to_num(z, nan=0.0), med, scale


def _beyond_gap(column: np.ndarray, median: float, gap: float) -> np.ndarray:
    """Values past the first empty stretch of at least ``gap`` between the median and them, on either side.

    A sentinel (-9999) or a corrupt value sits alone beyond such a gap; the top values of a discrete feature
    (a pixel's 16 in 0..16) have every value from the bulk up to them filled in.
    """
    beyond = np.zeros(column.shape, dtype=bool)
    for side in (1.0, -1.0):
        distances = np.sort(side * (column - median))
        distances = distances[distances > 0]
        jumps = np.flatnonzero(np.diff(np.r_[0.0, distances]) >= gap)
        if jumps.size:
            beyond |= side * (column - median) >= distances[jumps[0]]
    return beyond


OUTLIER_Z = Option(
    "outlier_z", 10.0,
    "MSD303: robust z-score |x - median| / (1.4826 MAD) above which a sample is an outlier.",
)
OUTLIER_GAP = Option(
    "outlier_gap", 3.0,
    "MSD303: an outlier must also lie beyond an empty stretch of at least this many robust scales (1.4826 MAD) "
    "between it and the median: values of a discrete or sparse feature that run on without a break up to its "
    "maximum (a pixel at 16 of 0..16) are its range, not outliers.",
)
INPUT_OUTLIERS = Rule(
    "MSD303", "input-outliers", INFO,
    "samples far outside the bulk",
    options=(OUTLIER_Z, OUTLIER_GAP),
)


@INPUT_OUTLIERS.judge
def input_outliers(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD303: samples whose features (image: channel means) lie far outside the bulk, beyond an empty gap."""
    found = []
    for f in s.train.features:
        if f.kind == "tokens" or f.per_sample.shape[0] < MIN_ORDER_SAMPLES:
            continue
        z, median, scale = _robust_z(f.per_sample)
        for j in np.flatnonzero((z > config.outlier_z).any(axis=0)):
            z[:, j] *= _beyond_gap(f.per_sample[:, j], median[j], config.outlier_gap * scale[j])
        worst_per_sample = z.max(axis=1)
        outliers = np.flatnonzero(worst_per_sample > config.outlier_z)
        if not outliers.size:
            continue
        worst = int(outliers[np.argmax(worst_per_sample[outliers])])
        feature = int(np.argmax(z[worst]))
        what = "mean of " if f.kind == "image" else ""
        # Heavy tails scatter; a value repeated exactly far from the bulk is a sentinel ("missing" = -9999,
        # a saturated sensor, blank images): a broken input, so a warning rather than a note.
        values, counts = np.unique(f.per_sample[outliers, feature], return_counts=True)
        sentinel = float(values[counts.argmax()]) if counts.max() >= max(2, outliers.size // 2) else None
        found.append(INPUT_OUTLIERS.finding(
            f"{outliers.size} of {z.shape[0]} sampled inputs of `{f.column}` lie more than {_g(config.outlier_z)} "
            f"robust z-scores from the median, past a gap in the values; worst: sample #{worst}, "
            f"{what}{f.feature_label(feature)} = {_g(f.per_sample[worst, feature])} (z = {_g(z[worst, feature])}, "
            f"median {_g(median[feature])})."
            + (f" {int(counts.max())} of them are exactly {_g(sentinel)}: a sentinel value (missing data?)."
               if sentinel is not None else ""),
            severity="warning" if sentinel is not None else None,
            location=_where(s.train, f.column),
            evidence={"outliers": int(outliers.size), "samples": int(z.shape[0]), "worst_sample": worst,
                      "worst_feature": feature, "worst_z": float(z[worst, feature]), "sentinel": sentinel},
            suggestion="Look at these samples: corrupt files, unit errors or sentinel values (e.g. -999) should be "
            "fixed or dropped; genuine heavy tails call for clipping or a log transform.",
        ))
    return found


def _spread(f: FeatureStats, config: DoctorConfig) -> np.ndarray:
    """Each feature's scale for comparing features with each other.

    The std, except for a feature that mostly repeats one value (a sparse count, a blank pixel): its std says
    how rarely it varies, not in what units, so it is the RMS distance of its other values from that value.
    """
    spread = f.std.copy()
    if not f.rows_are_values:
        return spread
    for j in np.flatnonzero(f.max > f.min):
        column = f.per_sample[:, j]
        column = column[np.isfinite(column)]
        values, counts = np.unique(column, return_counts=True)
        if counts.max() >= config.sparse_mode_fraction * column.size:
            mode = values[counts.argmax()]
            spread[j] = float(np.sqrt(np.mean(np.square(column[column != mode] - mode))))
    return spread


NORMALIZED_MAX = Option(
    "normalized_max", 5.0,
    "MSD304: a feature/channel whose |mean| or std exceeds this is not normalised.",
)
SCALE_RATIO_MAX = Option(
    "scale_ratio_max", 100.0,
    "MSD304: largest / smallest feature std above this: scales differ by orders of magnitude.",
)
SPARSE_MODE_FRACTION = Option(
    "sparse_mode_fraction", 0.5,
    "MSD304: a feature that takes one value in at least this fraction of the samples (a sparse count, a blank "
    "pixel) is compared by the RMS distance of its other values from that value, not by its std, which only says "
    "how rarely it varies.",
)
INPUT_NOT_NORMALIZED = Rule(
    "MSD304", "input-not-normalized", WARNING,
    "inputs not normalised",
    options=(NORMALIZED_MAX, SCALE_RATIO_MAX, SPARSE_MODE_FRACTION),
)


@INPUT_NOT_NORMALIZED.judge
def input_not_normalized(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD304: features/channels far from mean 0 / std 1, or std scales differing by orders of magnitude."""
    found = []
    for f in s.train.features:
        if f.kind == "tokens":
            continue
        varying = f.max > f.min
        far = np.flatnonzero(varying & ((np.abs(f.mean) > config.normalized_max) | (f.std > config.normalized_max)))
        spread = _spread(f, config)
        stds = spread[varying]
        ratio = float(stds.max() / stds.min()) if stds.size >= 2 else 1.0
        if far.size:
            i = int(far[np.argmax(np.abs(f.mean[far]) + f.std[far])])
            hint = " Raw 0-255 pixels?" if f.kind == "image" and f.max[i] > 1.5 and f.min[i] >= 0 else ""
            message = (f"Input `{f.column}` is not normalised: {far.size} of {f.num_features} {f.feature_name}s are far "
                       f"from mean 0 / std 1; {f.feature_label(i)} has mean {_g(f.mean[i])}, std {_g(f.std[i])} "
                       f"(range {_g(f.min[i])}..{_g(f.max[i])}).{hint}")
        elif ratio > config.scale_ratio_max:
            lo, hi = int(np.flatnonzero(varying)[stds.argmin()]), int(np.flatnonzero(varying)[stds.argmax()])
            i = hi
            message = (f"Input `{f.column}` mixes scales: {f.feature_label(hi)} varies by {_g(spread[hi])} (std) "
                       f"but {f.feature_name} {lo} only by {_g(spread[lo])} "
                       f"(ratio {ratio:.3g} > {_g(config.scale_ratio_max)}).")
        else:
            continue
        found.append(INPUT_NOT_NORMALIZED.finding(
            message,
            location=_where(s.train, f.column),
            evidence={"feature": i, "mean": float(f.mean[i]), "std": float(f.std[i]), "min": float(f.min[i]),
                      "max": float(f.max[i]), "features_far": int(far.size), "std_ratio": ratio},
            suggestion="Standardise each feature/channel with the training set's mean and std, e.g. "
            "`.map(vision.Normalize(mean, std))` for images (after `Rescale(1/255, 0)`) or (x - mean) / std for "
            "tabular columns; apply the same transform to the eval set.",
        ))
    return found
