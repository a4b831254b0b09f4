"""Error analysis of an evaluation: which classes fail, which pairs are confused, which samples cost the most.

Pure numpy over the eval-mode outputs and labels the evaluation already holds (``probes.evaluation``), judged
with the task it inferred (``Task``: kind, loss family, class axis, threshold, ignore_index)::

    analyse_errors(task.kind, outputs, labels, family=task.family, class_axis=task.class_axis,
                   threshold=task.threshold, ignore_index=task.ignore_index, top=config.analysis_top)

The per-sample loss is computed here, in numpy, from the outputs (not by the user's loss cell): cross-entropy
from a softmax (class scores) or a sigmoid (binary/multi-label logits), ``-log p`` for outputs that already are
probabilities, the squared error for regression. It ranks the samples; it need not equal the training loss.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

EPS = 1e-12
WORST = 5
"""At most this many labels in ``worst`` (the lowest F1 below 1)."""
RANGE_BINS = 5
"""Regression: the targets are cut into this many quantile bins (fewer when values repeat)."""


def _num(x: Any) -> float | None:
    """A plain float for JSON; None for NaN/Inf."""
    value = float(x)
    return value if math.isfinite(value) else None


def _order(loss: np.ndarray) -> np.ndarray:
    """Indices by decreasing loss, a non-finite loss first (the worst there is), ties by position."""
    key = np.where(np.isfinite(loss), loss, np.inf)
    return np.lexsort((np.arange(loss.size), -key))


def _unit(outputs_ndim: int, kind: str) -> str:
    if kind == "multilabel":
        return "label"
    if kind == "multiclass" and outputs_ndim == 3:
        return "token"
    if kind == "multiclass" and outputs_ndim >= 4:
        return "pixel"
    return "sample"


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _per_class(truth: np.ndarray, predicted: np.ndarray, labels: list[int]) -> list[dict[str, Any]]:
    """Precision, recall, F1 and support of each of ``labels`` (non-negative class ids), counted with bincount."""
    size = max(labels, default=-1) + 1
    tp = np.bincount(truth[truth == predicted], minlength=size)
    support, claimed = np.bincount(truth, minlength=size), np.bincount(predicted, minlength=size)
    return [_prf(label, int(tp[label]), int(claimed[label]), int(support[label])) for label in labels]


def _prf(label: int, tp: int, claimed: int, support: int) -> dict[str, Any]:
    precision = tp / claimed if claimed else 0.0
    recall = tp / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"label": int(label), "precision": precision, "recall": recall, "f1": f1, "support": support}


def _worst(per_class: list[dict[str, Any]]) -> list[int]:
    """Labels with support and an F1 below 1, lowest F1 first (ties: more support first), at most ``WORST``."""
    failing = [r for r in per_class if r["support"] and r["f1"] < 1.0]
    failing.sort(key=lambda r: (r["f1"], -r["support"], r["label"]))
    return [r["label"] for r in failing[:WORST]]


def _confused(truth: np.ndarray, predicted: np.ndarray, top: int) -> list[dict[str, Any]]:
    """The (true, predicted) pairs of the errors, most frequent first; rate: share of the true class's samples."""
    wrong = truth != predicted
    if not wrong.any():
        return []
    pairs, counts = np.unique(np.stack([truth[wrong], predicted[wrong]], axis=1), axis=0, return_counts=True)
    support = dict(zip(*np.unique(truth, return_counts=True)))
    order = np.lexsort((pairs[:, 1], pairs[:, 0], -counts))[:top]
    return [{"true": int(pairs[i, 0]), "predicted": int(pairs[i, 1]), "count": int(counts[i]),
             "rate": int(counts[i]) / int(support[pairs[i, 0]])} for i in order]


def _class_ids(outputs: np.ndarray, labels: np.ndarray, axis: int) -> np.ndarray:
    """Class ids shaped like the outputs without their class axis (one-hot or soft rows: their argmax)."""
    target = outputs.shape[:axis] + outputs.shape[axis + 1:]
    if labels.size != int(np.prod(target)):
        return labels.argmax(axis=-1).reshape(target).astype(np.int64)
    return labels.reshape(target).astype(np.int64)


CHUNK = 1 << 21
"""Class scores handled at a time (2M floats, 16 MB): the softmax of a large vocabulary never holds more."""


def _scores(rows: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(predicted class, probability of the true class, probability of the predicted class) of rows of class
    scores: a softmax of logits (or log-probabilities); rows that already are probabilities as they are."""
    predicted = rows.argmax(axis=-1)
    at = np.arange(rows.shape[0])
    if rows.size and (rows >= 0).all() and np.allclose(rows.sum(axis=-1), 1.0, atol=1e-3):
        return predicted, rows[at, truth], rows[at, predicted]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        top = rows.max(axis=-1)
        norm = np.log(np.exp(rows - top[:, None]).sum(axis=-1)) + top
        return predicted, np.exp(rows[at, truth] - norm), np.exp(rows[at, predicted] - norm)


def _multiclass(outputs: np.ndarray, labels: np.ndarray, class_axis: int, ignore_index: int | None,
                top: int) -> dict[str, Any]:
    axis = class_axis % outputs.ndim
    ids = _class_ids(outputs, labels, axis)
    scores = np.moveaxis(outputs, axis, -1)
    classes = scores.shape[-1]
    valid = (ids >= 0) & (ids < classes)
    if ignore_index is not None:
        valid &= ids != ignore_index
    where = np.argwhere(valid)  # (units, 1 + positions): sample index, then the unit's place in the sample
    truth = ids[valid]
    step = max(CHUNK // max(classes, 1), 1)
    parts = [_scores(scores[tuple(where[i:i + step].T)].astype(np.float64), truth[i:i + step])
             for i in range(0, truth.size, step)]
    predicted, p_true, confidence = (np.concatenate([part[k] for part in parts]) if parts else
                                     np.zeros(0, dtype=np.int64 if k == 0 else np.float64) for k in range(3))
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = -np.log(np.clip(p_true, EPS, 1.0))
    loss = np.where(np.isfinite(p_true) & np.isfinite(confidence), loss, np.nan)
    present = sorted(set(np.unique(truth).tolist()) | set(np.unique(predicted).tolist()))
    per_class = _per_class(truth, predicted, present)
    top_loss = []
    for i in _order(loss)[:top]:
        row = {"position": int(where[i, 0]), "label": int(truth[i]), "predicted": int(predicted[i]),
               "loss": _num(loss[i]), "confidence": _num(confidence[i])}
        if where.shape[1] > 1:
            row["at"] = [int(v) for v in where[i, 1:]]  # the token / pixel inside the sample
        top_loss.append(row)
    return {"per_class": per_class, "confused": _confused(truth, predicted, top), "worst": _worst(per_class),
            "top_loss": top_loss, "units": int(truth.size)}


def _positive_probability(outputs: np.ndarray, family: str | None, threshold: float) -> np.ndarray:
    """P(positive) from binary/multi-label outputs: a sigmoid of logits, probabilities as they are."""
    probabilities = family == "probabilities" or (family != "logits" and threshold > 0)
    return np.clip(outputs, 0.0, 1.0) if probabilities else _sigmoid(outputs)


def _bce(p: np.ndarray, truth: np.ndarray) -> np.ndarray:
    return -np.where(truth, np.log(np.clip(p, EPS, 1.0)), np.log(np.clip(1.0 - p, EPS, 1.0)))


def _binary(outputs: np.ndarray, labels: np.ndarray, family: str | None, threshold: float,
            top: int) -> dict[str, Any]:
    scores = outputs.reshape(-1).astype(np.float64)
    truth = (labels.reshape(-1) > 0.5).astype(np.int64)
    predicted = (scores > threshold).astype(np.int64)
    p = _positive_probability(scores, family, threshold)
    loss = np.where(np.isfinite(p), _bce(p, truth.astype(bool)), np.nan)
    per_class = _per_class(truth, predicted, [0, 1])
    top_loss = [{"position": int(i), "label": int(truth[i]), "predicted": int(predicted[i]), "loss": _num(loss[i]),
                 "confidence": _num(p[i] if predicted[i] else 1.0 - p[i])} for i in _order(loss)[:top]]
    return {"per_class": per_class, "confused": _confused(truth, predicted, top), "worst": _worst(per_class),
            "top_loss": top_loss, "units": int(truth.size)}


def _multilabel(outputs: np.ndarray, labels: np.ndarray, family: str | None, threshold: float,
                top: int) -> dict[str, Any]:
    """Per label: precision/recall/F1 of its positives. Confused (a, b): samples where label ``a`` was missed while
    ``b`` was predicted without being true (rate: share of ``a``'s positives). Top loss: mean BCE per sample."""
    scores = outputs.reshape(outputs.shape[0], -1).astype(np.float64)
    truth = labels.reshape(scores.shape) > 0.5
    predicted = scores > threshold
    p = _positive_probability(scores, family, threshold)
    per_class = [_prf(k, int(np.sum(truth[:, k] & predicted[:, k])), int(predicted[:, k].sum()),
                      int(truth[:, k].sum())) for k in range(scores.shape[1])]
    missed, extra = (truth & ~predicted).astype(np.int64), (predicted & ~truth).astype(np.int64)
    together = missed.T @ extra  # [a, b]: samples missing a while predicting b falsely
    confused = [{"true": int(a), "predicted": int(b), "count": int(together[a, b]),
                 "rate": int(together[a, b]) / max(int(truth[:, a].sum()), 1)}
                for a, b in zip(*np.nonzero(together))]
    confused.sort(key=lambda r: (-r["count"], r["true"], r["predicted"]))
    with np.errstate(invalid="ignore"):
        loss = np.where(np.isfinite(p).all(axis=1), _bce(p, truth).mean(axis=1), np.nan)
    top_loss = []
    for i in _order(loss)[:top]:
        on = predicted[i]
        confidence = np.where(on, p[i], 1.0 - p[i]).min() if np.isfinite(p[i]).all() else math.nan
        top_loss.append({"position": int(i), "label": np.flatnonzero(truth[i]).tolist(),
                         "predicted": np.flatnonzero(on).tolist(), "loss": _num(loss[i]),
                         "confidence": _num(confidence)})
    return {"per_class": per_class, "confused": confused[:top], "worst": _worst(per_class), "top_loss": top_loss,
            "units": int(truth.size)}


def _regression(outputs: np.ndarray, labels: np.ndarray, family: str | None, top: int) -> dict[str, Any]:
    """Error by target range (quantile bins of the target values) and the samples of largest squared error."""
    target = labels.reshape(outputs.shape).astype(np.float64)
    predicted = _sigmoid(outputs) if family == "logits" else outputs.astype(np.float64)
    flat_t, flat_p = target.reshape(-1), predicted.reshape(-1)
    finite = np.isfinite(flat_t)
    edges = np.unique(np.quantile(flat_t[finite], np.linspace(0, 1, RANGE_BINS + 1))) if finite.any() else []
    bounds = list(zip(edges[:-1], edges[1:])) if len(edges) > 1 else [(edges[0], edges[0])] if len(edges) else []
    ranges = []
    for k, (low, high) in enumerate(bounds):
        upper = flat_t <= high if k == len(bounds) - 1 else flat_t < high  # the last bin holds the maximum
        inside = finite & (flat_t >= low) & upper
        error = flat_p[inside] - flat_t[inside]
        ranges.append({"low": float(low), "high": float(high), "count": int(inside.sum()),
                       "mse": _num(np.mean(error ** 2)) if error.size else None,
                       "mae": _num(np.mean(np.abs(error))) if error.size else None,
                       "bias": _num(np.mean(error)) if error.size else None})
    per_sample = (predicted - target).reshape(outputs.shape[0], -1)
    with np.errstate(invalid="ignore", over="ignore"):
        loss = np.mean(per_sample ** 2, axis=1)
    single = per_sample.shape[1] == 1
    rows_t, rows_p = target.reshape(outputs.shape[0], -1), predicted.reshape(outputs.shape[0], -1)
    top_loss = [{"position": int(i),
                 "target": _num(rows_t[i, 0] if single else rows_t[i].mean()),
                 "predicted": _num(rows_p[i, 0] if single else rows_p[i].mean()),
                 "loss": _num(loss[i])} for i in _order(loss)[:top]]
    return {"by_target_range": ranges, "top_loss": top_loss, "units": int(flat_t.size)}


def analyse_errors(kind: str, outputs: np.ndarray, labels: np.ndarray, *, family: str | None = None,
                   class_axis: int = -1, threshold: float = 0.0, ignore_index: int | None = None,
                   top: int = 20) -> dict[str, Any]:
    """The error-analysis tables of one evaluation (``report.meta["error_analysis"]``), as plain data.

    ``kind``, ``family``, ``class_axis``, ``threshold`` and ``ignore_index`` are the evaluation's ``Task``;
    ``outputs`` the eval-mode outputs (N, ...), ``labels`` the labels as the dataset yields them; ``top``: rows
    in ``confused`` and ``top_loss``.

    Classification (``task`` binary / multiclass / multilabel)::

        {"task", "unit", "samples", "units", "per_class": [{"label", "precision", "recall", "f1", "support"}],
         "confused": [{"true", "predicted", "count", "rate"}], "worst": [label, ...],
         "top_loss": [{"position", "label", "predicted", "loss", "confidence"}]}

    ``unit``: what is scored, "sample", "token" (N, T, C), "pixel" (N, C, H, W) or "label" (multi-label);
    ``samples``: N; ``units``: how many were scored (labelled tokens/pixels, samples x labels).
    ``position`` is the sample's index in the order the eval dataset yields; per token/pixel, ``at`` adds its
    place in the sample. ``confidence``: the predicted class's probability (multi-label: the least sure label's).
    Per class rows cover the classes that occur in the labels or the predictions.

    Regression::

        {"task": "regression", "unit": "sample", "samples", "units",
         "by_target_range": [{"low", "high", "count", "mse", "mae", "bias"}],
         "top_loss": [{"position", "target", "predicted", "loss"}]}

    ``bias``: mean (prediction - target) in the range; ``loss``: the sample's mean squared error (``target`` and
    ``predicted`` are the sample's means when it has several values).
    """
    outputs = np.asarray(outputs)
    if not np.issubdtype(outputs.dtype, np.floating):
        outputs = outputs.astype(np.float64)
    labels = np.asarray(labels)
    top = max(int(top), 0)
    if kind == "multiclass":
        body = _multiclass(outputs, labels, class_axis, ignore_index, top)
    elif kind == "binary":
        body = _binary(outputs, labels, family, threshold, top)
    elif kind == "multilabel":
        body = _multilabel(outputs, labels, family, threshold, top)
    elif kind == "regression":
        body = _regression(outputs, labels, family, top)
    else:
        raise ValueError(f"unknown task kind {kind!r}")
    return {"task": kind, "unit": _unit(outputs.ndim, kind), "samples": int(outputs.shape[0]), **body}
