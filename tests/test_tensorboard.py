"""The TensorBoard export, read back with TensorBoard's own event reader (the server: test_tensorboard_server.py)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboardX.event_file_writer import EventsWriter

from mindspore_doctor import cli
from mindspore_doctor._io import HISTORY_FILE, REPORT_FILE
from mindspore_doctor.catalog import make_finding
from mindspore_doctor.export import tensorboard as tb
from mindspore_doctor.findings import Report
from mindspore_doctor.signals import StepSignals, TrainingHistory
from test_mindinsight import disk_full, open_descriptors
from test_mindinsight_server import train_tiny_net


def _read(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
    events.Reload()
    return events


def _text(events: EventAccumulator, index: int = -1) -> str:
    return events.Tensors(tb.FINDINGS_TAG)[index].tensor_proto.string_val[0].decode()


def _report() -> Report:
    report = Report()
    report.add(make_finding("MSD104", "`head.dropout` drops 90 % | of activations\n(p=0.9).",
                            location={"cell": "head.dropout", "file": "/home/me/project/model.py", "line": 12},
                            suggestion="Use p=0.1."))
    report.add(make_finding("MSD201", "loss is nan", step=9))
    report.add(make_finding("MSD002", "skipped", location={"check": "x"}))
    return report


def test_findings_table_most_severe_first_one_row_each_cells_escaped():
    diagnosis = {"causes": [{"title": "Numerical instability", "category": "numerics", "confidence": 0.8,
                             "evidence": [{"code": "MSD201", "weight": 3}, {"code": "MSD104", "weight": -1}],
                             "remedies": ["Add an epsilon.", "Lower the learning rate."]}]}
    text = tb.findings_markdown(_report(), diagnosis, step=12)
    lines = text.splitlines()
    assert lines[0].startswith("**mindspore_doctor**: 3 finding(s): 1 error(s), 1 warning(s), 1 info (as of step 12)")
    (cause,) = [line for line in lines if line.startswith("1. ")]
    assert "**Numerical instability**" in cause and "confidence 80%" in cause and "evidence: MSD201." in cause
    assert "(1) Add an epsilon. (2) Lower the learning rate." in cause
    header = lines.index("| severity | code | location | step | message | fix |")
    assert header > lines.index(cause)  # the diagnosis above the table
    rows = lines[header + 2:]
    assert [row.split(" | ")[1].split()[0] for row in rows] == ["MSD201", "MSD104", "MSD002"]
    dropout = rows[1]
    assert dropout.count(" | ") == 5  # the pipe in the message is escaped, the line break gone
    assert "90 % \\| of activations (p=0.9)." in dropout and dropout.endswith("| Use p=0.1. |")
    assert tb._cell("`a_b` and __init__ * 2 [x]") == "`a_b` and \\_\\_init\\_\\_ \\* 2 \\[x\\]"  # code kept
    assert "| head.dropout model.py:12 |" in dropout  # the file by its name: the Text tab is narrow
    assert "| 9 |" in rows[0]


def test_findings_table_of_a_clean_run_and_of_no_diagnosis():
    assert tb.findings_markdown(Report(), None, final=True) == (
        "**mindspore_doctor**: 0 finding(s): 0 error(s), 0 warning(s), 0 info (final, end of training).\n")
    assert "Diagnosis" not in tb.findings_markdown(_report(), {"causes": []})


def test_writer_series_histograms_table_layout_and_hparams(tmp_path):
    run_info = {"optimizer": "Momentum", "learning_rate": 0.05, "epoch": 2, "batch_size": None, "network": "Net"}
    writer = tb.TensorBoardWriter(tmp_path, run_info=run_info, flush_seconds=3600)
    report = Report()
    for step in range(1, 7):
        signals = StepSignals(step=step, loss=1.0 / step)
        if step % 3 == 0:
            signals.grad_norm, signals.update_ratio = {"fc.weight": 0.5 * step}, {"fc.weight": 1e-3}
        if step == 4:
            report.add(make_finding("MSD104", "dropout", location={"cell": "drop"}))
        writer.write_step(signals, report)
    values = np.array([0.0, 1.0, np.nan, np.inf, 3.0])
    writer.write_histograms(6, weights={"fc.weight": values}, updates={"fc.weight": values * 1e-3})
    writer.write_findings(report, None, 6)
    path = writer.close(report, diagnosis=None)
    assert path.name.startswith("events.out.tfevents.") and path.name.endswith(".doctor")

    events = _read(tmp_path)
    assert [(e.step, e.value) for e in events.Scalars("doctor/loss")] == [(s, pytest.approx(1 / s)) for s in range(1, 7)]
    assert [e.step for e in events.Scalars("doctor/grad_norm/fc.weight")] == [3, 6]
    # counts only when they change (with the old value at the step before: a step, not a ramp), and at the end
    assert [(e.step, e.value) for e in events.Scalars("doctor/findings/warning")] == [(1, 0), (3, 0), (4, 1), (6, 1)]
    assert [(e.step, e.value) for e in events.Scalars("doctor/findings/MSD104")] == [(4, 1), (6, 1)]
    weight = events.Histograms("doctor/weight/fc.weight")[0]
    assert (weight.step, weight.histogram_value.num, weight.histogram_value.max) == (6, 3, 3.0)  # finite values only
    assert events.Histograms("doctor/update/fc.weight")[0].histogram_value.max == pytest.approx(3e-3)
    texts = events.Tensors(tb.FINDINGS_TAG)
    assert [t.step for t in texts] == [6, 6] and "(final, end of training)" in _text(events)
    assert "| warning | MSD104 dropout-rate-suspicious | drop |" in _text(events)
    layout = events.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0]
    assert b"Doctor: findings" in layout and b"^doctor/update_ratio/" in layout

    hparams = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/session_start_info"])
    assert {k: v.string_value or v.number_value for k, v in start.session_start_info.hparams.items()} == {
        "optimizer": "Momentum", "learning_rate": 0.05, "epoch": 2, "network": "Net"}  # no None: no null in HParams
    experiment = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == list(tb.HPARAM_METRICS)
    end = plugin_data_pb2.HParamsPluginData.FromString(hparams["_hparams_/session_end_info"]).session_end_info
    assert 0 < start.session_start_info.start_time_secs <= end.end_time_secs  # tensorboardX leaves them at 0


def test_training_writes_tensorboard_only_when_asked(tmp_path):
    train_tiny_net(tmp_path / "plain", epochs=1)
    assert not list((tmp_path / "plain").glob("*tfevents*"))
    doctor = train_tiny_net(tmp_path / "tb", epochs=2, tensorboard=True)
    (path,) = (tmp_path / "tb").glob("events.out.tfevents.*.doctor")
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    events = _read(tmp_path / "tb")
    history = json.loads((tmp_path / "tb" / "doctor_history.json").read_text())
    assert [e.step for e in events.Scalars("doctor/loss")] == [s["step"] for s in history["steps"]]
    assert [t.step for t in events.Tensors(tb.FINDINGS_TAG)] == [6, 12, 12]  # each epoch end, then final
    table = _text(events)
    assert all(f.code in table for f in doctor.report.findings)
    assert any(tag.startswith("doctor/update/") for tag in events.Tags()["histograms"])  # probe steps
    assert not [f for f in doctor.report.findings if f.code == "MSD001"]


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_missing_optional_packages_are_an_info_not_an_internal_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` raises ModuleNotFoundError
    monkeypatch.setitem(sys.modules, "jinja2", None)
    monkeypatch.delitem(sys.modules, "mindspore_doctor.export.html", raising=False)
    doctor = train_tiny_net(tmp_path, epochs=1, tensorboard=True)
    codes = [f.code for f in doctor.report.findings]
    assert "MSD001" not in codes
    skipped = {f.location["check"]: f for f in doctor.report.by_code("MSD002")}
    assert "pip install tensorboardX" in skipped["tensorboard"].message
    assert "pip install jinja2" in skipped["html-report"].message
    assert skipped["tensorboard"].severity.value == "info"
    saved = json.loads((tmp_path / "doctor_report.json").read_text())  # said once, and in the saved report too
    assert sorted(f["location"]["check"] for f in saved["findings"] if f["code"] == "MSD002") == [
        "html-report", "tensorboard"]
    assert list(tmp_path.glob("*_doctor"))  # MindInsight still written


def test_report_converts_a_finished_run_once(tmp_path, capsys):
    doctor = train_tiny_net(tmp_path, epochs=2)  # made without TensorBoard
    assert cli.main(["report", str(tmp_path), "--tensorboard"]) == cli.EXIT_OK
    (path,) = tmp_path.glob("events.out.tfevents.*.doctor")
    assert f"wrote {path}" in capsys.readouterr().err
    events = _read(tmp_path)
    history = json.loads((tmp_path / "doctor_history.json").read_text())
    assert [(e.step, e.value) for e in events.Scalars("doctor/loss")] == [
        (s["step"], pytest.approx(s["loss"], rel=1e-6)) for s in history["steps"]]
    assert all(f.code in _text(events) for f in doctor.report.findings)
    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["optimizer"].string_value == "Momentum"  # from the report's meta["run"]
    # again: the run already has the Doctor's TensorBoard file, a second one would double every series
    assert cli.main(["report", str(tmp_path), "--tensorboard"]) == cli.EXIT_USAGE
    assert "already has" in capsys.readouterr().err
    assert len(list(tmp_path.glob("events.out.tfevents.*.doctor"))) == 1


def test_a_conversion_that_fails_midway_leaves_no_file_and_can_run_again(tmp_path, monkeypatch):
    history = TrainingHistory(steps=[StepSignals(step=step, loss=1.0 / step) for step in range(1, 6)])
    (tmp_path / REPORT_FILE).write_text(_report().to_json())
    (tmp_path / HISTORY_FILE).write_text(json.dumps(history.to_dict()))
    before = sorted(tmp_path.iterdir())
    write_event = EventsWriter.write_event

    def disk_full_at_step_3(self, event):
        if event.step == 3:
            disk_full()
        return write_event(self, event)

    monkeypatch.setattr(EventsWriter, "write_event", disk_full_at_step_3)
    with pytest.raises(OSError, match="No space left"):
        tb.convert_run(tmp_path)
    assert sorted(tmp_path.iterdir()) == before  # no half-written events file, no staging folder
    monkeypatch.undo()
    path = tb.convert_run(tmp_path)
    assert path.parent == tmp_path and sorted(tmp_path.iterdir()) == sorted([*before, path])
    assert [e.step for e in _read(tmp_path).Scalars("doctor/loss")] == [1, 2, 3, 4, 5]


def test_close_releases_the_file_when_its_last_write_fails(tmp_path, monkeypatch):
    writer = tb.TensorBoardWriter(tmp_path, flush_seconds=3600)
    writer.write_step(StepSignals(step=1, loss=1.0))
    monkeypatch.setattr(writer, "_append", disk_full)
    with pytest.raises(OSError, match="No space left"):
        writer.close(_report())
    assert writer.closed and not open_descriptors(writer.path)
