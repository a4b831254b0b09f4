"""``Doctor(eval_dataset=...)`` end to end: MSD4xx through ``Model.train``, the diagnosis in every report, no harm."""
from __future__ import annotations

import json
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor._io import REPORT_FILE

QUIET = ("MSD3",)  # the data doctor has its own tests; these tiny sets are legitimately small


def _data(n, seed=0, noise=0.0, batch=16, random_labels=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    flip = rng.random(n) < noise
    y[flip] = 1 - y[flip]
    if random_labels:
        y = rng.integers(0, 2, n).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(batch)


class Net(nn.Cell):
    """No Dropout: its random stream is not reproducible across two trainings in one process."""

    def __init__(self, hidden=32, batchnorm=False):
        super().__init__()
        self.fc1 = nn.Dense(8, hidden)
        self.bn = nn.BatchNorm1d(hidden) if batchnorm else nn.Identity()
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(hidden, 2)

    def construct(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


def _train(net, train, epochs, lr=0.05, doctor=None):
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), lr, 0.9))
    model.train(epochs, train, callbacks=[doctor] if doctor else [], dataset_sink_mode=False)
    return doctor


def _codes(doctor):
    return {f.code for f in doctor.report.at_least("warning")}


def _diagnosed(doctor):
    return [c["id"] for c in doctor.report.meta["diagnosis"]["causes"]]


def test_overfitting_is_found_diagnosed_and_reported_first_everywhere(tmp_path):
    doctor = Doctor(tmp_path, eval_dataset=_data(128, seed=1), ignore=QUIET, mindinsight=False)
    _train(Net(hidden=256), _data(32, noise=0.4), epochs=8, lr=0.1, doctor=doctor)
    assert "MSD401" in _codes(doctor)
    assert _diagnosed(doctor)[0] == "overfitting"
    saved = json.loads((tmp_path / REPORT_FILE).read_text())
    assert saved["diagnosis"]["causes"][0]["id"] == "overfitting"
    assert "MSD401" in saved["diagnosis"]["causes"][0]["evidence_codes"]
    text = str(doctor.report)
    assert text.startswith("Diagnosis:") and text.index("Model overfits") < text.index("W MSD401")
    assert [r["epoch"] for r in saved["evaluation"]["records"]] == list(range(1, 9))
    html = (tmp_path / "doctor_report.html").read_text()
    assert html.index("Model overfits") < html.index('id="findings-table"')
    chart = html.split('id="chart-evaluation"', 1)[1].split("</section>", 1)[0]
    assert "<svg" in chart


def test_healthy_twin_has_no_evaluation_finding():
    doctor = Doctor(eval_dataset=_data(128, seed=1), ignore=QUIET)
    _train(Net(), _data(512), epochs=4, doctor=doctor)
    assert len(doctor.report.meta["evaluation"]["records"]) == 4  # one evaluation per epoch
    assert not {"MSD401", "MSD402", "MSD404", "MSD405"} & _codes(doctor), str(doctor.report)


def test_worse_than_baseline_on_random_labels_and_diagnosed_as_label_problem():
    doctor = Doctor(eval_dataset=_data(256, seed=1), ignore=QUIET, probe_every=4)
    _train(Net(hidden=4), _data(256, random_labels=True), epochs=2, lr=0.01, doctor=doctor)
    assert {"MSD402", "MSD404"} <= _codes(doctor)
    (worse,) = doctor.report.by_code("MSD404")
    assert worse.location["data"] == "eval" and worse.evidence["model"] <= worse.evidence["baseline"] + 0.1
    assert "labels-do-not-match-inputs" in _diagnosed(doctor)[:2]


def test_eval_every_two_epochs():
    doctor = Doctor(eval_dataset=_data(64, seed=1), eval_every=2, ignore=QUIET)
    _train(Net(), _data(64), epochs=3, doctor=doctor)
    assert [r["epoch"] for r in doctor.report.meta["evaluation"]["records"]] == [2]


def test_eval_budget_thins_the_evaluations_of_a_long_run_and_keeps_the_last_epoch():
    """With no budget left after the first 10 evaluations, only the last epoch is evaluated; None: every epoch."""
    thinned = Doctor(eval_dataset=_data(64, seed=1), eval_budget=0.0, ignore=QUIET)
    _train(Net(), _data(32), epochs=13, doctor=thinned)
    assert [r["epoch"] for r in thinned.report.meta["evaluation"]["records"]] == [*range(1, 11), 13]
    assert thinned.report.meta["evaluation_schedule"]["skipped"] == 2
    every = Doctor(eval_dataset=_data(64, seed=1), eval_budget=None, ignore=QUIET)
    _train(Net(), _data(32), epochs=13, doctor=every)
    assert [r["epoch"] for r in every.report.meta["evaluation"]["records"]] == list(range(1, 14))


def test_empty_eval_dataset_is_check_skipped_and_training_finishes():
    doctor = Doctor(eval_dataset=_data(32).skip(10), ignore=QUIET)
    _train(Net(), _data(64), epochs=2, doctor=doctor)
    assert "MSD001" not in doctor.report.codes()
    (skipped,) = [f for f in doctor.report.by_code("MSD002") if "MSD401" in f.evidence.get("codes", [])]
    assert "empty" in skipped.message
    assert len(doctor.history.steps) == 8


def test_evaluating_does_no_harm_final_weights_bitwise_identical(exec_mode):
    """BatchNorm included: the mode-switch probe's train-mode forward must put the moving statistics back."""
    def run(with_doctor):
        ms.set_seed(0)
        net = Net(batchnorm=True)
        doctor = Doctor(eval_dataset=_data(48, seed=1), ignore=QUIET, probe_every=3) if with_doctor else None
        _train(net, _data(96), epochs=3, doctor=doctor)
        return net, {p.name: p.asnumpy().copy() for p in net.get_parameters()}

    _, plain = run(False)
    net, doctored = run(True)
    assert plain.keys() == doctored.keys()
    assert [k for k in plain if not np.array_equal(plain[k], doctored[k])] == []
    assert all(cell.training for _, cell in net.cells_and_names())


# --- issue 13 point 9: each task judged with its own metric and baseline, on real data ---------------------

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "realworld" / "data"


def _load(name):
    d = np.load(DATA / f"{name}.npz")
    return d["x"].astype(np.float32), d["y"]


def _split(n, seed=0, eval_fraction=0.25):
    order = np.random.default_rng(seed).permutation(n)
    k = int(n * (1 - eval_fraction))
    return order[:k], order[k:]


def _columns(x, y, batch=32, shuffle=True):
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=shuffle).batch(batch)


def _fit(net, loss, train, evaluate, epochs, lr=0.01):
    doctor = Doctor(eval_dataset=evaluate, ignore=QUIET)
    Model(net, loss, nn.Adam(net.trainable_params(), lr)).train(epochs, train, callbacks=[doctor],
                                                                dataset_sink_mode=False)
    return doctor


def _last(doctor):
    return doctor.report.meta["evaluation"]["records"][-1]


def _breast_cancer(shuffle_labels=False):
    x, y = _load("breast_cancer")
    train, evaluation = _split(len(y))
    x = (x - x[train].mean(0)) / x[train].std(0)
    y = y.astype(np.float32)[:, None]
    if shuffle_labels:
        y = np.random.default_rng(1).permutation(y)
    return _columns(x[train], y[train]), _columns(x[evaluation], y[evaluation], shuffle=False)


def _binary_net(probability):
    layers = [nn.Dense(30, 16), nn.ReLU(), nn.Dense(16, 1)] + ([nn.Sigmoid()] if probability else [])
    return nn.SequentialCell(layers)


@pytest.mark.parametrize("probability", [False, True], ids=["logit+BCEWithLogitsLoss", "sigmoid+BCELoss"])
def test_binary_classifier_with_one_output_is_judged_by_accuracy(probability):
    """It was judged by MSE on raw logits ("mse 24.5 vs 0.234") at 97 % accuracy."""
    loss = nn.BCELoss(reduction="mean") if probability else nn.BCEWithLogitsLoss()
    doctor = _fit(_binary_net(probability), loss, *_breast_cancer(), epochs=4)
    record = _last(doctor)
    assert record["task"] == "binary" and record["eval_metric"]["name"] == "accuracy"
    assert record["eval_metric"]["value"] > 0.9 and record["baseline"]["value"] < 0.7
    assert not {"MSD001", "MSD402", "MSD404"} & doctor.report.codes(), str(doctor.report)


def test_binary_classifier_on_shuffled_labels_is_no_better_than_the_majority():
    doctor = _fit(_binary_net(False), nn.BCEWithLogitsLoss(), *_breast_cancer(shuffle_labels=True), epochs=2,
                  lr=0.001)
    (worse,) = doctor.report.by_code("MSD404")
    assert "predicting the majority class" in worse.message and worse.evidence["metric"] == "accuracy"


def _digits_autoencoder(conv):
    x, _ = _load("digits")
    x = x / 16.0
    train, evaluation = _split(len(x))
    shape = (-1, 1, 8, 8) if conv else (-1, 64)
    x = x.reshape(shape)
    if conv:
        net = nn.SequentialCell([nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Conv2d(8, 1, 3)])
    else:
        net = nn.SequentialCell([nn.Dense(64, 16), nn.ReLU(), nn.Dense(16, 64)])
    return net, _columns(x[train], x[train]), _columns(x[evaluation], x[evaluation], shuffle=False)


@pytest.mark.parametrize("conv", [False, True], ids=["dense", "conv"])
def test_autoencoder_is_judged_by_reconstruction_error_against_the_mean_image(conv):
    """The dense autoencoder was judged by argmax accuracy ("accuracy 8 % vs majority 20 %")."""
    net, train, evaluate = _digits_autoencoder(conv)
    doctor = _fit(net, nn.MSELoss(), train, evaluate, epochs=4)
    record = _last(doctor)
    assert record["task"] == "regression" and record["eval_metric"]["name"] == "mse"
    assert record["eval_metric"]["value"] < 0.5 * record["baseline"]["value"]
    assert "per position" in record["baseline"]["trivial"]
    assert not {"MSD001", "MSD402", "MSD404"} & doctor.report.codes(), str(doctor.report)


def test_an_autoencoder_that_never_learns_is_no_better_than_the_mean_image():
    net, train, evaluate = _digits_autoencoder(conv=False)
    doctor = _fit(net, nn.MSELoss(), train, evaluate, epochs=1, lr=0.0)
    assert {"MSD402", "MSD404"} <= doctor.report.codes(), str(doctor.report)


VOCAB, STEPS = 12, 10


class TokenModel(nn.Cell):
    """Per-token logits (N, T, V): an embedding and a position-wise classifier."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.head = nn.Dense(16, VOCAB)

    def construct(self, tokens):
        return self.head(self.embed(tokens))


class TokenLoss(nn.Cell):
    """Cross-entropy over every token, padding (-100) ignored: the usual reshape of a language model's loss."""

    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss(ignore_index=-100)

    def construct(self, logits, labels):
        return self.ce(logits.reshape(-1, VOCAB), labels.reshape(-1))


def _token_data(n, seed, random_targets=False):
    """Next token = (token + 3) mod V; the last two positions of every sequence are padding."""
    r = np.random.default_rng(seed)
    tokens = r.integers(0, VOCAB, (n, STEPS)).astype(np.int32)
    targets = (tokens + 3) % VOCAB if not random_targets else r.integers(0, VOCAB, (n, STEPS))
    targets = targets.astype(np.int32)
    targets[:, -2:] = -100
    return _columns(tokens, targets, batch=16, shuffle=seed == 0)


@pytest.mark.parametrize("random_targets", [False, True], ids=["learnable", "random"])
def test_per_token_logits_are_judged_by_token_accuracy(random_targets):
    """(N, T, V) logits against (N, T) ids crashed the evaluator (MSD001 "cannot reshape")."""
    doctor = _fit(TokenModel(), TokenLoss(), _token_data(256, 0, random_targets), _token_data(64, 1, random_targets),
                  epochs=3, lr=0.05)
    record = _last(doctor)
    assert "MSD001" not in doctor.report.codes(), str(doctor.report)
    assert record["task"] == "multiclass" and "every position" in record["baseline"]["trivial"]
    if random_targets:
        assert "MSD404" in doctor.report.codes(), str(doctor.report)
    else:
        assert record["eval_metric"]["value"] > 0.9
        assert not {"MSD402", "MSD404"} & doctor.report.codes(), str(doctor.report)


def _digit_properties(y):
    """Multi-hot: even, greater than 4, drawn with a closed loop (0, 6, 8, 9)."""
    return np.stack([y % 2 == 0, y > 4, np.isin(y, (0, 6, 8, 9))], axis=1).astype(np.float32)


def test_multilabel_classifier_is_judged_per_label():
    x, y = _load("digits")
    x = x / 16.0
    train, evaluation = _split(len(y))
    labels = _digit_properties(y)
    net = nn.SequentialCell([nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 3)])
    doctor = _fit(net, nn.BCEWithLogitsLoss(), _columns(x[train], labels[train]),
                  _columns(x[evaluation], labels[evaluation], shuffle=False), epochs=4)
    record = _last(doctor)
    assert record["task"] == "multilabel" and record["eval_metric"]["value"] > 0.85
    assert not {"MSD001", "MSD402", "MSD404"} & doctor.report.codes(), str(doctor.report)


def test_outputs_that_fit_no_task_are_skipped_with_the_reason():
    class Mismatched(nn.Cell):  # the user's own loss: (N, 5) predictions against (N, 3) targets
        def construct(self, out, target):
            return (out[:, :3] - target).square().mean()

    x = np.random.default_rng(0).standard_normal((128, 8)).astype(np.float32)
    target = x[:, :3] * 2.0
    net = nn.Dense(8, 5)
    doctor = _fit(net, Mismatched(), _columns(x, target), _columns(x[:64], target[:64], shuffle=False), epochs=2)
    codes = doctor.report.codes()
    assert "MSD001" not in codes and not {"MSD402", "MSD404"} & codes
    (skipped,) = [f for f in doctor.report.by_code("MSD002") if "MSD404" in f.evidence.get("codes", [])]
    assert "shape (64, 5)" in skipped.message and "shape (64, 3)" in skipped.message
    assert _last(doctor)["eval_loss"] is not None  # MSD401 still has its losses
