"""What the dashboard exports (MindInsight, TensorBoard) plot, the buffering they share, and the compact text of
the run's analyses (error analysis, error budget, label errors) that the end of training prints.

Per step a writer only keeps the step's numbers in a buffer; a subclass encodes
the buffer and appends it to its file every ``flush_seconds`` and at
:meth:`BufferedSummaryWriter.flush` (the Doctor calls it at each epoch end), so
a training step pays for a few dictionary operations, not for protobuf.
"""
from __future__ import annotations

import atexit
import itertools
import math
import os
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Sequence

import numpy as np

from mindspore_doctor.findings import Report
from mindspore_doctor.signals import StepSignals

TAG_PREFIX = "doctor"
RELU_LIKE = ("relu", "relu6", "leakyrelu", "elu", "gelu", "silu", "prelu", "hswish", "mish")

_file_counter = itertools.count()
_open_writers: dict[tuple[str, str], "BufferedSummaryWriter"] = {}
_open_writers_lock = threading.Lock()


def unique_file_tag() -> str:
    """``<pid>-<n>``: two writers of one process, opened in the same second, never share a file name."""
    return f"{os.getpid()}-{next(_file_counter)}"


def finite(value: Any) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def spread_evenly(names: list[str], limit: int) -> list[str]:
    """At most ``limit`` names evenly spread over network order, first and last included."""
    if len(names) <= limit:
        return list(names)
    if limit <= 1:
        return names[:limit]
    picks = sorted({round(i * (len(names) - 1) / (limit - 1)) for i in range(limit)})
    return [names[i] for i in picks]


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
    return {k: float(v) for k, v in scalars.items() if finite(v)}


class BufferedSummaryWriter:
    """The Doctor's series for one dashboard file in ``summary_dir``; subclasses encode and append.

    One writer of a kind per directory in a process: opening a second one on the
    same directory (a new run) closes the first, so several runs in one process
    each get their own file.
    """

    check: ClassVar[str]
    """The name its failures are reported under (MSD001/MSD002 ``location.check``)."""
    shows_findings: ClassVar[bool] = False
    """The dashboard can show the findings table itself (:meth:`write_findings`), not only their counts."""
    updates_every_probe: ClassVar[bool] = False
    """Histograms of the weight updates on every probe step, not only weights at epoch ends."""

    def __init__(self, summary_dir: str | os.PathLike, *, max_layers: int = 24, histogram_layers: int = 4,
                 flush_seconds: float = 10.0) -> None:
        self.summary_dir = Path(summary_dir)
        self.summary_dir.mkdir(parents=True, exist_ok=True)
        self.max_layers = max_layers
        self.histogram_layers = histogram_layers
        self.flush_seconds = flush_seconds
        self._pending: list[Any] = []  # (step, wall_time, scalars) tuples, or events a subclass encoded already
        self._counts: tuple[int, dict[str, float]] = (-1, {})
        self._last_flush = time.monotonic()
        self._layers: list[str] | None = None
        self._cells: list[str] | None = None
        self.last_loss: float | None = None
        self.last_step = 0

    def _register(self) -> None:
        """Call once the file is open: from now on this is the directory's writer of its kind."""
        key = (type(self).__name__, os.path.realpath(self.summary_dir))
        with _open_writers_lock:
            previous = _open_writers.get(key)
            _open_writers[key] = self
        if previous is not None:
            previous.close()

    def _unregister(self) -> None:
        key = (type(self).__name__, os.path.realpath(self.summary_dir))
        with _open_writers_lock:
            if _open_writers.get(key) is self:
                del _open_writers[key]

    @property
    def closed(self) -> bool:
        raise NotImplementedError

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
        if finite(signals.loss):
            self.last_loss = float(signals.loss)
        self.last_step = max(self.last_step, int(signals.step))
        if scalars:
            self._pending.append((int(signals.step), time.time(), scalars))
        if time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def write_scalars(self, step: int, scalars: Mapping[str, float | None]) -> None:
        """Buffer scalars measured apart from the steps (the evaluations: ``eval/loss``, ``eval/accuracy``...)."""
        finite_scalars = {tag: float(v) for tag, v in scalars.items() if finite(v)}
        if finite_scalars and not self.closed:
            self._pending.append((int(step), time.time(), finite_scalars))

    def histogram_targets(self, report: Report | None, parameter_order: list[str]) -> list[str]:
        """The parameters worth a histogram: those named in findings (most severe first), then first and last."""
        named = [
            f.location["parameter"]
            for f in (report.sorted() if report is not None else [])
            if f.location.get("parameter") in parameter_order
        ]
        ends = [parameter_order[0], parameter_order[-1]] if parameter_order else []
        return list(dict.fromkeys([*named, *ends]))[: self.histogram_layers]

    def write_histograms(self, step: int, weights: Mapping[str, np.ndarray] | None = None,
                         updates: Mapping[str, np.ndarray] | None = None) -> None:
        """Buffer weight and update histograms (tags ``doctor/weight/<name>``, ``doctor/update/<name>``)."""
        if self.closed:
            return
        arrays = {f"{TAG_PREFIX}/{kind}/{name}": values
                  for kind, named in (("weight", weights or {}), ("update", updates or {}))
                  for name, values in named.items()}
        if arrays:
            self._pending.append(self._histogram_event(int(step), arrays))

    def _histogram_event(self, step: int, arrays: Mapping[str, np.ndarray]) -> Any:
        raise NotImplementedError

    def write_findings(self, report: Report, diagnosis: Mapping[str, Any] | None, step: int) -> None:
        """Buffer the findings table as of ``step`` (only where :attr:`shows_findings`)."""

    def close(self, report: Report | None = None, run_info: Mapping[str, Any] | None = None,
              episodes: Mapping[str, float] | None = None, diagnosis: Mapping[str, Any] | None = None) -> Path | None:
        """Write the final counts (and what the dashboard keeps of the run: ``run_info``, the ``diagnosis``),
        then close the file."""
        raise NotImplementedError

    def flush(self) -> None:
        """Encode and append everything buffered (no fsync: the page cache survives a killed process)."""
        if self.closed or not self._pending:
            return
        pending, self._pending = self._pending, []
        self._append(pending)
        self._last_flush = time.monotonic()

    def _append(self, pending: list[Any]) -> None:
        raise NotImplementedError

    def _final_counts(self, report: Report | None, episodes: Mapping[str, float] | None) -> None:
        """The final counts, at the last step: resolved findings (the lifecycle) count as info there."""
        if report is not None and not self.closed:
            self._pending.append(self._final_item(self.last_step, {**finding_count_scalars(report), **(episodes or {})}))

    def _final_item(self, step: int, scalars: dict[str, float]) -> Any:
        return step, time.time(), scalars


@atexit.register
def _flush_open_writers() -> None:
    """A run that never reached ``on_train_end`` (exception, sys.exit) still keeps its buffered steps."""
    with _open_writers_lock:
        writers = list(_open_writers.values())
    for writer in writers:
        writer.flush()


# --- the analyses of a run, as text ------------------------------------------------------------------------------

NO_DOMINANT = "no dominant term: none is measured above its noise (a bound never dominates)"
BOUND_MARKS = {"upper": "≤ ", "lower": "≥ ", None: ""}
"""A budget value that is a bound, not an estimate: ``≤`` (the true term is at most this), ``≥`` (at least)."""


def number(value: Any, digits: int = 3) -> str:
    """A metric for a table: ``digits`` significant figures, '—' when unknown."""
    return f"{float(value):.{digits}g}" if finite(value) else "—"


def percent(value: Any, digits: int = 1) -> str:
    return f"{100 * float(value):.{digits}f} %" if finite(value) else "—"


def budget_value(value: Any, metric: str) -> str:
    """An error budget value: a share as a percentage (``error``), a mean squared error as a number."""
    return percent(value, 2) if metric == "error" else number(value, 4)


def budget_cell(row: Mapping[str, Any], metric: str) -> str:
    """A budget row's value with its bound marked and its noise (``≤ 3.10 % ± 0.80 %``)."""
    if not finite(row.get("value")):
        return budget_value(None, metric)
    noise = f" ± {budget_value(row['noise'], metric)}" if finite(row.get("noise")) and row["noise"] > 0 else ""
    return BOUND_MARKS.get(row.get("bound"), "") + budget_value(row["value"], metric) + noise


MEASURED_ERRORS = (("trivial predictor", "baseline_error"), ("train", "train_error"), ("eval", "eval_error"),
                   ("target eval", "target_eval_error"), ("held-out test", "holdout_error"))


def measured_errors(budget: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The errors the budget was computed from, (what, value shown), those measured only."""
    metric = budget.get("metric", "error")
    return [(what, budget_value(budget.get(key), metric)) for what, key in MEASURED_ERRORS if finite(budget.get(key))]


def scored(analysis: Mapping[str, Any]) -> str:
    """``360 samples`` or, per token / pixel / label, ``360 samples, 41200 tokens``."""
    unit, units = analysis.get("unit", "sample"), analysis.get("units")
    return f"{analysis.get('samples', '?')} samples" + (f", {units} {unit}s" if unit != "sample" and units else "")


def sample_at(row: Mapping[str, Any]) -> str:
    """``#17`` or, per token / pixel, ``#17 at 3`` / ``#17 at (3, 5)``: where a top-loss unit sits."""
    at = row.get("at")
    if isinstance(at, (list, tuple)):
        at = at[0] if len(at) == 1 else "(" + ", ".join(map(str, at)) + ")"
    return f"#{row['position']}" + (f" at {at}" if at is not None else "")


def sentence(text: Any) -> str:
    """``text`` as a sentence: a capital first letter, a full stop at the end ("" stays "")."""
    text = str(text or "").strip()
    return text[:1].upper() + text[1:] + ("" if not text or text.endswith((".", "!", "?")) else ".")


def labels_text(value: Any) -> str:
    """A class, or a multi-label sample's classes."""
    return "{" + ", ".join(map(str, value)) + "}" if isinstance(value, (list, tuple)) else str(value)


def is_classification(analysis: Mapping[str, Any]) -> bool:
    return analysis.get("task") != "regression"


def worst_classes(analysis: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """The per-class rows of ``analysis["worst"]``, in its order (the worst first)."""
    rows = {row["label"]: row for row in analysis.get("per_class", [])}
    return [rows[label] for label in analysis.get("worst", [])[:limit] if label in rows]


def noisiest_classes(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A label report's classes, highest estimated noise rate first."""
    return sorted(report.get("per_class", []), key=lambda c: -(c.get("noise_rate") or 0))


def by_f1(per_class: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """An error analysis' classes, lowest F1 first (an undefined F1 first of all)."""
    return sorted(per_class, key=lambda r: r["f1"] if finite(r["f1"]) else -1)


def _wrapped(head: str, items: Sequence[str], width: int, indent: str = "    ") -> list[str]:
    return textwrap.wrap(head + "; ".join(items), width, initial_indent=indent, subsequent_indent=indent + "  ")


def error_analysis_lines(analysis: Mapping[str, Any], width: int = 100, top: int = 3) -> list[str]:
    """A few lines: the worst classes, the most confused pairs, the top-loss samples (regression: the error by
    target range and the top-loss samples)."""
    lines = [f"Error analysis ({analysis.get('task', '?')}, the last evaluation's {scored(analysis)}):"]
    if is_classification(analysis):
        worst = [f"{r['label']} (recall {number(r['recall'], 2)}, precision {number(r['precision'], 2)}, "
                 f"F1 {number(r['f1'], 2)}, support {r['support']})" for r in worst_classes(analysis, top)]
        confused = [f"{c['true']} → {c['predicted']} ×{c['count']} ({percent(c.get('rate'), 0)})"
                    for c in analysis.get("confused", [])[:top]]
        losses = [f"{sample_at(s)} {labels_text(s['label'])} → {labels_text(s['predicted'])} "
                  f"(loss {number(s['loss'])})"
                  for s in analysis.get("top_loss", [])[:top]]
        for head, items in (("worst classes: ", worst), ("most confused, true → predicted: ", confused),
                            ("top-loss samples, position label → predicted: ", losses)):
            if items:
                lines += _wrapped(head, items, width)
    else:
        ranges = analysis.get("by_target_range", [])
        shown = [f"[{number(r['low'])}, {number(r['high'])}) MAE {number(r['mae'])} bias {number(r['bias'])} "
                 f"(n={r['count']})" for r in sorted(ranges, key=lambda r: -(r.get("mse") or 0))[:top]]
        losses = [f"{sample_at(s)} target {number(s['target'])} predicted {number(s['predicted'])} "
                  f"(loss {number(s['loss'])})" for s in analysis.get("top_loss", [])[:top]]
        for head, items in (("worst target ranges: ", shown), ("top-loss samples: ", losses)):
            if items:
                lines += _wrapped(head, items, width)
    return lines


def error_budget_lines(budget: Mapping[str, Any], width: int = 100, top: int = 3) -> list[str]:
    """The budget in one line (bounds marked), then the dominant term and its first remedies."""
    metric = budget.get("metric", "error")
    rows = [f"{r['term']} {budget_cell(r, metric)}" for r in budget.get("rows", [])]
    seen = ", ".join(f"{what} {budget_value(budget.get(key), metric)}" for what, key in (
        ("train", "train_error"), ("eval", "eval_error")) if finite(budget.get(key)))
    lines = _wrapped(f"Error budget ({metric}{'; ' + seen if seen else ''}): ", rows, width, indent="")
    dominant = budget.get("dominant")
    if dominant:
        remedies = " ".join(f"{i}) {r}" for i, r in enumerate(budget.get("remedies", [])[:top], 1))
        lines += textwrap.wrap(f"dominant: {dominant}" + (f"; first remedies: {remedies}" if remedies else ""),
                               width, initial_indent="    ", subsequent_indent="      ")
    elif budget.get("rows"):
        lines.append(f"    {NO_DOMINANT}")
    return lines


def label_error_lines(report: Mapping[str, Any], width: int = 100, top: int = 3) -> list[str]:
    """One label report: the estimated noise, the noisiest classes, the most swapped pairs, the top suspects."""
    flagged = report.get("flagged", [])
    lines = [f"Label errors ({report.get('source')}: {report.get('samples')} samples, {report.get('classes')} "
             f"classes): estimated noise {percent(report.get('noise_rate'))}, {len(flagged)} flagged"]
    noisy = noisiest_classes(report)[:top]
    noisy = [f"{c['label']} ({percent(c['noise_rate'], 0)} of {c['support']})" for c in noisy if c.get("noise_rate")]
    swapped = [f"{p['given']} → {p['likely']} ×{p['count']} ({percent(p.get('rate'), 0)} of {p['given']})"
               for p in report.get("swapped", [])[:top]]
    suspects = [f"#{s['position']} {s['given']} → {s['likely']} (quality {number(s['quality'], 2)})"
                for s in flagged[:top]]
    for head, items in (("noisiest classes: ", noisy), ("most swapped, given → likely: ", swapped),
                        ("top suspects, position given → likely: ", suspects)):
        if items:
            lines += _wrapped(head, items, width)
    return lines


def analysis_text(meta: Mapping[str, Any], width: int = 100, top: int = 3) -> str:
    """The run's analyses (``meta["error_analysis"]``, ``["error_budget"]``, ``["label_issues"]``) in a few lines
    each; "" when it has none. Every flagged sample is in ``doctor_label_issues.csv``."""
    lines: list[str] = []
    if meta.get("error_analysis"):
        lines += error_analysis_lines(meta["error_analysis"], width, top)
    if meta.get("error_budget"):
        lines += error_budget_lines(meta["error_budget"], width, top)
    for report in meta.get("label_issues") or []:
        lines += label_error_lines(report, width, top)
    return "\n".join(lines)
