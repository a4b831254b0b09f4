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

import functools
import os
import platform
import struct
import time
from pathlib import Path
from typing import Any, Mapping

import crc32c
import numpy as np

from mindspore_doctor._io import atomic_write_bytes
from mindspore_doctor.export.summary import TAG_PREFIX, BufferedSummaryWriter, finite, unique_file_tag
from mindspore_doctor.findings import Report, Severity

FILE_PREFIX = "doctor"
EVENTS_SUFFIX = "_doctor"
LINEAGE_SUFFIX = "_lineage"
HISTOGRAM_BINS = 30
"""MindInsight drops histograms with more than 90 original buckets."""
TOP_CODES = 3
"""How many of the most severe codes the lineage column lists."""

_MASK_DELTA = 0xA282EAD8


def _summary_pb2() -> Any:
    """MindSpore's own Event/Summary messages (imported lazily: the CLI starts without MindSpore)."""
    from mindspore.train import summary_pb2

    return summary_pb2


def _lineage_pb2() -> Any:
    from mindspore.train import lineage_pb2

    return lineage_pb2


def masked_crc32c(data: bytes) -> int:
    """CRC32C rotated and offset as the TFRecord/MindSpore summary framing stores it."""
    crc = crc32c.crc32c(data)
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
    return f"{FILE_PREFIX}.out.events.summary.{seconds}.{unique_file_tag()}.{host}{suffix}"


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


class MindInsightWriter(BufferedSummaryWriter):
    """Appends the Doctor's scalars and histograms to one summary file in ``summary_dir``."""

    check = "mindinsight"
    # no update histograms on probe steps: a histogram message costs ~1.5 ms per tensor in pure-Python protobuf

    def __init__(self, summary_dir: str | os.PathLike, **options: Any) -> None:
        super().__init__(summary_dir, **options)
        self.path = self.summary_dir / _event_file_name(int(time.time()), EVENTS_SUFFIX)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        pb = _summary_pb2()
        self._event_cls = pb.Event
        self._pending.append(encode_record(pb.Event(wall_time=time.time(), version="MindSpore.Event:1")
                                           .SerializeToString()))
        self.flush()
        self._register()

    @property
    def closed(self) -> bool:
        return self._fd is None

    def _histogram_event(self, step: int, arrays: Mapping[str, np.ndarray]) -> bytes:
        event = self._event_cls(wall_time=time.time(), step=step)
        for tag, values in arrays.items():
            fill_histogram(event.summary.value.add(tag=tag).histogram, values)
        return encode_record(event.SerializeToString())

    def _append(self, pending: list[Any]) -> None:
        """One ``write`` of every buffered record; scalar events encoded here, by hand (see the module doc)."""
        data = b"".join(
            item if isinstance(item, bytes) else encode_record(encode_scalar_event(
                item[0], item[1], {f"{TAG_PREFIX}/{tag}": value for tag, value in item[2].items()}))
            for item in pending
        )
        os.write(self._fd, data)

    def close(self, report: Report | None = None, run_info: Mapping[str, Any] | None = None,
              episodes: Mapping[str, float] | None = None, diagnosis: Mapping[str, Any] | None = None) -> Path | None:
        """Flush and close the event file; with a report, also write the lineage file (``run_info``: the
        hyperparameters; the diagnosis has no place in MindInsight). Returns the lineage file's path.

        The file is closed even when the last write fails (a full disk): the descriptor is released and a new
        writer can take the directory over."""
        try:
            self._final_counts(report, episodes)
            self.flush()
            if self._fd is not None:
                os.fsync(self._fd)
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._unregister()
        if report is None:
            return None
        info = dict(run_info or {})
        info.setdefault("loss", self.last_loss)
        return write_lineage(self.summary_dir, report, info)


_HYPER_FIELDS = {
    "optimizer": str,
    "learning_rate": float,
    "loss_function": str,
    "epoch": int,
    "parallel_mode": str,
    "device_num": int,
    "batch_size": int,
}


_RUN_FIELDS = ("train_dataset_size", "network", "loss")


def write_lineage(summary_dir: str | os.PathLike, report: Report, run_info: Mapping[str, Any] | None = None) -> Path:
    """Write a ``*_lineage`` file: the run's hyperparameters (``run_info``) and the Doctor's finding columns.

    MindInsight needs a train lineage in the file to list the run, and a later
    train lineage replaces an earlier one, so this one carries everything
    ``SummaryCollector`` would put there that the Doctor knows: ``optimizer``,
    ``learning_rate``, ``loss_function``, ``epoch``, ``parallel_mode``,
    ``device_num``, ``batch_size``, ``train_dataset_size``, ``network``, ``loss``
    (missing ones left empty); any other key (``DoctorConfig.hparams``) becomes a ``user_defined`` column.
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
    if finite(info.get("loss")):
        train.train_lineage.algorithm.loss = float(info["loss"])
    custom = pb.LineageEvent(wall_time=time.time())
    extra = {k: v for k, v in info.items() if k not in (*_HYPER_FIELDS, *_RUN_FIELDS) and v is not None}
    for key, value in {**extra, **lineage_values(report)}.items():  # extra: DoctorConfig.hparams
        entry = custom.user_defined_info.user_info.add()
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            entry.map_str[key] = str(value)
        else:
            (entry.map_int32 if isinstance(value, int) else entry.map_double)[key] = value
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
