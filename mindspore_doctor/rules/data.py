"""MSD301-MSD310: judge the statistics the data probes measured on a dataset sample.

Every rule is a pure function ``(DataSignals, DoctorConfig) -> list[Finding]``
over numpy numbers; nothing here touches MindSpore. Rules that need something
the probes could not measure raise ``CheckSkipped`` (reported as MSD002).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.data.signals import DatasetSignals, DataSignals, FeatureStats, LabelStats
from mindspore_doctor.findings import Finding
from mindspore_doctor.checks import CheckSkipped

MIN_ORDER_SAMPLES = 32
"""Fewer labels than this say nothing reliable about their order or their outliers."""
DENSE_IGNORE_IDS = (-100, 255)
"""Conventional ``ignore_index`` values in dense (segmentation, token) labels: never out of range."""

DataRule = Callable[[DataSignals, DoctorConfig], list[Finding]]


def _g(x: float) -> str:
    return f"{float(x):.4g}"


def _where(ds: DatasetSignals, column: str) -> dict[str, str]:
    return {"dataset": ds.name, "column": column}


def _datasets(s: DataSignals) -> list[DatasetSignals]:
    return [d for d in (s.train, s.eval) if d is not None]


def _class_ids(label: LabelStats | None) -> np.ndarray | None:
    """Finite, non-negative class ids of a class or one-hot label, else None.

    A negative id is never a class: it is an "unlabelled"/ignore marker or a bug, which MSD306 reports;
    counting it as a class would also report it as a rare or dominant class (MSD302/MSD307).
    """
    if label is None or label.kind not in ("class", "onehot"):
        return None
    ids = label.values[np.isfinite(label.values)].astype(np.int64)
    return ids[ids >= 0]


def nonfinite_input(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD301: NaN/Inf anywhere in a sampled input or label column."""
    found = []
    for ds in _datasets(s):
        for f in ds.features:
            bad = np.flatnonzero(f.nonfinite)
            if bad.size:
                total = int(f.nonfinite.sum())
                found.append(make_finding(
                    "MSD301",
                    f"{ds.name} input {f.feature_label(int(bad[0]))} holds {total} NaN/Inf values in "
                    f"{ds.samples} sampled samples ({bad.size} {f.feature_name}(s) affected).",
                    location=_where(ds, f.column),
                    evidence={"nonfinite_values": total, "features": bad[:20].tolist(), "samples": ds.samples},
                    suggestion="Find where the NaN/Inf come from (missing values, log/division in a .map()) and "
                    "impute or drop them before training; one NaN input turns the loss NaN.",
                ))
        if ds.label is not None and ds.label.nonfinite:
            found.append(make_finding(
                "MSD301",
                f"{ds.name} label `{ds.label.column}` holds {ds.label.nonfinite} NaN/Inf values in {ds.samples} sampled samples.",
                location=_where(ds, ds.label.column),
                evidence={"nonfinite_values": ds.label.nonfinite, "samples": ds.samples},
                suggestion="Drop or fix the samples with non-finite targets.",
            ))
    return found


def _mid_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with ties sharing their mean rank: ranking tied values by position would make a shuffled target that
    is mostly one value (95 % zeros = "missing") look sorted."""
    distinct, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return (first + (counts - 1) / 2.0)[inverse]


def _order_problem(ds: DatasetSignals, num_outputs: int | None, config: DoctorConfig) -> tuple[str, dict] | None:
    """Why the label order looks unshuffled, with its numbers; None when it looks random."""
    label = ds.label
    if label is None or label.kind not in ("class", "onehot", "regression"):
        return None
    values = label.values[np.isfinite(label.values)]
    n = values.size
    if n < MIN_ORDER_SAMPLES:
        return None
    if label.kind == "regression":
        if np.ptp(values) == 0:
            return None
        rho = float(np.corrcoef(np.arange(n), _mid_ranks(values))[0, 1])
        if abs(rho) <= config.shuffle_correlation:
            return None
        return (f"the target `{label.column}` is sorted along the stream (rank correlation with position {rho:+.2f} "
                f"over the first {n} samples)", {"rank_correlation": rho, "samples": n})
    classes, counts = np.unique(values, return_counts=True)
    if classes.size == 1:
        more_exist = (num_outputs or 0) > 1 and (ds.total_samples or 0) > n
        if not more_exist:
            return None
        return (f"the first {n} samples all have label {_g(classes[0])} although the network predicts "
                f"{num_outputs} classes", {"samples": n, "classes_seen": 1, "num_outputs": num_outputs})
    runs = 1 + int(np.count_nonzero(values[1:] != values[:-1]))
    p = counts / n
    expected = 1 + (n - 1) * (1 - float(np.sum(p * p)))
    if runs >= config.shuffle_runs_ratio * expected:
        return None
    return (f"labels of `{label.column}` come in long runs: {runs} runs in the first {n} samples where a shuffled "
            f"order gives about {expected:.0f} (mean run length {n / runs:.1f})",
            {"runs": runs, "expected_runs": round(expected, 1), "samples": n})


def data_not_shuffled(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD305: label order correlated with position in the training stream."""
    problem = _order_problem(s.train, s.network.num_outputs, config)
    if problem is None:
        return []
    why, evidence = problem
    trap = ""
    if s.train.shuffle_ignored:
        trap = (" Note: GeneratorDataset shuffles only random-access sources (with __getitem__ and __len__); "
                "over a Python generator, shuffle=True is silently ignored.")
    return [make_finding(
        "MSD305",
        f"Training data is not shuffled: {why}.{trap}",
        location=_where(s.train, s.train.label.column),
        evidence={**evidence, "shuffle_ignored_by_generator": s.train.shuffle_ignored},
        suggestion="Shuffle the training set: a random-access source with shuffle=True, or "
        "`.shuffle(buffer_size)` before `.batch()` with a buffer larger than the longest run.",
    )]


def class_imbalance(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD302: largest / smallest class count in the training sample above ``imbalance_ratio``."""
    ids = _class_ids(s.train.label)
    if ids is None or ids.size < MIN_ORDER_SAMPLES or _order_problem(s.train, s.network.num_outputs, config):
        return []  # an unshuffled stream's first samples say nothing about class frequencies
    classes, counts = np.unique(ids, return_counts=True)
    if classes.size < 2:
        return []
    ratio = counts.max() / counts.min()
    if ratio <= config.imbalance_ratio:
        return []
    big, small = int(classes[counts.argmax()]), int(classes[counts.argmin()])
    return [make_finding(
        "MSD302",
        f"Classes of `{s.train.label.column}` are imbalanced: class {big} has {int(counts.max())} samples and class {small} only "
        f"{int(counts.min())} in the {ids.size} sampled (ratio {ratio:.1f} > {_g(config.imbalance_ratio)}).",
        location=_where(s.train, s.train.label.column),
        evidence={"counts": dict(zip(classes.tolist(), counts.tolist())), "ratio": float(ratio)},
        suggestion="Re-balance: class weights in the loss, a WeightedRandomSampler, or over/under-sampling; "
        "judge the model with per-class metrics, not accuracy alone.",
    )]


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
        found.append(make_finding(
            "MSD303",
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
        found.append(make_finding(
            "MSD304",
            message,
            location=_where(s.train, f.column),
            evidence={"feature": i, "mean": float(f.mean[i]), "std": float(f.std[i]), "min": float(f.min[i]),
                      "max": float(f.max[i]), "features_far": int(far.size), "std_ratio": ratio},
            suggestion="Standardise each feature/channel with the training set's mean and std, e.g. "
            "`.map(vision.Normalize(mean, std))` for images (after `Rescale(1/255, 0)`) or (x - mean) / std for "
            "tabular columns; apply the same transform to the eval set.",
        ))
    return found


def label_out_of_range(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD306: class ids < 0 or >= the network's number of outputs (one-hot wider than the outputs)."""
    found = []
    num_outputs = s.network.num_outputs
    for ds in _datasets(s):
        label = ds.label
        if label is None or label.kind not in ("class", "onehot", "dense"):
            continue
        if label.kind == "onehot":
            if num_outputs is not None and label.width > num_outputs:
                found.append(make_finding(
                    "MSD306",
                    f"{ds.name} label `{label.column}` is one-hot over {label.width} classes but the network has "
                    f"{num_outputs} outputs.",
                    location=_where(ds, label.column),
                    evidence={"onehot_width": label.width, "num_outputs": num_outputs},
                    suggestion="Make the last layer's output size equal the number of classes.",
                ))
            continue
        ids = label.values[np.isfinite(label.values)]
        if label.kind == "dense":
            ids = ids[~np.isin(ids, DENSE_IGNORE_IDS)]
        if num_outputs is None and s.network.outputs_unknown_why and ids.size and ids.min() >= 0:
            raise CheckSkipped(s.network.outputs_unknown_why)
        upper = None if num_outputs is None else max(num_outputs, 2)  # one output: binary 0/1 labels
        too_big = ids >= upper if upper is not None else np.zeros(ids.shape, dtype=bool)
        bad = ids[(ids < 0) | too_big]
        if not bad.size:
            continue
        range_text = f"[0, {upper - 1}]" if upper is not None else "non-negative"
        outputs_text = f" for a network with {num_outputs} output(s)" if num_outputs is not None else ""
        marker = float(bad[0]) if bad[0] < 0 and np.all(bad == bad[0]) else None
        masked = marker is not None and (marker == s.network.ignore_index or s.network.custom_loss)
        found.append(make_finding(
            "MSD306",
            f"{ds.name} label `{label.column}` has {bad.size} sampled values outside {range_text}{outputs_text}: "
            f"min {_g(ids.min())}, max {_g(ids.max())}."
            + (f" All of them are {_g(marker)}: fine if it marks unlabelled samples your loss skips." if masked else ""),
            severity="info" if masked else None,
            location=_where(ds, label.column),
            evidence={"out_of_range": int(bad.size), "min": float(ids.min()), "max": float(ids.max()),
                      "num_outputs": num_outputs},
            suggestion="Remap labels to 0..num_classes-1 (e.g. 1-based ids minus 1) or widen the last layer; "
            "one-hot encodings of out-of-range ids are silently all zeros.",
        ))
    return found


def _capacity(s: DataSignals) -> tuple[dict[str, float], str]:
    """The network's trainable parameters with a weight-shared one (``shared_params``) counted 1 / positions
    ("effective_params": a convolution kernel is fitted at every position of every sample, a dense weight once
    per sample), as evidence; and a note on how they were counted ("" when nothing is shared)."""
    params = s.network.trainable_params or 0
    positions = max((f.positions for f in s.train.features), default=1)
    shared = min(s.network.shared_params, params)
    effective = params - shared + shared / positions
    note = "" if effective == params else (
        f" (the {shared:,} in convolutions, recurrent cells and embeddings counted once per position: "
        f"{positions:,} per sample, {effective:,.0f} in all)")
    return {"trainable_params": params, "shared_params": shared, "positions": positions,
            "effective_params": effective}, note


def too_few_samples(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD307: trainable parameters far above the sample count, or classes too small for the network's capacity.

    Capacity is measured in parameters per fitted value: a weight applied at every position (a convolution
    kernel at each pixel, a recurrent cell at each step) counts 1 / positions of a parameter.
    """
    if s.train.total_samples is None:
        raise CheckSkipped("the training set's size is unknown (a generator without __len__ that was not read to the end)")
    total = s.train.total_samples * s.train.shards  # the model sees every shard, one per rank
    found = []
    params = s.network.trainable_params
    capacity, counted = _capacity(s)
    effective = capacity["effective_params"]
    column = s.train.label.column if s.train.label else ""
    if params and effective / total > config.params_per_sample_max:
        found.append(make_finding(
            "MSD307",
            f"The network has {params:,} trainable parameters{counted} for {total:,} training samples "
            f"({effective / total:.0f} per sample > {_g(config.params_per_sample_max)}): it can memorise the data.",
            location=_where(s.train, column),
            evidence={**capacity, "samples": total, "params_per_sample": effective / total},
            suggestion="Collect more data, augment it, or use a smaller / pretrained model with regularisation.",
        ))
    ids = _class_ids(s.train.label)
    if not params or ids is None or not ids.size or _order_problem(s.train, s.network.num_outputs, config):
        return found  # without the network there is no capacity to judge a class's size against
    classes, counts = np.unique(ids, return_counts=True)
    estimated = counts / ids.size * total
    per_class = effective / max(classes.size, s.network.num_outputs or 0)
    few = np.flatnonzero((estimated < config.min_samples_per_class)
                         & (per_class / np.maximum(estimated, 1) > config.params_per_class_sample_max))
    if few.size:
        k = int(few[np.argmin(estimated[few])])
        found.append(make_finding(
            "MSD307",
            f"{few.size} of {classes.size} classes are small for the network's capacity: class {int(classes[k])} "
            f"has about {estimated[k]:.0f} of {total:,} training samples for {per_class:,.0f} trainable parameters "
            f"per class{counted} ({per_class / max(estimated[k], 1):.0f} per sample > "
            f"{_g(config.params_per_class_sample_max)}).",
            location={**_where(s.train, column), "classes": "small"},  # its own key beside the model-size finding
            evidence={**capacity, "classes_below": classes[few].tolist(),
                      "estimated_counts": dict(zip(classes.tolist(), np.round(estimated).tolist())),
                      "samples": total, "params_per_class": per_class},
            suggestion="Collect or augment samples of the rare classes, merge classes, or use a smaller / "
            "pretrained model.",
        ))
    return found


def _paired_features(s: DataSignals) -> list[tuple[FeatureStats, FeatureStats]]:
    if s.eval is None:
        return []
    by_column = {f.column: f for f in s.eval.features}
    return [(t, by_column[t.column]) for t in s.train.features
            if t.column in by_column and t.kind != "tokens" and by_column[t.column].num_features == t.num_features]


def _kurtosis(f: FeatureStats) -> np.ndarray:
    """Per-feature kurtosis of the values (3 where only per-sample means were kept: treated as normal)."""
    if not f.rows_are_values or f.per_sample.shape[0] < 2:
        return np.full(f.num_features, 3.0)
    with np.errstate(all="ignore"):
        standard = (f.per_sample - f.mean) / np.where(f.std > 0, f.std, np.inf)
        return np.nan_to_num(np.nanmean(standard ** 4, axis=0), nan=3.0)


def train_eval_mismatch(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD308: eval feature/channel means or stds far from the train ones (different preprocessing).

    Each difference must exceed its threshold by ``mismatch_noise_sigmas`` standard errors of its own estimate:
    the std of a feature that is non-zero in a handful of samples is mostly noise.
    """
    found = []
    pairs = _paired_features(s)
    n_t, n_e = (max(s.train.samples, 1), max(s.eval.samples, 1)) if pairs else (1, 1)
    k = config.mismatch_noise_sigmas
    for t, e in pairs:
        scale = np.where(t.std > 0, t.std, np.where(e.std > 0, e.std, np.inf))
        shift = np.abs(e.mean - t.mean) / scale
        shift_noise = np.sqrt(t.std ** 2 / n_t + e.std ** 2 / n_e) / scale
        with np.errstate(all="ignore"):
            both = (t.std > 0) & (e.std > 0)
            std_ratio = np.where(both, e.std / t.std, 1.0)
            log_noise = np.sqrt((_kurtosis(t) - 1) / (4 * n_t) + (_kurtosis(e) - 1) / (4 * n_e))
        off = shift > config.mismatch_shift + k * np.nan_to_num(shift_noise)
        off |= np.abs(np.log(std_ratio)) > np.log(config.mismatch_std_ratio) + k * np.where(both, log_noise, 0.0)
        off &= np.isfinite(shift) | (std_ratio != 1.0)
        bad = np.flatnonzero(off)
        if not bad.size:
            continue
        i = int(bad[np.argmax(np.nan_to_num(shift[bad], posinf=0) + np.abs(np.log(std_ratio[bad])))])
        found.append(make_finding(
            "MSD308",
            f"Train and eval `{t.column}` differ: {t.feature_label(i)} has mean {_g(t.mean[i])} / std {_g(t.std[i])} "
            f"in train but {_g(e.mean[i])} / {_g(e.std[i])} in eval ({bad.size} of {t.num_features} {t.feature_name}s differ).",
            location=_where(s.eval, t.column),
            evidence={"feature": i, "train_mean": float(t.mean[i]), "train_std": float(t.std[i]),
                      "eval_mean": float(e.mean[i]), "eval_std": float(e.std[i]), "features_differing": int(bad.size)},
            suggestion="Apply exactly the same deterministic preprocessing (resize, rescale, normalise with the "
            "train statistics) to train and eval; only random augmentation should differ.",
        ))
    return found


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
    return [make_finding(
        "MSD309",
        f"{matched} of {s.eval.hashes.size} sampled eval inputs also appear, byte for byte, in the "
        f"{s.train.hashes.size} sampled training inputs.{repeats}{partial}",
        location={"dataset": "eval"},
        evidence={"shared": matched, "eval_sampled": int(s.eval.hashes.size), "train_sampled": int(s.train.hashes.size),
                  "train_total": s.train.total_samples, "train_repeat_rate": natural, "expected_shared": expected},
        suggestion="Split train and eval by unique sample (deduplicate first; split by subject/source when "
        "samples are related) so eval measures generalisation, not memory.",
    )]


def constant_feature(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD310: a feature (tabular) or channel (image) with a single value over the training sample."""
    found = []
    if s.train.samples < 2:
        return found
    for f in s.train.features:
        constant = np.flatnonzero((f.min == f.max) & (f.nonfinite == 0))
        if not constant.size:
            continue
        names = ", ".join(str(i) for i in constant[:10]) + (", ..." if constant.size > 10 else "")
        plural = constant.size > 1
        label = f"`{f.column}`" if f.layout == "" else f"`{f.column}` {f.feature_name}{'s' if plural else ''} {names}"
        value = float(f.min[constant[0]])
        whole = s.train.total_samples is not None and s.train.samples >= s.train.total_samples
        # A sparse/one-hot column can be all zeros in a partial sample; a constant channel, a non-zero
        # constant or a constant over the whole training set is a broken pipeline.
        certain = f.layout in ("CHW", "HWC") or value != 0.0 or whole
        found.append(make_finding(
            "MSD310",
            f"{label} {'are' if plural else 'is'} constant over {'all ' if whole else ''}{s.train.samples} "
            f"{'training' if whole else 'sampled'} samples (value {_g(value)}); {constant.size} of {f.num_features} "
            f"{f.feature_name}s carry no information.",
            severity="warning" if certain else "info",
            location=_where(s.train, f.column),
            evidence={"features": constant[:50].tolist(), "value": value, "samples": s.train.samples},
            suggestion="Drop constant features (or check the pipeline that produced them: a failed join, a "
            "channel zeroed by a transform); standardising them divides by a zero std.",
        ))
    return found


def label_in_inputs(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD205 (before training): an input feature is the regression target itself, or an affine copy of it.

    The loss then collapses as soon as the network learns to read that column; judged on the data it is
    certain before the first step, whatever the network.
    """
    label = s.train.label
    if label is None or label.kind != "regression":
        return []
    found = []
    for f in s.train.features:
        rows = f.per_sample
        if not f.rows_are_values or rows.shape[0] != label.values.size:
            continue
        keep = np.isfinite(label.values) & np.isfinite(rows).all(axis=1)
        if keep.sum() < MIN_ORDER_SAMPLES or np.ptp(label.values[keep]) == 0:
            continue
        target = label.values[keep] - label.values[keep].mean()
        x = rows[keep] - rows[keep].mean(axis=0)
        with np.errstate(all="ignore"):
            r = (x * target[:, None]).sum(axis=0) / np.sqrt((x ** 2).sum(axis=0) * (target ** 2).sum())
        residual = np.sqrt(np.clip(1.0 - np.nan_to_num(r) ** 2, 0.0, None))
        copies = np.flatnonzero(residual <= config.label_copy_tolerance)
        if not copies.size:
            continue
        j = int(copies[0])
        found.append(make_finding(
            "MSD205",
            f"Input {f.feature_label(j)} is the target `{label.column}` itself (an affine copy: correlation "
            f"{r[j]:+.6f} over {int(keep.sum())} sampled rows): the network can read the answer, so the loss will "
            "collapse and the model is useless once the target is unknown.",
            location=_where(s.train, f.column),
            evidence={"feature": j, "correlation": float(r[j]), "residual": float(residual[j]),
                      "samples": int(keep.sum()), "features": copies[:20].tolist(), "source": "data"},
            suggestion=f"Drop the target column from the inputs (e.g. features = table[:, :-1]); check every "
            f"feature derived from `{label.column}`.",
        ))
    return found


RULES: list[tuple[str, DataRule]] = [
    ("MSD205", label_in_inputs),
    ("MSD301", nonfinite_input),
    ("MSD302", class_imbalance),
    ("MSD303", input_outliers),
    ("MSD304", input_not_normalized),
    ("MSD305", data_not_shuffled),
    ("MSD306", label_out_of_range),
    ("MSD307", too_few_samples),
    ("MSD308", train_eval_mismatch),
    ("MSD309", train_eval_leakage),
    ("MSD310", constant_feature),
]
"""(code, rule): the data checks in catalog order, the one training-signal code they can prove early first."""
