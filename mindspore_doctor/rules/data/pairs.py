"""MSD308 and MSD309: the eval set against the training set, a different distribution or the same samples.

These are the only rules the eval set is sampled for (``PAIR_RULES`` in the package).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mindspore_doctor.data.signals import DataSignals, FeatureStats
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING
from mindspore_doctor.rules.data.common import _g, _where

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _paired_features(s: DataSignals) -> list[tuple[FeatureStats, FeatureStats]]:
    if s.eval is None:
        return []
    by_column = {f.column: f for f in s.eval.features}
    return [(t, by_column[t.column]) for t in s.train.features
            if t.column in by_column and t.kind != "tokens" and by_column[t.column].num_features == t.num_features]


def feature_kurtosis(f: FeatureStats) -> np.ndarray:
    """Per-feature kurtosis of the values (3 where only per-sample means were kept: treated as normal)."""
    if not f.rows_are_values or f.per_sample.shape[0] < 2:
        return np.full(f.num_features, 3.0)
    with np.errstate(all="ignore"):
        standard = (f.per_sample - f.mean) / np.where(f.std > 0, f.std, np.inf)
        return np.nan_to_num(np.nanmean(standard ** 4, axis=0), nan=3.0)


UNITS_MIN_STD_RATIO = 1.5
"""MSD308, other units: the eval/train spread ratio (either way) at least this far from 1 (°C -> °F is 1.8,
kg -> lb 2.2, cm -> in 2.54; a ratio of 3 or more is caught by ``mismatch_std_ratio`` alone)."""
UNITS_MIN_SHIFT = 0.5
"""MSD308, other units: the eval median at least this many train (robust) stds from the train median."""
UNITS_SIGMAS = 5.0
"""MSD308, other units: the spread ratio and the median shift together beyond this many standard errors of
their estimates (the root of the sum of their squared z-scores, each at least ``UNITS_EACH_SIGMAS``). A
natural split gets there on one feature with a chance of ~4e-6; a change of units moves both at once."""
UNITS_EACH_SIGMAS = 3.0
"""MSD308, other units: the least z-score of each of the two (a large shift alone is the other test's)."""
UNITS_MIN_EVAL_SAMPLES = 30
"""A smaller eval sample of a skewed feature often misses its tail: its mean and std drop together, as if
rescaled. Below this many eval samples only the large-difference test runs."""


def _other_units(t: FeatureStats, e: FeatureStats, std_ratio: np.ndarray) -> np.ndarray:
    """Per feature: the eval values look like the train values in other units (an affine change).

    Judged on medians and median absolute deviations, which a unit change moves and one outlier does not (a
    heavy-tailed feature's std and mean jump together when a small eval sample holds one tail value, which
    looks like a rescaling to mean/std), against their standard errors under "same distribution"; the caller
    also wants the mean and std moved as much. Tabular values only (an image channel's per-sample means are
    not its values) and eval samples of at least ``UNITS_MIN_EVAL_SAMPLES``.
    """
    no = np.zeros(t.num_features, dtype=bool)
    n_t, n_e = t.per_sample.shape[0], e.per_sample.shape[0]
    if not (t.rows_are_values and e.rows_are_values) or n_e < UNITS_MIN_EVAL_SAMPLES or n_t < UNITS_MIN_EVAL_SAMPLES:
        return no
    with np.errstate(all="ignore"):
        med_t, med_e = np.nanmedian(t.per_sample, axis=0), np.nanmedian(e.per_sample, axis=0)
        mad_t = np.nanmedian(np.abs(t.per_sample - med_t), axis=0)
        mad_e = np.nanmedian(np.abs(e.per_sample - med_e), axis=0)
        spread = np.sqrt(1 / n_t + 1 / n_e)
        shift = np.abs(med_e - med_t) / (1.4826 * mad_t)
        z_shift = shift / (np.sqrt(np.pi / 2) * spread)  # the median's standard error: 1.25 sigma / sqrt(n)
        log_ratio = np.log(mad_e / mad_t)
        z_ratio = np.abs(log_ratio) / (1.166 * spread)  # log MAD's standard error: 1.17 / sqrt(n)
        same_way = np.sign(log_ratio) == np.sign(np.log(std_ratio))
        units = (mad_t > 0) & (mad_e > 0) & same_way & (np.abs(log_ratio) >= np.log(UNITS_MIN_STD_RATIO))
        units &= (shift >= UNITS_MIN_SHIFT) & (z_shift >= UNITS_EACH_SIGMAS) & (z_ratio >= UNITS_EACH_SIGMAS)
        units &= np.hypot(z_shift, z_ratio) >= UNITS_SIGMAS
    return np.where(np.isfinite(shift) & np.isfinite(log_ratio), units, no)


MISMATCH_SHIFT = Option(
    "mismatch_shift", 1.0,
    "MSD308: eval mean off the train mean by more than this many train stds: mismatch.",
)
MISMATCH_STD_RATIO = Option(
    "mismatch_std_ratio", 3.0,
    "MSD308: eval/train std ratio beyond this factor (either way): mismatch.",
)
MISMATCH_NOISE_SIGMAS = Option(
    "mismatch_noise_sigmas", 3.0,
    "MSD308: a mean shift or std ratio must also exceed its threshold by this many standard errors of its own "
    "estimate (a sparse feature's std, measured on a few hundred samples, is noisy).",
)
TRAIN_EVAL_MISMATCH = Rule(
    "MSD308", "train-eval-mismatch", WARNING,
    "train and eval inputs differ in distribution",
    options=(MISMATCH_SHIFT, MISMATCH_STD_RATIO, MISMATCH_NOISE_SIGMAS),
)


@TRAIN_EVAL_MISMATCH.judge
def train_eval_mismatch(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD308: eval feature/channel means or stds far from the train ones (different preprocessing).

    Two tests per feature, each against the standard errors of its own estimates (the std of a feature that is
    non-zero in a handful of samples is mostly noise, and a small eval set has wide ones):

    - a large difference: the mean more than ``mismatch_shift`` train stds off, or the std more than
      ``mismatch_std_ratio`` times larger or smaller, by ``mismatch_noise_sigmas`` standard errors;
    - other units: an affine change (°F for °C, lb for kg) rescales the std by 1.5-3x and moves the mean
      with it; both beyond ``UNITS_SIGMAS`` standard errors at once.
    """
    found = []
    pairs = _paired_features(s)
    n_t, n_e = (max(s.train.samples, 1), max(s.eval.samples, 1)) if pairs else (1, 1)
    k = config.mismatch_noise_sigmas
    for t, e in pairs:
        scale = np.where(t.std > 0, t.std, np.where(e.std > 0, e.std, np.inf))
        shift = np.abs(e.mean - t.mean) / scale
        shift_noise = np.nan_to_num(np.sqrt(t.std ** 2 / n_t + e.std ** 2 / n_e) / scale)
        with np.errstate(all="ignore"):
            both = (t.std > 0) & (e.std > 0)
            std_ratio = np.where(both, e.std / t.std, 1.0)
            log_ratio = np.abs(np.log(std_ratio))
            log_noise = np.where(both, np.sqrt((feature_kurtosis(t) - 1) / (4 * n_t)
                                               + (feature_kurtosis(e) - 1) / (4 * n_e)), 0.0)
        off = shift > config.mismatch_shift + k * shift_noise
        off |= log_ratio > np.log(config.mismatch_std_ratio) + k * log_noise
        units = _other_units(t, e, std_ratio) & (log_ratio >= np.log(UNITS_MIN_STD_RATIO)) & (shift >= UNITS_MIN_SHIFT)
        off = (off | units) & (np.isfinite(shift) | (std_ratio != 1.0))
        bad = np.flatnonzero(off)
        if not bad.size:
            continue
        i = int(bad[np.argmax(np.nan_to_num(shift[bad], posinf=0) + log_ratio[bad])])
        affine = ""
        if both[i]:
            a = float(std_ratio[i])
            b = float(e.mean[i] - a * t.mean[i])
            affine = f"; eval ≈ {a:.3g} x train {'+' if b >= 0 else '-'} {abs(b):.3g}"
        found.append(TRAIN_EVAL_MISMATCH.finding(
            f"Train and eval `{t.column}` differ: {t.feature_label(i)} has mean {_g(t.mean[i])} / std {_g(t.std[i])} "
            f"in train but {_g(e.mean[i])} / {_g(e.std[i])} in eval ({_g(shift[i])} train stds apart, std ratio "
            f"{_g(std_ratio[i])}; {n_t} train and {n_e} eval samples{affine}) ({bad.size} of {t.num_features} "
            f"{t.feature_name}s differ).",
            location=_where(s.eval, t.column),
            evidence={"feature": i, "train_mean": float(t.mean[i]), "train_std": float(t.std[i]),
                      "eval_mean": float(e.mean[i]), "eval_std": float(e.std[i]), "features_differing": int(bad.size),
                      "shift_train_stds": float(shift[i]), "shift_standard_error": float(shift_noise[i]),
                      "std_ratio": float(std_ratio[i]), "log_std_ratio_standard_error": float(log_noise[i]),
                      "features": bad[:50].tolist()},
            suggestion="Apply exactly the same deterministic preprocessing (resize, rescale, normalise with the "
            "train statistics) to train and eval, on data in the same units (a column exported in °F instead of "
            "°C, or g instead of kg, rescales and shifts it); only random augmentation should differ.",
        ))
    return found


LEAKAGE_MIN_MATCHES = Option(
    "leakage_min_matches", 1,
    "MSD309: sampled eval samples byte-identical to sampled train samples needed to report leakage.",
)
LEAKAGE_NOISE_SIGMAS = Option(
    "leakage_noise_sigmas", 3.0,
    "MSD309: eval samples found in the training sample must exceed what the training set's own duplicate rate "
    "predicts by this many standard deviations (short token sequences repeat naturally).",
)
TRAIN_EVAL_LEAKAGE = Rule(
    "MSD309", "train-eval-leakage", ERROR,
    "the same samples in train and eval",
    options=(LEAKAGE_MIN_MATCHES, LEAKAGE_NOISE_SIGMAS),
)


@TRAIN_EVAL_LEAKAGE.judge
def train_eval_leakage(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD309: more eval samples byte-identical to training samples than the training set's own repeats explain.

    Short token sequences or coarse discrete rows repeat by nature: the rate at which a training sample repeats
    another training sample is what a fresh eval sample is expected to match too.
    """
    if s.eval is None or not s.eval.hashes.size or not s.train.hashes.size:
        return []
    train_hashes, train_counts = np.unique(s.train.hashes, return_counts=True)
    matched = int(np.isin(s.eval.hashes, train_hashes).sum())
    natural = float(train_counts[train_counts > 1].sum()) / s.train.hashes.size
    expected = natural * s.eval.hashes.size
    noise = config.leakage_noise_sigmas * np.sqrt(expected * (1.0 - natural))
    if matched < config.leakage_min_matches or matched <= expected + noise:
        return []
    partial = ""
    if (s.train.total_samples or 0) > s.train.samples:
        partial = (f" Only {s.train.samples} of {s.train.total_samples:,} training samples were compared, "
                   "so the real overlap is likely larger.")
    repeats = (f" The training sample repeats itself at a rate of {natural:.1%}, which explains about "
               f"{expected:.0f}." if natural else "")
    return [TRAIN_EVAL_LEAKAGE.finding(
        f"{matched} of {s.eval.hashes.size} sampled eval inputs also appear, byte for byte, in the "
        f"{s.train.hashes.size} sampled training inputs.{repeats}{partial}",
        location={"dataset": "eval"},
        evidence={"shared": matched, "eval_sampled": int(s.eval.hashes.size), "train_sampled": int(s.train.hashes.size),
                  "train_total": s.train.total_samples, "train_repeat_rate": natural, "expected_shared": expected},
        suggestion="Split train and eval by unique sample (deduplicate first; split by subject/source when "
        "samples are related) so eval measures generalisation, not memory.",
    )]
