"""The Doctor's signals and findings as a MindInsight summary directory.

MindSpore allows one ``SummaryRecord`` per process and ``SummaryCollector``
usually holds it, so the Doctor writes its own event files in the record format
MindInsight reads (the TFRecord framing): ``uint64 length | masked CRC32C of the
length | serialized Event | masked CRC32C of the event``. Messages come from the
protobuf definitions MindSpore ships (``mindspore.train.summary_pb2`` and
``lineage_pb2``).

Per step the writer only keeps the step's numbers in a buffer; the buffer is
encoded and appended to the file with one ``write`` every ``flush_seconds`` and
at :meth:`MindInsightWriter.flush` (call it at epoch end). MindSpore forces
protobuf's pure-Python implementation (about 250 us per event), so scalar
events, the bulk of the file, are encoded directly in the wire format (a test
checks they are byte-identical to ``summary_pb2``'s); histograms and lineage,
written rarely, go through the messages. A killed process leaves
every flushed record readable; MindInsight stops at a torn last record and keeps
everything before it. The lineage file is written whole and atomically at
:meth:`MindInsightWriter.close`.

File names follow what MindInsight 2.3.1 discovers: ``summary.<seconds>`` in the
name, ``_lineage`` at the end for lineage. The ``doctor`` prefix sorts the
Doctor's lineage file after ``SummaryCollector``'s written in the same second,
so the Doctor's lineage (a superset: hyperparameters plus finding columns) is
the one MindInsight keeps for the run.
"""
from __future__ import annotations

import atexit
import functools
import itertools
import math
import os
import platform
import struct
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import google_crc32c
import numpy as np

from mindspore_doctor._io import atomic_write_bytes
from mindspore_doctor.findings import Report, Severity
from mindspore_doctor.signals import StepSignals

TAG_PREFIX = "doctor"
FILE_PREFIX = "doctor"
EVENTS_SUFFIX = "_doctor"
LINEAGE_SUFFIX = "_lineage"
HISTOGRAM_BINS = 30
"""MindInsight drops histograms with more than 90 original buckets."""
TOP_CODES = 3
"""How many of the most severe codes the lineage column lists."""
RELU_LIKE = ("relu", "relu6", "leakyrelu", "elu", "gelu", "silu", "prelu", "hswish", "mish")

_MASK_DELTA = 0xA282EAD8
_file_counter = itertools.count()
_open_writers: dict[str, "MindInsightWriter"] = {}
_open_writers_lock = threading.Lock()


def _summary_pb2() -> Any:
    """MindSpore's own Event/Summary messages (imported lazily: the CLI starts without MindSpore)."""
    from mindspore.train import summary_pb2

    return summary_pb2


def _lineage_pb2() -> Any:
    from mindspore.train import lineage_pb2

    return lineage_pb2


def masked_crc32c(data: bytes) -> int:
    """CRC32C rotated and offset as the TFRecord/MindSpore summary framing stores it."""
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def encode_record(payload: bytes) -> bytes:
    """Frame one serialized event for a summary or lineage file."""
    header = struct.pack("<Q", len(payload))
    return b"".join(
        (header, struct.pack("<I", masked_crc32c(header)), payload, struct.pack("<I", masked_crc32c(payload)))
    )


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64 on the wire: a negative number takes ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(key: bytes, payload: bytes) -> bytes:
    return key + _varint(len(payload)) + payload


@functools.lru_cache(maxsize=4096)
def _scalar_value_prefix(tag: str) -> bytes:
    """``Summary.Value`` up to its float: field 1 ``tag``, then the key of field 3 ``scalar_value``."""
    return _delimited(b"\x0a", tag.encode("utf-8")) + b"\x1d"


def encode_scalar_event(step: int, wall_time: float, scalars: Mapping[str, float]) -> bytes:
    """``Event{wall_time=1, step=2, summary=5{value=1{tag=1, scalar_value=3}}}`` serialized by hand."""
    values = b"".join(
        _delimited(b"\x0a", _scalar_value_prefix(tag) + struct.pack("<f", value)) for tag, value in scalars.items()
    )
    return b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(int(step)) + _delimited(b"\x2a", values)


def decode_records(data: bytes) -> list[bytes]:
    """Payloads of every complete, CRC-valid record, stopping at the first torn or corrupt one."""
    payloads, offset = [], 0
    while offset + 12 <= len(data):
        header = data[offset : offset + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[offset + 8 : offset + 12])
        end = offset + 12 + length + 4
        if header_crc != masked_crc32c(header) or end > len(data):
            break
        payload = data[offset + 12 : offset + 12 + length]
        if struct.unpack("<I", data[end - 4 : end])[0] != masked_crc32c(payload):
            break
        payloads.append(payload)
        offset = end
    return payloads


def _event_file_name(seconds: int, suffix: str) -> str:
    """``doctor.out.events.summary.<seconds>.<pid>-<n>.<host><suffix>``: unique per writer in a process."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in platform.node()) or "host"
    return f"{FILE_PREFIX}.out.events.summary.{seconds}.{os.getpid()}-{next(_file_counter)}.{host}{suffix}"


def _finite(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def spread_evenly(names: list[str], limit: int) -> list[str]:
    """At most ``limit`` names evenly spread over network order, first and last included."""
    if len(names) <= limit:
        return list(names)
    if limit <= 1:
        return names[:limit]
    picks = sorted({round(i * (len(names) - 1) / (limit - 1)) for i in range(limit)})
    return [names[i] for i in picks]


def fill_histogram(histogram: Any, values: np.ndarray, bins: int = HISTOGRAM_BINS) -> None:
    """Fill a ``Summary.Histogram`` message the way MindInsight plots it (count, min/max/sum, buckets)."""
    values = np.asarray(values, dtype=np.float64).ravel()
    finite = values[np.isfinite(values)]
    histogram.count = int(values.size)
    histogram.nan_count = int(np.isnan(values).sum())
    histogram.pos_inf_count = int(np.isposinf(values).sum())
    histogram.neg_inf_count = int(np.isneginf(values).sum())
    if not finite.size:
        return
    low, high = float(finite.min()), float(finite.max())
    histogram.min, histogram.max, histogram.sum = low, high, float(finite.sum())
    if not low < high:
        low, high = low - 0.5, high + 0.5
    counts, edges = np.histogram(finite, bins=bins, range=(low, high))
    for count, left, right in zip(counts, edges[:-1], edges[1:]):
        bucket = histogram.buckets.add()
        bucket.left, bucket.width, bucket.count = float(left), float(right - left), int(count)


def most_severe_codes(report: Report, limit: int = TOP_CODES) -> list[str]:
    """Distinct codes, most severe first (then most frequent, then by code)."""
    worst: dict[str, tuple[int, int]] = {}
    for f in report.findings:
        rank, count = worst.get(f.code, (-1, 0))
        worst[f.code] = (max(rank, f.severity.rank), count + 1)
    return sorted(worst, key=lambda c: (-worst[c][0], -worst[c][1], c))[:limit]


def lineage_values(report: Report) -> dict[str, int | str]:
    """The custom-lineage columns MindInsight's Model Lineage shows as ``user_defined/<key>``."""
    counts = report.counts()
    worst = max((f.severity for f in report.findings), key=lambda s: s.rank, default=None)
    resolved = sum(1 for f in report.findings if f.resolved)
    return {
        "doctor_errors": counts[Severity.ERROR.value],
        "doctor_warnings": counts[Severity.WARNING.value],
        "doctor_infos": counts[Severity.INFO.value],
        "doctor_findings": len(report),
        "doctor_open": counts[Severity.ERROR.value] + counts[Severity.WARNING.value],
        "doctor_resolved": resolved,
        "doctor_worst_severity": worst.value if worst else "none",
        "doctor_top_codes": ",".join(most_severe_codes(report)) or "none",
    }


def finding_count_scalars(report: Report) -> dict[str, float]:
    """``findings/<severity>`` and ``findings/<code>``: cumulative counts, one point per written step."""
    scalars = {f"findings/{severity}": float(n) for severity, n in report.counts().items()}
    for f in report.findings:
        key = f"findings/{f.code}"
        scalars[key] = scalars.get(key, 0.0) + 1.0
    return scalars


def step_scalars(signals: StepSignals, layers: Iterable[str], cells: Iterable[str]) -> dict[str, float]:
    """Scalar tags (without the ``doctor/`` prefix) of one step's signals, limited to chosen layers/cells."""
    scalars: dict[str, Any] = {"loss": signals.loss, "grad_norm/global": signals.global_grad_norm}
    if signals.overflow is not None:
        scalars["overflow"] = float(signals.overflow)
    scalars["loss_scale"] = signals.loss_scale
    for name in layers if (signals.grad_norm or signals.update_ratio) else ():
        scalars[f"grad_norm/{name}"] = signals.grad_norm.get(name)
        scalars[f"update_ratio/{name}"] = signals.update_ratio.get(name)
    for cell in cells:
        stats = signals.activations.get(cell)
        if stats is None:
            continue
        scalars[f"activation_mean_abs/{cell}"] = stats.mean_abs
        if stats.kind.lower() in RELU_LIKE:
            scalars[f"dead_fraction/{cell}"] = stats.dead_fraction
        else:
            scalars[f"saturated_fraction/{cell}"] = stats.saturated_fraction
    return {k: float(v) for k, v in scalars.items() if _finite(v)}


class MindInsightWriter:
    """Appends the Doctor's scalars and histograms to one summary file in ``summary_dir``.

    One writer per directory in a process: opening a second one on the same
    directory (a new run) closes the first, so several runs in one process each
    get their own file.
    """

    def __init__(
        self,
        summary_dir: str | os.PathLike,
        *,
        max_layers: int = 24,
        histogram_layers: int = 4,
        flush_seconds: float = 10.0,
    ) -> None:
        self.summary_dir = Path(summary_dir)
        self.summary_dir.mkdir(parents=True, exist_ok=True)
        self.max_layers = max_layers
        self.histogram_layers = histogram_layers
        self.flush_seconds = flush_seconds
        self.path = self.summary_dir / _event_file_name(int(time.time()), EVENTS_SUFFIX)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._pending: list[bytes | tuple[int, float, dict[str, float]]] = []
        self._counts: tuple[int, dict[str, float]] = (-1, {})
        self._last_flush = time.monotonic()
        self._layers: list[str] | None = None
        self._cells: list[str] | None = None
        self._last_loss: float | None = None
        self._last_step = 0
        pb = _summary_pb2()
        self._event_cls = pb.Event
        self._append(pb.Event(wall_time=time.time(), version="MindSpore.Event:1"))
        self.flush()
        key = os.path.realpath(self.summary_dir)
        with _open_writers_lock:
            previous = _open_writers.get(key)
            _open_writers[key] = self
        if previous is not None:
            previous.close()

    @property
    def closed(self) -> bool:
        return self._fd is None

    def _append(self, event: Any) -> None:
        self._pending.append(encode_record(event.SerializeToString()))

    def _append_scalars(self, step: int, scalars: dict[str, float]) -> None:
        """Keep the numbers only; :meth:`flush` encodes them."""
        self._pending.append((int(step), time.time(), scalars))

    def _finding_counts(self, report: Report) -> dict[str, float]:
        """Recomputed only when the report grew (findings are only ever added)."""
        if self._counts[0] != len(report.findings):
            self._counts = (len(report.findings), finding_count_scalars(report))
        return self._counts[1]

    def _choose_series(self, signals: StepSignals) -> None:
        """Fix which layers and cells get per-layer tags (MindInsight keeps 300 tags per run)."""
        if self._layers is None and (signals.grad_norm or signals.update_ratio):
            names = list(dict.fromkeys([*signals.grad_norm, *signals.update_ratio]))
            self._layers = spread_evenly(names, self.max_layers)
        if self._cells is None and signals.activations:
            cells = sorted(signals.activations, key=lambda c: signals.activations[c].order)
            self._cells = spread_evenly(cells, max(self.max_layers // 2, 1))

    def write_step(self, signals: StepSignals, report: Report | None = None,
                   episodes: Mapping[str, float] | None = None) -> None:
        """Buffer one step's signals (and the report's finding counts so far, and ``episodes``: the lifecycle's
        ``findings/<code>/open|resolved`` counts). Cheap: no I/O most steps."""
        if self.closed:
            return
        self._choose_series(signals)
        scalars = step_scalars(signals, self._layers or (), self._cells or ())
        if report is not None:
            scalars.update(self._finding_counts(report))
        scalars.update(episodes or {})
        if _finite(signals.loss):
            self._last_loss = float(signals.loss)
        self._last_step = max(self._last_step, int(signals.step))
        if scalars:
            self._append_scalars(signals.step, scalars)
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def histogram_targets(self, report: Report | None, parameter_order: list[str]) -> list[str]:
        """The parameters worth a histogram: those named in findings (most severe first), then first and last."""
        named = [
            f.location["parameter"]
            for f in (report.sorted() if report is not None else [])
            if f.location.get("parameter") in parameter_order
        ]
        ends = [parameter_order[0], parameter_order[-1]] if parameter_order else []
        return list(dict.fromkeys([*named, *ends]))[: self.histogram_layers]

    def write_histograms(
        self,
        step: int,
        weights: Mapping[str, np.ndarray] | None = None,
        grads: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Buffer weight/gradient histograms (tags ``doctor/weight/<name>``, ``doctor/grad/<name>``)."""
        if self.closed:
            return
        event = self._event_cls(wall_time=time.time(), step=int(step))
        for kind, arrays in (("weight", weights or {}), ("grad", grads or {})):
            for name, values in arrays.items():
                value = event.summary.value.add(tag=f"{TAG_PREFIX}/{kind}/{name}")
                fill_histogram(value.histogram, values)
        if event.summary.value:
            self._append(event)

    def flush(self) -> None:
        """Append everything buffered with one write (no fsync: the page cache survives a killed process)."""
        if self._fd is None or not self._pending:
            return
        pending, self._pending = self._pending, []
        data = b"".join(
            item if isinstance(item, bytes) else encode_record(encode_scalar_event(
                item[0], item[1], {f"{TAG_PREFIX}/{tag}": value for tag, value in item[2].items()}))
            for item in pending
        )
        os.write(self._fd, data)
        self._last_flush = time.monotonic()

    def close(self, report: Report | None = None, run_info: Mapping[str, Any] | None = None,
              episodes: Mapping[str, float] | None = None) -> Path | None:
        """Flush and close the event file; with a report, also write the lineage file. Returns its path.

        The final counts are written at the last step: resolved findings (the lifecycle) count as info there.
        """
        if report is not None and not self.closed:
            self._append_scalars(self._last_step, {**finding_count_scalars(report), **(episodes or {})})
        self.flush()
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        with _open_writers_lock:
            key = os.path.realpath(self.summary_dir)
            if _open_writers.get(key) is self:
                del _open_writers[key]
        if report is None:
            return None
        info = dict(run_info or {})
        info.setdefault("loss", self._last_loss)
        return write_lineage(self.summary_dir, report, info)


@atexit.register
def _flush_open_writers() -> None:
    """A run that never reached ``on_train_end`` (exception, sys.exit) still keeps its buffered steps."""
    for writer in list(_open_writers.values()):
        writer.flush()


_HYPER_FIELDS = {
    "optimizer": str,
    "learning_rate": float,
    "loss_function": str,
    "epoch": int,
    "parallel_mode": str,
    "device_num": int,
    "batch_size": int,
}


def write_lineage(summary_dir: str | os.PathLike, report: Report, run_info: Mapping[str, Any] | None = None) -> Path:
    """Write a ``*_lineage`` file: the run's hyperparameters (``run_info``) and the Doctor's finding columns.

    MindInsight needs a train lineage in the file to list the run, and a later
    train lineage replaces an earlier one, so this one carries everything
    ``SummaryCollector`` would put there that the Doctor knows: ``optimizer``,
    ``learning_rate``, ``loss_function``, ``epoch``, ``parallel_mode``,
    ``device_num``, ``batch_size``, ``train_dataset_size``, ``network``, ``loss``
    (unknown keys are ignored, missing ones left empty).
    """
    pb = _lineage_pb2()
    info = dict(run_info or {})
    train = pb.LineageEvent(wall_time=time.time())
    hyper = train.train_lineage.hyper_parameters
    for key, kind in _HYPER_FIELDS.items():
        if info.get(key) is not None:
            setattr(hyper, key, kind(info[key]))
    if info.get("train_dataset_size") is not None:
        train.train_lineage.train_dataset.train_dataset_size = int(info["train_dataset_size"])
    train.train_lineage.algorithm.network = str(info.get("network") or "")
    if _finite(info.get("loss")):
        train.train_lineage.algorithm.loss = float(info["loss"])
    custom = pb.LineageEvent(wall_time=time.time())
    for key, value in lineage_values(report).items():
        entry = custom.user_defined_info.user_info.add()
        (entry.map_int32 if isinstance(value, int) else entry.map_str)[key] = value
    data = b"".join(encode_record(e.SerializeToString()) for e in (train, custom))
    return atomic_write_bytes(Path(summary_dir) / _event_file_name(int(time.time()), LINEAGE_SUFFIX), data)


def read_scalars(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """Scalars of one event file as ``{tag: [(step, value), ...]}`` (tests and ``msdoctor`` tooling)."""
    pb = _summary_pb2()
    series: dict[str, list[tuple[int, float]]] = {}
    for payload in decode_records(Path(path).read_bytes()):
        event = pb.Event.FromString(payload)
        for value in event.summary.value:
            if value.HasField("scalar_value"):
                series.setdefault(value.tag, []).append((event.step, value.scalar_value))
    return series
