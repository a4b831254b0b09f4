"""analysis.errors: the error-analysis tables of an evaluation, on hand-made outputs with known answers (pure numpy)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mindspore_doctor.analysis.errors import analyse_errors

CLASSIFICATION_KEYS = {"task", "unit", "samples", "units", "per_class", "confused", "worst", "top_loss"}


def _onehot_logits(predicted, classes=4, scale=4.0):
    out = np.zeros((len(predicted), classes))
    out[np.arange(len(predicted)), predicted] = scale
    return out


def test_multiclass_per_class_confusions_worst_and_top_loss():
    truth = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3])
    predicted = np.array([0, 0, 0, 0, 1, 1, 2, 2, 1, 2, 3, 0])  # 1<->2 confused, one 3 taken for 0
    outputs = _onehot_logits(predicted)
    outputs[6, 2] = 9.0  # the surest mistake: the top loss
    result = analyse_errors("multiclass", outputs, truth, family="classes", top=3)
    assert set(result) == CLASSIFICATION_KEYS and result["unit"] == "sample" and result["samples"] == 12
    rows = {r["label"]: r for r in result["per_class"]}
    assert rows[0]["support"] == 4 and rows[0]["recall"] == 1.0 and rows[0]["precision"] == pytest.approx(0.8)
    assert rows[1]["recall"] == 0.5 and rows[1]["precision"] == pytest.approx(2 / 3)
    assert rows[3]["f1"] == pytest.approx(2 / 3)
    assert result["confused"][0] == {"true": 1, "predicted": 2, "count": 2, "rate": 0.5}
    assert {(c["true"], c["predicted"]) for c in result["confused"]} == {(1, 2), (2, 1), (3, 0)}
    assert result["worst"][:2] == [2, 1]  # F1 0.4 (precision 1/3), then 0.57
    top = result["top_loss"]
    assert len(top) == 3 and top[0]["position"] == 6 and top[0]["label"] == 1 and top[0]["predicted"] == 2
    assert top[0]["loss"] > top[1]["loss"] >= top[2]["loss"]
    assert top[0]["confidence"] > 0.99  # softmax of the logits, for the predicted class
    expected = -math.log(np.exp(outputs[6, 1]) / np.exp(outputs[6]).sum())
    assert top[0]["loss"] == pytest.approx(expected)
    json.dumps(result)  # plain data


def test_probability_rows_are_not_softmaxed_again_and_one_hot_labels_are_read():
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.5, 0.25, 0.25]])
    labels = np.eye(3)[[0, 1, 2]]
    result = analyse_errors("multiclass", probs, labels, top=5)
    losses = {r["position"]: r["loss"] for r in result["top_loss"]}
    assert losses[2] == pytest.approx(-math.log(0.25)) and losses[0] == pytest.approx(-math.log(0.7))
    assert result["top_loss"][0]["position"] == 2 and result["top_loss"][0]["confidence"] == pytest.approx(0.5)


def test_a_perfect_model_has_no_confusions_and_no_worst_class():
    truth = np.array([0, 1, 2, 1])
    result = analyse_errors("multiclass", _onehot_logits(truth, 3), truth)
    assert result["confused"] == [] and result["worst"] == []
    assert all(r["f1"] == 1.0 for r in result["per_class"])


def test_per_token_scores_each_labelled_token_and_skips_ignore_index():
    rng = np.random.default_rng(0)
    outputs = rng.normal(size=(3, 5, 4))  # (N, C, T): class axis 1
    labels = rng.integers(0, 5, size=(3, 4))
    labels[0, :2] = -100
    labels[2, 3] = -100
    result = analyse_errors("multiclass", outputs, labels, class_axis=1, ignore_index=-100, top=50)
    assert result["unit"] == "token" and result["samples"] == 3 and result["units"] == 12 - 3
    assert len(result["top_loss"]) == 9
    assert sum(r["support"] for r in result["per_class"]) == 9
    for row in result["top_loss"]:
        position, (t,) = row["position"], row["at"]
        assert labels[position, t] == row["label"] != -100
        assert row["predicted"] == outputs[position, :, t].argmax()


def test_per_pixel_unit_and_the_pixel_place():
    outputs = np.zeros((2, 3, 2, 2))
    outputs[:, 0] = 1.0  # predicts class 0 everywhere
    labels = np.zeros((2, 2, 2), dtype=np.int64)
    labels[1, 1, 0] = 2
    result = analyse_errors("multiclass", outputs, labels, class_axis=1, top=1)
    assert result["unit"] == "pixel" and result["units"] == 8
    assert result["top_loss"][0]["position"] == 1 and result["top_loss"][0]["at"] == [1, 0]
    assert result["confused"] == [{"true": 2, "predicted": 0, "count": 1, "rate": 1.0}]


def test_binary_logits_and_probabilities():
    labels = np.array([1, 1, 0, 0, 1], dtype=np.float32).reshape(-1, 1)
    logits = np.array([3.0, -2.0, -1.0, 0.5, 1.0]).reshape(-1, 1)
    result = analyse_errors("binary", logits, labels, family="logits", threshold=0.0, top=2)
    rows = {r["label"]: r for r in result["per_class"]}
    assert rows[1]["support"] == 3 and rows[1]["recall"] == pytest.approx(2 / 3)
    assert rows[0]["recall"] == 0.5 and rows[1]["precision"] == pytest.approx(2 / 3)
    top = result["top_loss"][0]
    assert top["position"] == 1 and top["loss"] == pytest.approx(math.log1p(math.exp(2.0)))
    assert top["predicted"] == 0 and top["confidence"] == pytest.approx(1 - 1 / (1 + math.exp(2.0)))
    probs = analyse_errors("binary", np.array([[0.9], [0.2]]), np.array([[1.0], [1.0]]), family="probabilities",
                           threshold=0.5)
    assert probs["top_loss"][0]["position"] == 1 and probs["top_loss"][0]["loss"] == pytest.approx(-math.log(0.2))


def test_multilabel_per_label_and_missed_for_pairs():
    labels = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    logits = np.array([[-3, 3, -3], [-3, 3, -3], [-3, 3, -3], [-3, -3, 3]], dtype=np.float32)  # label 0 read as 1
    result = analyse_errors("multilabel", logits, labels, family="logits", threshold=0.0, top=5)
    assert result["unit"] == "label" and result["units"] == 12
    rows = {r["label"]: r for r in result["per_class"]}
    assert rows[0]["recall"] == 0.0 and rows[1]["precision"] == pytest.approx(1 / 3) and rows[2]["f1"] == 1.0
    assert result["confused"] == [{"true": 0, "predicted": 1, "count": 2, "rate": 1.0}]
    assert result["worst"][0] == 0
    top = result["top_loss"][0]
    assert top["label"] == [0] and top["predicted"] == [1] and top["position"] in (0, 1)


def test_regression_error_by_target_range_and_top_loss():
    target = np.linspace(0.0, 1.0, 100).reshape(-1, 1)
    predicted = target.copy()
    predicted[target >= 0.8] -= 0.5  # the largest targets are underestimated
    result = analyse_errors("regression", predicted, target, family="regression", top=3)
    assert set(result) == {"task", "unit", "samples", "units", "by_target_range", "top_loss"}
    ranges = result["by_target_range"]
    assert len(ranges) == 5 and sum(r["count"] for r in ranges) == 100
    assert ranges[0]["low"] == 0.0 and ranges[-1]["high"] == 1.0
    assert ranges[-1]["mse"] == pytest.approx(0.25) and ranges[-1]["bias"] == pytest.approx(-0.5)
    assert ranges[0]["mse"] == 0.0 and ranges[0]["mae"] == 0.0
    top = result["top_loss"][0]
    assert top["loss"] == pytest.approx(0.25) and top["predicted"] == pytest.approx(top["target"] - 0.5)


def test_regression_of_images_and_a_constant_target():
    rng = np.random.default_rng(1)
    images = rng.random((4, 1, 3, 3))
    result = analyse_errors("regression", images, images + 0.1, top=2)
    assert result["units"] == 36 and result["top_loss"][0]["loss"] == pytest.approx(0.01)
    constant = analyse_errors("regression", np.zeros((5, 1)), np.ones((5, 1)))
    assert constant["by_target_range"] == [{"low": 1.0, "high": 1.0, "count": 5, "mse": 1.0, "mae": 1.0,
                                            "bias": -1.0}]


def test_non_finite_outputs_rank_first_and_stay_valid_json():
    outputs = _onehot_logits(np.array([0, 1, 2]), 3)
    outputs[1, 0] = np.nan
    result = analyse_errors("multiclass", outputs, np.array([0, 1, 2]), top=3)
    assert result["top_loss"][0]["position"] == 1 and result["top_loss"][0]["loss"] is None
    json.dumps(result, allow_nan=False)


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError):
        analyse_errors("ranking", np.zeros((2, 2)), np.zeros(2))


# --- agreement with the evaluation's own task and metric ----------------------------------------------------------


def _tasks():
    from mindspore import nn

    r = np.random.default_rng(0)
    ids = r.integers(0, 4, 32)
    tokens = r.integers(0, 9, (32, 6)).astype(np.int32)
    tokens[:, 4:] = -100
    return {
        "binary-logit": ((32, 1), r.integers(0, 2, (32, 1)).astype(np.float32), nn.BCEWithLogitsLoss()),
        "binary-flat-probability": ((32,), r.integers(0, 2, 32).astype(np.float32), nn.BCELoss()),
        "multiclass": ((32, 4), ids.astype(np.int32), nn.CrossEntropyLoss()),
        "multiclass-onehot": ((32, 4), np.eye(4, dtype=np.float32)[ids], nn.CrossEntropyLoss()),
        "per-token": ((32, 6, 9), tokens, nn.CrossEntropyLoss(ignore_index=-100)),
        "segmentation": ((32, 3, 5, 5), r.integers(0, 3, (32, 5, 5)).astype(np.int32), None),
        "multilabel": ((32, 4), r.integers(0, 2, (32, 4)).astype(np.float32), nn.BCEWithLogitsLoss()),
        "autoencoder": ((32, 1, 8, 8), r.random((32, 1, 8, 8)).astype(np.float32), nn.MSELoss()),
        "regression": ((32, 1), r.standard_normal((32, 1)).astype(np.float32), nn.MSELoss()),
    }


@pytest.mark.parametrize("case", sorted(_tasks()))
def test_the_tables_agree_with_the_evaluations_metric(case):
    """Fed the evaluation's inferred Task, the tables add up to its metric: the recalls weighted by support are the
    accuracy, the range MSEs weighted by count the MSE, the labels' supports the positives."""
    from mindspore_doctor.probes.evaluation import infer_task

    shape, labels, loss = _tasks()[case]
    rng = np.random.default_rng(1)
    outputs = rng.random(shape) if case == "binary-flat-probability" else rng.standard_normal(shape)
    task = infer_task(outputs, labels, loss)
    result = analyse_errors(task.kind, outputs, labels, family=task.family, class_axis=task.class_axis,
                            threshold=task.threshold, ignore_index=task.ignore_index, top=5)
    metric = task.metric(outputs, labels).value
    assert result["task"] == task.kind and result["samples"] == 32 and len(result["top_loss"]) == 5
    if task.kind in ("binary", "multiclass"):
        rows = result["per_class"]
        hits = sum(r["recall"] * r["support"] for r in rows)
        assert hits / sum(r["support"] for r in rows) == pytest.approx(metric)
        assert sum(r["support"] for r in rows) == result["units"]
    elif task.kind == "multilabel":
        assert [r["support"] for r in result["per_class"]] == labels.sum(axis=0).astype(int).tolist()
    else:
        ranges = result["by_target_range"]
        total = sum(r["count"] * r["mse"] for r in ranges) / sum(r["count"] for r in ranges)
        assert total == pytest.approx(metric)
    if case == "per-token":
        assert result["unit"] == "token" and result["units"] == 32 * 4
    if case == "segmentation":
        assert result["unit"] == "pixel" and result["units"] == 32 * 25
