"""The HTML report: content, escaping, self-containment, empty histories, run directories."""
from __future__ import annotations

import json
import math
import re

import pytest

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor import _io
from mindspore_doctor.export import html
from mindspore_doctor.findings import Report
from mindspore_doctor.signals import ActivationStats, StepSignals, TrainingHistory

PARAMS = [f"block{i}.conv.weight" for i in range(6)]


def sample_run(steps: int = 60) -> tuple[Report, TrainingHistory]:
    """A run whose early layers' gradients fade and whose ReLU dies, with findings at known steps."""
    history = TrainingHistory(parameter_order=PARAMS, num_classes=10)
    for step in range(1, steps + 1):
        signals = StepSignals(step=step, loss=2.3 * math.exp(-step / 30) + 0.05)
        if step % 5 == 0:
            signals.grad_norm = {p: 10 ** (-i - step / 30) for i, p in enumerate(PARAMS)}
            signals.update_ratio = {p: 10 ** (-2 - i / 2) for i, p in enumerate(PARAMS)}
            signals.activations = {
                "block0.relu": ActivationStats("relu", 0.4, dead_fraction=min(1.0, step / steps), order=0),
                "head.sigmoid": ActivationStats("sigmoid", 0.9, saturated_fraction=0.3, order=1),
            }
        history.append(signals)
    report = Report()
    report.add(make_finding(
        "MSD207", "Gradients vanish in `block5.conv.weight`: <script>alert(1)</script>",
        location={"parameter": "block5.conv.weight"}, evidence={"grad_norm": 1.2e-9, "window": [20, 40]},
        suggestion="Use ReLU & He initialisation.", step=40,
    ))
    report.add(make_finding("MSD212", "`block0.relu` is dead", location={"cell": "block0.relu"}, step=55,
                            evidence={"dead_fraction": 0.9991}))
    report.add(make_finding("MSD104", "`head.dropout` drops 90 %", location={"cell": "head.dropout", "file": "m.py",
                                                                          "line": 3}))
    return report, history


def test_report_page_has_diagnosis_table_and_every_chart(tmp_path):
    report, history = sample_run()
    page = html.write_html(report, history, tmp_path / "r.html").read_text(encoding="utf-8")
    assert page.index('id="diagnosis"') < page.index('id="findings-table"') < page.index('id="chart-loss"')
    assert page.count('<tr class="finding') == 3
    for chart in ("chart-loss", "chart-timeline", "chart-grad-heatmap", "chart-update-ratio", "chart-activations"):
        section = page.split(f'id="{chart}"', 1)[1].split("</section>", 1)[0]
        assert "<svg" in section, chart
    assert "MSD207.md" in page and "grad_norm=1.2e-09" in page
    table = page.split('id="findings-table"', 1)[1]
    assert [table.index(f.code) for f in report.sorted()] == sorted(table.index(f.code) for f in report.sorted())


def test_user_text_is_escaped(tmp_path):
    report, history = sample_run()
    page = html.render_html(report, history)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<code>block5.conv.weight</code>" in page
    assert "Use ReLU &amp; He initialisation." in page


def test_page_is_self_contained():
    page = html.render_html(*sample_run())
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "@import" not in page and not re.search(r"url\((?!#)", page)  # only in-page references
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "").replace(
        'xmlns:xlink="http://www.w3.org/1999/xlink"', "")


def test_lint_only_report_says_there_are_no_training_signals(tmp_path):
    report = Report()
    report.add(make_finding("MSD104", "`drop` drops 90 %", location={"cell": "drop"}))
    page = html.write_html(report, None, tmp_path / "lint.html").read_text(encoding="utf-8")
    assert "<svg" not in page
    assert page.count("No training signals") == 6  # the diagnosis and each of the five charts
    assert page.count('<tr class="finding') == 1


def test_update_ratio_and_activation_charts_skip_what_was_not_probed():
    report, history = sample_run()
    for signals in history.steps:
        signals.activations = {}
    page = html.render_html(report, history)
    activations = page.split('id="chart-activations"', 1)[1].split("</section>", 1)[0]
    assert "<svg" not in activations and "No training signals" in activations
    assert "<svg" in page.split('id="chart-update-ratio"', 1)[1].split("</section>", 1)[0]


def test_run_directory_report(tmp_path):
    report, history = sample_run()
    (tmp_path / _io.REPORT_FILE).write_text(report.to_json())
    (tmp_path / _io.HISTORY_FILE).write_text(json.dumps(history.to_dict()))
    out = html.write_run_report(tmp_path)
    assert out == tmp_path / _io.HTML_FILE
    page = out.read_text(encoding="utf-8")
    assert f"mindspore_doctor: {tmp_path.name}" in page and page.count("<svg") == 5
    (tmp_path / _io.HISTORY_FILE).unlink()
    assert "<svg" not in html.write_run_report(tmp_path, tmp_path / "lint.html").read_text(encoding="utf-8")


def test_run_directory_without_report_or_with_bad_json_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no doctor_report.json"):
        html.write_run_report(tmp_path)
    (tmp_path / _io.REPORT_FILE).write_text("{truncated")
    with pytest.raises(ValueError, match="cannot read the Doctor run"):
        html.write_run_report(tmp_path)


def test_rule_doc_links_point_at_the_rule_page():
    href = html.rule_doc_href("MSD207")
    assert href.startswith("file://") and href.endswith("/docs/rules/MSD207.md")  # installed: test_packaging.py


def _chart(page, chart_id):
    return page.split(f'id="{chart_id}"', 1)[1].split("</section>", 1)[0]


def test_charts_draw_the_thresholds_the_run_used(tmp_path, monkeypatch):
    """Issue 13: the bounds on the update-ratio and activation charts were the defaults, whatever the run used."""
    import matplotlib

    monkeypatch.setitem(matplotlib.rcParams, "svg.hashsalt", "fixed")  # reproducible SVG ids
    report, history = sample_run()
    run = {"update_ratio_min": 1e-6, "update_ratio_max": 0.5, "dead_relu_fraction": 0.5}
    explicit = html.render_html(report, history, config=DoctorConfig(**run))
    default = html.render_html(report, history)
    for chart in ("chart-update-ratio", "chart-activations"):
        assert _chart(explicit, chart) != _chart(default, chart)
    report.meta["config"] = run  # what Doctor(...) stores in doctor_report.json: msdoctor report draws them
    (tmp_path / _io.REPORT_FILE).write_text(report.to_json())
    (tmp_path / _io.HISTORY_FILE).write_text(json.dumps(history.to_dict()))
    page = html.write_run_report(tmp_path).read_text(encoding="utf-8")
    for chart in ("chart-update-ratio", "chart-activations"):
        assert _chart(page, chart) == _chart(explicit, chart)


def test_a_resolved_finding_shows_its_episode():
    report, history = sample_run()
    report.by_code("MSD207")[0].resolve(50)
    page = html.render_html(report, history)
    row = next(r for r in page.split('<tr class="finding')[1:] if "MSD207" in r)
    assert "sev-info" in row and "40 → 50" in row and "resolved, was warning" in row
    assert "<svg" in _chart(page, "chart-timeline")
    assert "<svg" not in _chart(html.render_html(Report(), history), "chart-timeline")  # no training finding
