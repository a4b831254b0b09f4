"""The MindInsight writer on hand-built signals: framing, tags, bounds, buffering, lineage, torn files."""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.export import mindinsight as mi
from mindspore_doctor.findings import Report
from mindspore_doctor.signals import ActivationStats, StepSignals


def _signals(step: int, n_params: int = 3) -> StepSignals:
    return StepSignals(
        step=step,
        loss=1.0 / step,
        grad_norm={f"layer{i}.weight": 0.1 * (i + 1) * step for i in range(n_params)},
        update_ratio={f"layer{i}.weight": 1e-3 * (i + 1) for i in range(n_params)},
        activations={
            "relu": ActivationStats(kind="relu", mean_abs=0.5, dead_fraction=0.25, order=0),
            "sig": ActivationStats(kind="sigmoid", mean_abs=0.9, saturated_fraction=0.75, order=1),
        },
    )


def _flat(series: list[tuple[int, float]]) -> list[float]:
    """[(step, value), ...] as one flat list, for pytest.approx on float32 values."""
    return [x for point in series for x in point]


def _report() -> Report:
    report = Report()
    report.add(make_finding("MSD212", "`relu` is dead", location={"cell": "relu"}, step=2))
    report.add(make_finding("MSD201", "loss is NaN", step=3))
    report.add(make_finding("MSD212", "`relu2` is dead", location={"cell": "relu2"}, step=3))
    report.add(make_finding("MSD104", "dropout", location={"cell": "drop"}))
    return report


def test_record_framing_is_byte_identical_to_mindspore(tmp_path):
    import mindspore as ms

    with ms.SummaryRecord(str(tmp_path)) as record:
        record.add_value("scalar", "loss", ms.Tensor(np.float32(1.5)))
        record.record(3)
    (path,) = [p for p in tmp_path.iterdir() if "_lineage" not in p.name]
    data = path.read_bytes()
    payloads = mi.decode_records(data)
    assert len(payloads) == 2  # the version event, then step 3
    assert b"".join(mi.encode_record(p) for p in payloads) == data


@pytest.mark.parametrize("step", [0, 1, 300, 2**40, -1])
def test_hand_encoded_scalar_events_are_byte_identical_to_the_proto(step):
    scalars = {"doctor/loss": 0.25, "doctor/grad_norm/é.weight": 0.0, "x" * 200: -3.5e30}
    event = mi._summary_pb2().Event(wall_time=1795976022.125, step=step)
    for tag, value in scalars.items():
        event.summary.value.add(tag=tag, scalar_value=value)
    assert mi.encode_scalar_event(step, 1795976022.125, scalars) == event.SerializeToString()


def test_decode_stops_at_a_corrupt_or_torn_record():
    records = [mi.encode_record(b"first"), mi.encode_record(b"second")]
    assert mi.decode_records(b"".join(records)) == [b"first", b"second"]
    flipped = bytearray(b"".join(records))
    flipped[-6] ^= 0xFF  # a byte of the second payload
    assert mi.decode_records(bytes(flipped)) == [b"first"]
    assert mi.decode_records(b"".join(records)[:-3]) == [b"first"]


def test_step_signals_become_doctor_scalars(tmp_path):
    writer = mi.MindInsightWriter(tmp_path)
    report = _report()
    for step in (1, 2):
        writer.write_step(_signals(step), report)
    writer.close()
    scalars = mi.read_scalars(writer.path)
    assert scalars["doctor/loss"] == [(1, 1.0), (2, 0.5)]
    assert _flat(scalars["doctor/grad_norm/layer2.weight"]) == pytest.approx(_flat([(1, 0.3), (2, 0.6)]))
    assert scalars["doctor/grad_norm/global"][0][1] == pytest.approx(_signals(1).global_grad_norm)
    assert _flat(scalars["doctor/update_ratio/layer0.weight"]) == pytest.approx(_flat([(1, 1e-3), (2, 1e-3)]))
    assert scalars["doctor/dead_fraction/relu"] == [(1, 0.25), (2, 0.25)]
    assert scalars["doctor/saturated_fraction/sig"] == [(1, 0.75), (2, 0.75)]
    assert "doctor/dead_fraction/sig" not in scalars
    assert scalars["doctor/findings/MSD212"] == [(1, 2.0), (2, 2.0)]
    assert scalars["doctor/findings/error"][-1][1] == 1.0
    assert scalars["doctor/findings/warning"][-1][1] == 3.0


def test_nonfinite_values_are_not_written(tmp_path):
    writer = mi.MindInsightWriter(tmp_path)
    writer.write_step(StepSignals(step=1, loss=float("nan"), grad_norm={"w": float("inf")}))
    writer.write_step(StepSignals(step=2, loss=0.5))
    writer.close()
    scalars = mi.read_scalars(writer.path)
    assert scalars["doctor/loss"] == [(2, 0.5)]
    assert "doctor/grad_norm/w" not in scalars


def test_per_layer_series_are_bounded_and_span_the_network(tmp_path):
    writer = mi.MindInsightWriter(tmp_path, max_layers=8)
    writer.write_step(_signals(1, n_params=100))
    writer.close()
    layers = [t for t in mi.read_scalars(writer.path) if t.startswith("doctor/grad_norm/layer")]
    assert len(layers) == 8
    assert {"doctor/grad_norm/layer0.weight", "doctor/grad_norm/layer99.weight"} <= set(layers)


def test_steps_are_buffered_until_flush(tmp_path):
    writer = mi.MindInsightWriter(tmp_path, flush_seconds=3600)
    size_after_open = writer.path.stat().st_size
    started = time.perf_counter()
    for step in range(1, 201):
        writer.write_step(_signals(step, n_params=24), _report())
    per_step = (time.perf_counter() - started) / 200
    assert writer.path.stat().st_size == size_after_open  # no I/O per step
    writer.flush()
    assert len(mi.read_scalars(writer.path)["doctor/loss"]) == 200
    writer.close()
    assert per_step < 2e-3, f"write_step took {per_step * 1e6:.0f} us"


def test_a_torn_last_record_keeps_every_step_before_it(tmp_path):
    """What a SIGKILL in the middle of an append leaves behind."""
    writer = mi.MindInsightWriter(tmp_path)
    for step in (1, 2, 3):
        writer.write_step(_signals(step))
    writer.close()
    whole = writer.path.read_bytes()
    writer.path.write_bytes(whole[:-10])
    assert [s for s, _ in mi.read_scalars(writer.path)["doctor/loss"]] == [1, 2]


def test_histograms_of_the_layers_that_matter(tmp_path):
    writer = mi.MindInsightWriter(tmp_path, histogram_layers=3)
    order = [f"layer{i}.weight" for i in range(6)]
    report = Report()
    report.add(make_finding("MSD207", "vanishing", location={"parameter": "layer3.weight"}))
    assert writer.histogram_targets(report, order) == ["layer3.weight", "layer0.weight", "layer5.weight"]
    assert writer.histogram_targets(None, order[:1]) == ["layer0.weight"]
    values = np.array([0.0, 1.0, 2.0, 3.0, np.nan], dtype=np.float32)
    writer.write_histograms(7, weights={"layer3.weight": values}, updates={"layer3.weight": values * 2})
    writer.close()
    pb = mi._summary_pb2()
    events = [pb.Event.FromString(p) for p in mi.decode_records(writer.path.read_bytes())]
    (event,) = [e for e in events if e.summary.value]
    hist = {v.tag: v.histogram for v in event.summary.value}
    weight = hist["doctor/weight/layer3.weight"]
    assert (event.step, weight.count, weight.nan_count, weight.min, weight.max, weight.sum) == (7, 5, 1, 0, 3, 6)
    assert sum(b.count for b in weight.buckets) == 4
    assert len(weight.buckets) <= 90  # MindInsight drops histograms with more buckets
    assert hist["doctor/update/layer3.weight"].max == 6


def test_lineage_columns_rank_codes_by_severity():
    values = mi.lineage_values(_report())
    assert values == {
        "doctor_errors": 1,
        "doctor_warnings": 3,
        "doctor_infos": 0,
        "doctor_findings": 4,
        "doctor_open": 4,
        "doctor_resolved": 0,
        "doctor_worst_severity": "error",
        "doctor_top_codes": "MSD201,MSD212,MSD104",
    }
    assert mi.lineage_values(Report())["doctor_top_codes"] == "none"


def test_close_writes_a_lineage_file_mindinsight_can_list(tmp_path):
    writer = mi.MindInsightWriter(tmp_path)
    writer.write_step(_signals(1))
    lineage = writer.close(_report(), {"optimizer": "Momentum", "learning_rate": 0.01, "epoch": 2})
    assert lineage.name.endswith("_lineage") and "summary." in lineage.name
    pb = mi._lineage_pb2()
    train, custom = [pb.LineageEvent.FromString(p) for p in mi.decode_records(lineage.read_bytes())]
    hyper = train.train_lineage.hyper_parameters
    assert (hyper.optimizer, hyper.epoch) == ("Momentum", 2)
    assert hyper.learning_rate == pytest.approx(0.01)
    assert train.train_lineage.algorithm.loss == 1.0  # the last finite loss the writer saw
    keys = {k for info in custom.user_defined_info.user_info for k in [*info.map_int32, *info.map_str]}
    assert keys == set(mi.lineage_values(Report()))


def test_one_writer_per_directory_and_one_file_per_run(tmp_path):
    first = mi.MindInsightWriter(tmp_path)
    first.write_step(_signals(1))
    second = mi.MindInsightWriter(tmp_path)
    assert first.closed and not second.closed
    assert mi.read_scalars(first.path)["doctor/loss"] == [(1, 1.0)]  # the first run's buffer was kept
    other = mi.MindInsightWriter(tmp_path / "other")
    assert not second.closed
    for writer in (second, other):
        writer.close()
    assert first.path != second.path


def test_finding_episodes_become_open_and_resolved_series(tmp_path):
    """The finding lifecycle in MindInsight: per transient code, how many findings hold and how many passed."""
    writer = mi.MindInsightWriter(tmp_path)
    report = Report()
    report.add(make_finding("MSD202", "diverging", step=30))
    writer.write_step(StepSignals(step=40, loss=5.0), report, episodes={"findings/MSD202/open": 1.0,
                                                                         "findings/MSD202/resolved": 0.0})
    report.findings[0].resolve(60)
    writer.write_step(StepSignals(step=60, loss=0.5), report, episodes={"findings/MSD202/open": 0.0,
                                                                         "findings/MSD202/resolved": 1.0})
    writer.close(report, episodes={"findings/MSD202/open": 0.0, "findings/MSD202/resolved": 1.0})
    scalars = mi.read_scalars(writer.path)
    assert scalars["doctor/findings/MSD202/open"] == [(40, 1.0), (60, 0.0), (60, 0.0)]
    assert scalars["doctor/findings/MSD202/resolved"][-1] == (60, 1.0)
    assert scalars["doctor/findings/error"][-1] == (60, 0.0) and scalars["doctor/findings/info"][-1] == (60, 1.0)


def open_descriptors(path: Path) -> list[str]:
    """This process's file descriptors open on ``path`` (Linux: ``/proc/self/fd``)."""
    folder = "/proc/self/fd"
    return [fd for fd in os.listdir(folder) if os.path.realpath(os.path.join(folder, fd)) == str(path.resolve())]


def disk_full(*args) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_close_releases_the_file_when_its_last_write_fails(tmp_path, monkeypatch):
    writer = mi.MindInsightWriter(tmp_path)
    writer.write_step(_signals(1))
    monkeypatch.setattr(writer, "_append", disk_full)
    with pytest.raises(OSError, match="No space left"):
        writer.close(_report())
    assert writer.closed and not open_descriptors(writer.path)
    mi.MindInsightWriter(tmp_path).close()  # the directory is free for the next run's writer
