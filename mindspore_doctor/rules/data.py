"""MSD301-MSD310: judge the statistics the data probes measured on a dataset sample.

Every rule is a pure function ``(DataSignals, DoctorConfig) -> list[Finding]``
over numpy numbers; nothing here touches MindSpore. Rules that need something
the probes could not measure raise ``CheckSkipped`` (reported as MSD002).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from mindspore_doctor.data.signals import DatasetSignals, DataSignals, FeatureStats, LabelStats
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, INFO, Option, Rule, WARNING
from mindspore_doctor.rules.training import LOSS_SUSPICIOUSLY_LOW
from mindspore_doctor.rule import CheckSkipped

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

# --- definitions: the options these rules read, and the rules ----------------------------------------

IMBALANCE_RATIO = Option(
    "imbalance_ratio", 10.0,
    "MSD302: largest / smallest class count above this is imbalanced.",
)
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
SHUFFLE_RUNS_RATIO = Option(
    "shuffle_runs_ratio", 0.5,
    "MSD305: fewer label runs than this fraction of those expected in random order: not shuffled.",
)
SHUFFLE_CORRELATION = Option(
    "shuffle_correlation", 0.5,
    "MSD305: |rank correlation| between a regression target and its position above this: sorted.",
)
PARAMS_PER_SAMPLE_MAX = Option(
    "params_per_sample_max", 1000.0,
    "MSD307: trainable parameters per training sample above this: too few samples. A weight-shared parameter "
    "(convolution, recurrent cell, embedding) counts 1 / the input's positions per sample (H x W, steps): it is "
    "fitted at each, so RegNet's 2.3M parameters on 1024 32x32 images count 24 per sample, not 2263.",
)
MIN_SAMPLES_PER_CLASS = Option(
    "min_samples_per_class", 100,
    "MSD307: a class with fewer (estimated) training samples than this may have too few (see "
    "``params_per_class_sample_max``).",
)
PARAMS_PER_CLASS_SAMPLE_MAX = Option(
    "params_per_class_sample_max", 100.0,
    "MSD307: a class below ``min_samples_per_class`` is too small only for a network with more than this many "
    "trainable parameters per class (params / classes) per sample of that class: wine's 36-sample class under a "
    "547-parameter MLP (5) is normal, 40 samples per class under a 540k-parameter MLP (3375) are not.",
)
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
LEAKAGE_MIN_MATCHES = Option(
    "leakage_min_matches", 1,
    "MSD309: sampled eval samples byte-identical to sampled train samples needed to report leakage.",
)
LEAKAGE_NOISE_SIGMAS = Option(
    "leakage_noise_sigmas", 3.0,
    "MSD309: eval samples found in the training sample must exceed what the training set's own duplicate rate "
    "predicts by this many standard deviations (short token sequences repeat naturally).",
)

NONFINITE_INPUT = Rule(
    "MSD301", "nonfinite-input", ERROR,
    "NaN/Inf in inputs or labels",
)
CLASS_IMBALANCE = Rule(
    "MSD302", "class-imbalance", WARNING,
    "largest/smallest class count ratio too high",
    options=(IMBALANCE_RATIO,),
)
INPUT_OUTLIERS = Rule(
    "MSD303", "input-outliers", INFO,
    "samples far outside the bulk",
    options=(OUTLIER_Z, OUTLIER_GAP),
)
INPUT_NOT_NORMALIZED = Rule(
    "MSD304", "input-not-normalized", WARNING,
    "inputs not normalised",
    options=(NORMALIZED_MAX, SCALE_RATIO_MAX, SPARSE_MODE_FRACTION),
)
DATA_NOT_SHUFFLED = Rule(
    "MSD305", "data-not-shuffled", WARNING,
    "label order correlated with position",
    options=(SHUFFLE_RUNS_RATIO, SHUFFLE_CORRELATION),
)
LABEL_OUT_OF_RANGE = Rule(
    "MSD306", "label-out-of-range", ERROR,
    "labels outside the model output range",
)
TOO_FEW_SAMPLES = Rule(
    "MSD307", "too-few-samples", WARNING,
    "too few samples for the model size",
    options=(PARAMS_PER_SAMPLE_MAX, MIN_SAMPLES_PER_CLASS, PARAMS_PER_CLASS_SAMPLE_MAX),
)
TRAIN_EVAL_MISMATCH = Rule(
    "MSD308", "train-eval-mismatch", WARNING,
    "train and eval inputs differ in distribution",
    options=(MISMATCH_SHIFT, MISMATCH_STD_RATIO, MISMATCH_NOISE_SIGMAS),
)
TRAIN_EVAL_LEAKAGE = Rule(
    "MSD309", "train-eval-leakage", ERROR,
    "the same samples in train and eval",
    options=(LEAKAGE_MIN_MATCHES, LEAKAGE_NOISE_SIGMAS),
)
CONSTANT_FEATURE = Rule(
    "MSD310", "constant-feature", WARNING,
    "a feature or channel with a single value",
)

RULES = (NONFINITE_INPUT, CLASS_IMBALANCE, INPUT_OUTLIERS, INPUT_NOT_NORMALIZED, DATA_NOT_SHUFFLED, LABEL_OUT_OF_RANGE, TOO_FEW_SAMPLES, TRAIN_EVAL_MISMATCH, TRAIN_EVAL_LEAKAGE, CONSTANT_FEATURE)

MIN_ORDER_SAMPLES = 32
"""Fewer labels than this say nothing reliable about their order or their outliers."""
DENSE_IGNORE_IDS = (-100, 255)
"""Conventional ``ignore_index`` values in dense (segmentation, token) labels: never out of range."""

DataRule = Callable[[DataSignals, "DoctorConfig"], list[Finding]]


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
                found.append(NONFINITE_INPUT.finding(
                    f"{ds.name} input {f.feature_label(int(bad[0]))} holds {total} NaN/Inf values in "
                    f"{ds.samples} sampled samples ({bad.size} {f.feature_name}(s) affected).",
                    location=_where(ds, f.column),
                    evidence={"nonfinite_values": total, "features": bad[:20].tolist(), "samples": ds.samples},
                    suggestion="Find where the NaN/Inf come from (missing values, log/division in a .map()) and "
                    "impute or drop them before training; one NaN input turns the loss NaN.",
                ))
        if ds.label is not None and ds.label.nonfinite:
            found.append(NONFINITE_INPUT.finding(
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
    return [DATA_NOT_SHUFFLED.finding(
        f"Training data is not shuffled: {why}.{trap}",
        location=_where(s.train, s.train.label.column),
        evidence={**evidence, "shuffle_ignored_by_generator": s.train.shuffle_ignored},
        suggestion="Shuffle the training set: a random-access source with shuffle=True, or "
        "`.shuffle(buffer_size)` before `.batch()` with a buffer larger than the longest run.",
    )]


def class_imbalance(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD302: largest / smallest class count in the training sample above ``imbalance_ratio``.

    A binary target learned by a single output (a probability: click-through, risk) is ``info``: its
    imbalance is the base rate the model must learn, and re-weighting it would bias the predicted probability;
    a classifier deciding by argmax over class scores ignores the rare class, a warning.
    """
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
    probability = classes.size == 2 and s.network.num_outputs == 1
    return [CLASS_IMBALANCE.finding(
        f"Classes of `{s.train.label.column}` are imbalanced: class {big} has {int(counts.max())} samples and class {small} only "
        f"{int(counts.min())} in the {ids.size} sampled (ratio {ratio:.1f} > {_g(config.imbalance_ratio)})."
        + (f" The network predicts it with one output, a probability: a base rate of {counts.min() / ids.size:.1%} "
           "is what it learns, not a defect." if probability else ""),
        severity="info" if probability else None,
        location=_where(s.train, s.train.label.column),
        evidence={"counts": dict(zip(classes.tolist(), counts.tolist())), "ratio": float(ratio),
                  "single_output": bool(probability)},
        suggestion="Judge a rare-event probability with AUC / log-loss / precision-recall, not accuracy; re-weight "
        "only to make decisions at a threshold, and then re-calibrate." if probability else
        "Re-balance: class weights in the loss, a WeightedRandomSampler, or over/under-sampling; "
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
                found.append(LABEL_OUT_OF_RANGE.finding(
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
        found.append(LABEL_OUT_OF_RANGE.finding(
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
    if s.train.total_samples == 1:
        # a whole graph (its nodes are the samples, their labels often outside the pipeline) or a full batch
        raise CheckSkipped("the training set is one element (a whole graph or one full batch): its samples cannot be "
                           "counted from the pipeline")
    total = s.train.total_samples * s.train.shards  # the model sees every shard, one per rank
    found = []
    params = s.network.trainable_params
    capacity, counted = _capacity(s)
    effective = capacity["effective_params"]
    column = s.train.label.column if s.train.label else ""
    if params and effective / total > config.params_per_sample_max:
        found.append(TOO_FEW_SAMPLES.finding(
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
        found.append(TOO_FEW_SAMPLES.finding(
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
            log_noise = np.where(both, np.sqrt((_kurtosis(t) - 1) / (4 * n_t) + (_kurtosis(e) - 1) / (4 * n_e)), 0.0)
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


ONE_VOCABULARY_OVERLAP = 0.5
"""An integer vector is a sequence of ids from one vocabulary when its positions each span at least this
fraction of the range all its positions span together (tokens: ~0.9); an integer table's columns (an age, a
count, an income) or a CTR row's per-field id ranges each span a small part of it."""


def _varying(f: FeatureStats) -> np.ndarray:
    return (f.max > f.min) | (f.nonfinite > 0)


def _one_vocabulary(f: FeatureStats) -> bool:
    varying = np.flatnonzero(_varying(f))
    if varying.size < 2:
        return False
    span = float(f.max[varying].max() - f.min[varying].min())
    return span > 0 and float(np.median(f.max[varying] - f.min[varying])) / span >= ONE_VOCABULARY_OVERLAP


def _id_value_pairs(features: list[FeatureStats]) -> list[tuple[FeatureStats, FeatureStats]]:
    """(ids, values) column pairs of a CTR-style input: same width, and at some position one of the two is fixed
    by design while the other varies (a numeric field keeps its id, a one-hot field its value 1)."""
    pairs = []
    for ids in features:
        if ids.kind != "tokens" or not ids.rows_are_values:
            continue
        for values in features:
            if values is ids or values.kind != "tabular" or values.num_features != ids.num_features:
                continue
            if (_varying(ids) != _varying(values)).any():
                pairs.append((ids, values))
    return pairs


def _id_evidence(f: FeatureStats, s: DataSignals, paired: set[str]) -> str:
    """Why an integer column holds ids (looked up, not measured), or "" when nothing says so."""
    if f.kind != "tokens" or not f.rows_are_values or f.layout == "":
        return ""
    if f.column in paired:
        return "field ids paired with a value column"
    if s.network.embeddings:
        return "ids the network's embedding looks up"
    return "ids from one vocabulary" if _one_vocabulary(f) else ""


def _position_text(f: FeatureStats, j: int) -> str:
    if j == 0:
        return f"Every sequence of `{f.column}` starts with"
    if j == f.num_features - 1:
        return f"Every sequence of `{f.column}` ends with"
    return f"Every sequence of `{f.column}` has, at position {j},"


def _suspicious_constant_id(f: FeatureStats, constant: np.ndarray, s: DataSignals) -> Finding | None:
    """A position of an id column that always holds the same id is by design (a BOS/CLS/SEP marker, a numeric
    field's fixed id, padding) unless the id sits at the rare end of the vocabulary, above every id the other
    positions hold: where a hand-built vocabulary appends its unknown-word id (``vocab.get(word, len(vocab))``),
    which a tokeniser missing every text's first word puts at position 0. Special ids are conventionally the
    smallest (and a ``padding_idx`` is known to be special)."""
    varying = _varying(f)
    if not varying.any():
        return None
    others = f.per_sample[:, varying]
    largest_other = float(np.nanmax(others))
    suspects = [int(j) for j in constant
                if f.min[j] > largest_other and int(f.min[j]) not in s.network.padding_ids]
    if not suspects:
        return None
    j = suspects[0]
    value = int(f.min[j])
    return CONSTANT_FEATURE.finding(
        f"{_position_text(f, j)} id {value} over {s.train.samples} sampled samples, and {value} is above every id "
        f"at the other positions (largest there {largest_other:.0f}): the rare end of the vocabulary, where a "
        f"hand-built vocabulary appends its unknown-word id. A tokeniser that misses the same word of every text "
        f"(case, punctuation, a marker not in the vocabulary) produces this; special ids (BOS/CLS) are normally "
        f"among the smallest.",
        severity="warning",
        location=_where(s.train, f.column),
        evidence={"features": suspects[:50], "value": value, "largest_other_id": largest_other,
                  "samples": s.train.samples, "kind": "ids"},
        suggestion="Decode a few sequences back to words: if this is the unknown-word id, fix the tokeniser "
        "(lower-casing, punctuation, a BOS marker missing from the vocabulary); if it is a marker you add on "
        "purpose, give it a small reserved id or ignore MSD310 for this column.",
    )


def _constant_values(f: FeatureStats, s: DataSignals, constant: np.ndarray) -> Finding:
    """The finding for constant features of a quantity column (tabular, image)."""
    names = ", ".join(str(i) for i in constant[:10]) + (", ..." if constant.size > 10 else "")
    plural = constant.size > 1
    label = f"`{f.column}`" if f.layout == "" else f"`{f.column}` {f.feature_name}{'s' if plural else ''} {names}"
    value = float(f.min[constant[0]])
    whole = s.train.total_samples is not None and s.train.samples >= s.train.total_samples
    # A sparse/one-hot column can be all zeros in a partial sample; a constant channel, a non-zero
    # constant or a constant over the whole training set is a broken pipeline.
    certain = f.layout in ("CHW", "HWC") or value != 0.0 or whole
    return CONSTANT_FEATURE.finding(
        f"{label} {'are' if plural else 'is'} constant over {'all ' if whole else ''}{s.train.samples} "
        f"{'training' if whole else 'sampled'} samples (value {_g(value)}); {constant.size} of {f.num_features} "
        f"{f.feature_name}s carry no information.",
        severity="warning" if certain else "info",
        location=_where(s.train, f.column),
        evidence={"features": constant[:50].tolist(), "value": value, "samples": s.train.samples},
        suggestion="Drop constant features (or check the pipeline that produced them: a failed join, a "
        "channel zeroed by a transform); standardising them divides by a zero std.",
    )


def constant_feature(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD310: a feature (tabular) or channel (image) with a single value over the training sample.

    Id columns are judged as ids: a fixed id at a fixed position is by design (see
    ``_suspicious_constant_id``), and so is the fixed value 1 of a one-hot field beside its varying id.
    """
    found = []
    if s.train.samples < 2:
        return found
    pairs = _id_value_pairs(s.train.features)
    fixed_by_design: dict[str, np.ndarray] = {}  # column -> positions whose partner column varies there
    for ids, values in pairs:
        fixed_by_design[ids.column] = fixed_by_design.get(ids.column, False) | _varying(values)
        fixed_by_design[values.column] = fixed_by_design.get(values.column, False) | _varying(ids)
    paired = {ids.column for ids, _ in pairs}
    for f in s.train.features:
        is_constant = (f.min == f.max) & (f.nonfinite == 0)
        constant = np.flatnonzero(is_constant & ~fixed_by_design.get(f.column, np.zeros_like(is_constant)))
        if not constant.size:
            continue
        if _id_evidence(f, s, paired) and _varying(f).any():
            finding = _suspicious_constant_id(f, constant, s)
            found.extend([finding] if finding else [])
            continue
        found.append(_constant_values(f, s, constant))
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
        found.append(LOSS_SUSPICIOUSLY_LOW.finding(
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


JUDGES: list[tuple[str, DataRule]] = [
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
