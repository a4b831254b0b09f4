"""The finding lifecycle: transient training findings whose condition passed end the run resolved (info).

Pure bookkeeping first, then real trainings: the issue's warm-up spike the loss recovers from (MSD202), a healthy
LeNet's initial plateau (MSD203), and what the exporters show of an episode.
"""
from __future__ import annotations

import json
import logging

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.common.initializer import Normal
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.catalog import make_finding
from mindspore_doctor.export.html import render_html
from mindspore_doctor.export.mindinsight import lineage_values, read_scalars
from mindspore_doctor.findings import Report
from mindspore_doctor.lifecycle import Lifecycle
from mindspore_doctor.rules.training import CURRENT_RULES

QUIET = ("MSD1", "MSD3")  # these tests are about the training signals


def _finding(code, step, **location):
    return make_finding(code, f"{code} at step {step}", location=location, step=step)


def test_a_finding_that_stops_holding_is_resolved_at_the_end_with_its_history():
    report = Report()
    spike, dead = _finding("MSD202", 30), _finding("MSD212", 50, cell="relu")
    report.extend([spike, dead, _finding("MSD206", 40)])
    life = Lifecycle(CURRENT_RULES)
    life.observe(50, report.findings, {"MSD202": [spike], "MSD212": [dead]})
    life.observe(100, report.findings, {"MSD202": [], "MSD212": [dead]})  # the loss came back at step 100
    life.observe(150, report.findings, {"MSD202": [], "MSD212": [dead]})
    assert life.episodes(report) == {"findings/MSD202/open": 0.0, "findings/MSD202/resolved": 1.0,
                                     "findings/MSD212/open": 1.0, "findings/MSD212/resolved": 0.0}
    assert life.close(report) == [spike]
    assert spike.severity.value == "info" and spike.resolved
    assert spike.evidence == {"original_severity": "error", "resolved_step": 100}
    assert "Resolved" in spike.message and "step 100" in spike.message
    assert dead.severity.value == "warning" and not dead.resolved  # still holds: open
    assert report.by_code("MSD206")[0].severity.value == "error"  # not transient: never re-judged


def test_a_finding_that_comes_back_is_open_and_one_never_rejudged_stays_as_it_was():
    report = Report()
    flaky, unjudged = _finding("MSD204", 20), _finding("MSD203", 80)
    report.extend([flaky, unjudged])
    life = Lifecycle(CURRENT_RULES)
    life.observe(50, report.findings, {"MSD204": []})
    life.observe(100, report.findings, {"MSD204": [flaky]})  # holds again
    life.observe(150, report.findings, {"MSD204": []})
    assert life.resolved_at(flaky) == 150  # the step of the last stretch, not the first
    life.observe(200, report.findings, {"MSD204": [flaky]})
    assert life.close(report) == []  # MSD204 holds at the end; MSD203 was never judged again (rule switched off)
    assert report.at_least("warning") == [flaky, unjudged]


def test_a_finding_that_stopped_training_keeps_its_severity():
    report = Report()
    spike = _finding("MSD202", 30)
    report.add(spike)
    life = Lifecycle(CURRENT_RULES)
    life.acted_on(spike)
    life.observe(60, report.findings, {"MSD202": []})
    assert life.close(report) == [] and spike.severity.value == "error"


def test_lineage_counts_open_and_resolved():
    report = Report()
    report.extend([_finding("MSD202", 30), _finding("MSD212", 50, cell="relu")])
    report.findings[0].resolve(80)
    values = lineage_values(report)
    assert values["doctor_open"] == 1 and values["doctor_resolved"] == 1 and values["doctor_infos"] == 1


# --- real trainings ------------------------------------------------------------------------------------------------


def _train(build, data, lr, epochs, **options):
    ms.set_seed(0)
    net = build()
    doctor = Doctor(ignore=QUIET, **options)
    optimizer = nn.Momentum(net.trainable_params(), lr, 0.9)
    Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer).train(
        epochs, data, callbacks=[doctor], dataset_sink_mode=False)
    return doctor


def _blobs(n=512, features=16, classes=4, noise=0.8):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((classes, features)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int32)
    x = (centers[y] + noise * rng.standard_normal((n, features))).astype(np.float32)
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(32)


def test_a_warm_up_spike_the_loss_recovers_from_ends_resolved(tmp_path):
    """Issue 13: warm-up to lr=2 is too steep; the loss climbs back from ~0.05 to ~2 for a while (MSD202 is logged
    then), and the cosine decay brings it down to ~0.01: the final report says it resolved."""
    steps = 160
    lr = [2.0 * (i + 1) / 25 if i < 25 else 0.001 + 1.999 * 0.5 * (1 + np.cos(np.pi * (i - 25) / (steps - 25)))
          for i in range(steps)]
    def build():
        return nn.SequentialCell(nn.Dense(16, 64), nn.Tanh(), nn.Dense(64, 64), nn.Tanh(), nn.Dense(64, 4))

    doctor = _train(build, _blobs(), lr, steps // 16, summary_dir=str(tmp_path))
    assert doctor.history.losses[-1][1] < 0.1
    (spike,) = doctor.report.by_code("MSD202")
    assert spike.severity.value == "info" and spike.evidence["original_severity"] == "error"
    assert spike.step < spike.evidence["resolved_step"] <= steps
    assert not [f for f in doctor.report.at_least("warning") if f.code.startswith("MSD20")], doctor.report
    saved = json.loads((tmp_path / "doctor_report.json").read_text())
    (row,) = [f for f in saved["findings"] if f["code"] == "MSD202"]
    assert row["severity"] == "info" and row["evidence"]["resolved_step"] == spike.evidence["resolved_step"]
    scalars = {}
    for events in tmp_path.glob("*_doctor"):
        scalars.update(read_scalars(events))
    assert scalars["doctor/findings/MSD202/open"][-1] == (steps, 0.0)
    assert scalars["doctor/findings/MSD202/resolved"][-1] == (steps, 1.0)
    page = (tmp_path / "doctor_report.html").read_text()
    assert 'id="chart-timeline"' in page and "resolved, was error" in page


class LeNet5(nn.Cell):
    """The MindSpore tutorial's LeNet-5 (Normal(0.02) init): it sits on ln(4) for a while before it learns."""

    def __init__(self, classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid", weight_init=Normal(0.02))
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid", weight_init=Normal(0.02))
        self.fc1 = nn.Dense(16 * 5 * 5, 120, weight_init=Normal(0.02))
        self.fc2 = nn.Dense(120, 84, weight_init=Normal(0.02))
        self.fc3 = nn.Dense(84, classes, weight_init=Normal(0.02))
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.relu(self.fc1(self.flatten(x)))
        return self.fc3(self.relu(self.fc2(x)))


def test_a_healthy_lenet_leaving_its_initial_plateau_is_not_reported_as_stuck():
    """Issue 13: loss 1.386 for ~85 steps, then down to ~0 by step 128. MSD203 must not stand in the final report."""
    rng = np.random.default_rng(0)
    templates = rng.standard_normal((4, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 4, 1024).astype(np.int32)
    x = (templates[y] + 0.5 * rng.standard_normal((1024, 1, 32, 32))).astype(np.float32)
    doctor = _train(LeNet5, ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(32), 0.1, 4)
    losses = [v for _, v in doctor.history.losses]
    assert np.mean(losses[:20]) > 1.35 and np.mean(losses[-10:]) < 0.05
    assert all(f.resolved for f in doctor.report.by_code("MSD203")), doctor.report
    assert not doctor.report.at_least("warning"), doctor.report


def test_the_fault_benchmark_scores_a_resolved_finding_by_the_severity_it_was_logged_with():
    from benchmarks.faults import bench, runner
    from test_bench_faults import _result

    spike = _finding("MSD202", 54)
    spike.resolve(96)
    row = runner.finding_row(spike, "doctor")
    assert row["severity"] == "info" and row["original_severity"] == "error" and row["resolved_step"] == 96
    result = _result("f_jump", ["MSD202"], [])
    result["findings"] = [row]
    assert bench.score([result])["totals"]["found_pairs"] == 1  # it alarmed when it was logged
