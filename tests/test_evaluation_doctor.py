"""``Doctor(eval_dataset=...)`` end to end: MSD4xx through ``Model.train``, the diagnosis in every report, no harm."""
from __future__ import annotations

import json

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.callback import REPORT_FILE

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
