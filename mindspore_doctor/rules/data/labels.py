"""MSD302, MSD305 and MSD306: what the labels say, their class counts, their order along the stream, their range.

The first samples of an unshuffled stream say nothing about class frequencies: ``_order_problem`` tells the class
rules here and in ``size.py`` to keep quiet then.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mindspore_doctor.data.signals import DatasetSignals, DataSignals
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import CheckSkipped, ERROR, Option, Rule, WARNING
from mindspore_doctor.rules.data.common import MIN_ORDER_SAMPLES, _class_ids, _datasets, _g, _where

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


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


IMBALANCE_RATIO = Option(
    "imbalance_ratio", 10.0,
    "MSD302: largest / smallest class count above this is imbalanced.",
)
CLASS_IMBALANCE = Rule(
    "MSD302", "class-imbalance", WARNING,
    "largest/smallest class count ratio too high",
    options=(IMBALANCE_RATIO,),
)


@CLASS_IMBALANCE.judge
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


SHUFFLE_RUNS_RATIO = Option(
    "shuffle_runs_ratio", 0.5,
    "MSD305: fewer label runs than this fraction of those expected in random order: not shuffled.",
)
SHUFFLE_CORRELATION = Option(
    "shuffle_correlation", 0.5,
    "MSD305: |rank correlation| between a regression target and its position above this: sorted.",
)
DATA_NOT_SHUFFLED = Rule(
    "MSD305", "data-not-shuffled", WARNING,
    "label order correlated with position",
    options=(SHUFFLE_RUNS_RATIO, SHUFFLE_CORRELATION),
)


@DATA_NOT_SHUFFLED.judge
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


DENSE_IGNORE_IDS = (-100, 255)
"""Conventional ``ignore_index`` values in dense (segmentation, token) labels: never out of range."""

LABEL_OUT_OF_RANGE = Rule(
    "MSD306", "label-out-of-range", ERROR,
    "labels outside the model output range",
)


@LABEL_OUT_OF_RANGE.judge
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
