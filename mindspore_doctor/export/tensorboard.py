"""The Doctor's signals and findings as TensorBoard event files, written with tensorboardX.

Beside the scalars and histograms the MindInsight export writes (same tags), a
TensorBoard run gets what MindInsight cannot show:

* the findings as a Markdown table on the Text plugin (``doctor/findings``),
  with the ranked diagnosis above it: rewritten at each epoch end, final at
  the end of training;
* a custom-scalars layout grouping the Doctor's series;
* the run's configuration on the HParams plugin, with the final loss and
  finding counts as its metrics, so several runs compare side by side;
* at the end of training, the run's analyses: the error analysis, the error
  budget and the label errors as Markdown tables (``doctor/error_analysis``,
  ``doctor/error_budget``, ``doctor/label_errors``), and each label source's
  top suspects as one captioned image grid (``doctor/label_suspects/<source>``,
  drawn from ``doctor_label_suspects.npz``).

tensorboardX's synchronous ``EventsWriter`` frames the records; its queue-based
``FileWriter`` is not used: it pickles every event through a
``multiprocessing.Queue``, a second serialization of each protobuf. Protobuf
runs in its pure-Python implementation beside MindSpore (~100 us per event), so
finding counts are written when they change, not on every step.

The file, ``events.out.tfevents.<seconds>.<host>.<pid>-<n>.doctor``, sits in
``summary_dir`` beside MindInsight's files: TensorBoard reads only ``tfevents``
files, MindInsight only ``summary.<n>`` ones.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from mindspore_doctor._io import HISTORY_FILE, REPORT_FILE
from mindspore_doctor.config import OPTIONS
from mindspore_doctor.export import labels as label_files
from mindspore_doctor.export.summary import (NO_DOMINANT, TAG_PREFIX, BufferedSummaryWriter, budget_cell, by_f1, finite,
                                             is_classification, labels_text, measured_errors, noisiest_classes,
                                             number, percent, sample_at, scored, sentence, unique_file_tag,
                                             worst_classes)
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.signals import TrainingHistory

EVENTS_GLOB = "events.out.tfevents.*.doctor"
"""The Doctor's TensorBoard files in a run directory."""
FINDINGS_TAG = f"{TAG_PREFIX}/findings"
"""The Text plugin's tag of the findings table."""
ERROR_ANALYSIS_TAG = f"{TAG_PREFIX}/error_analysis"
ERROR_BUDGET_TAG = f"{TAG_PREFIX}/error_budget"
LABEL_ERRORS_TAG = f"{TAG_PREFIX}/label_errors"
SUSPECTS_TAG = f"{TAG_PREFIX}/label_suspects"
"""The Images plugin's tag prefix of the label suspects' grid: ``doctor/label_suspects/<source>``."""
GRID_COLUMNS = 8
HISTOGRAM_BINS = 30
HPARAM_METRICS = tuple(f"{TAG_PREFIX}/{tag}" for tag in (
    "loss", "findings/error", "findings/warning", "eval/loss", "eval/accuracy", "eval/mse"))
"""Scalar tags the HParams plugin shows per run: their last value is the run's (the eval ones where the Doctor
evaluates: ``eval_dataset``)."""
CUSTOM_SCALARS = {
    "Doctor: training": {
        "loss": ["Multiline", [r"^doctor/loss$"]],
        "global gradient norm": ["Multiline", [r"^doctor/grad_norm/global$"]],
        "loss scale and overflow": ["Multiline", [r"^doctor/loss_scale$", r"^doctor/overflow$"]],
    },
    "Doctor: layers": {
        "gradient norm per layer": ["Multiline", [r"^doctor/grad_norm/(?!global$)"]],
        "update ratio per layer (|Δw| / |w|)": ["Multiline", [r"^doctor/update_ratio/"]],
    },
    "Doctor: activations": {
        "dead fraction (ReLU-like)": ["Multiline", [r"^doctor/dead_fraction/"]],
        "saturated fraction (Sigmoid, Tanh)": ["Multiline", [r"^doctor/saturated_fraction/"]],
        "mean |activation|": ["Multiline", [r"^doctor/activation_mean_abs/"]],
    },
    "Doctor: evaluation": {
        "eval loss": ["Multiline", [r"^doctor/eval/loss$"]],
        "eval metric": ["Multiline", [r"^doctor/eval/(?!loss$)"]],
    },
    "Doctor: findings": {
        "findings by severity": ["Multiline", [r"^doctor/findings/(error|warning|info)$"]],
        "findings by code": ["Multiline", [r"^doctor/findings/MSD\d+$"]],
        "transient findings: open and resolved": ["Multiline", [r"^doctor/findings/MSD\d+/(open|resolved)$"]],
    },
}


def _cell(text: Any) -> str:
    """One Markdown table cell: no line breaks, pipes escaped, and outside `code` spans the characters that
    would turn ``__init__`` bold or ``a*b*c`` italic."""
    parts = " ".join(str(text).split()).split("`")
    parts[::2] = [re.sub(r"([\\*_\[\]])", r"\\\1", part) for part in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def findings_markdown(report: Report, diagnosis: Mapping[str, Any] | None = None, *,
                      step: int | None = None, final: bool = False, limit: int = 5) -> str:
    """The ranked diagnosis, then every finding (most severe first) as a Markdown table."""
    counts = report.counts()
    state = "final, end of training" if final else (f"as of step {step}" if step is not None else "")
    lines = [f"**mindspore_doctor**: {len(report)} finding(s): {counts['error']} error(s), "
             f"{counts['warning']} warning(s), {counts['info']} info" + (f" ({state})" if state else "") + ".", ""]
    causes = list((diagnosis or {}).get("causes", []))
    if causes:
        lines.append("**Diagnosis**: likely causes, most likely first")
        lines.append("")
        for rank, cause in enumerate(causes[:limit], 1):
            evidence = ", ".join(e["code"] for e in cause["evidence"] if e["weight"] > 0)
            lines.append(f"{rank}. **{_cell(cause['title'])}** [{cause['category']}], confidence "
                         f"{cause['confidence']:.0%}; evidence: {evidence}. Fix: "
                         + " ".join(f"({i}) {_cell(r)}" for i, r in enumerate(cause["remedies"], 1)))
        lines.append("")
    if report.findings:
        lines += ["| severity | code | location | step | message | fix |", "|---|---|---|---|---|---|"]
        lines += [_finding_row(f) for f in report.sorted()]
    return "\n".join(lines)


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)]


def error_analysis_markdown(analysis: Mapping[str, Any], top: int = 20) -> str:
    """Per class (worst F1 first), the most confused pairs and the top-loss samples; regression: the error by
    target range and the top-loss samples."""
    lines = [f"**Error analysis** of the last evaluation: {scored(analysis)}, {analysis.get('task')}. Position: "
             "the sample's index in the order the eval dataset yields it.", ""]
    if is_classification(analysis):
        if analysis.get("worst"):
            lines += ["Worst classes (lowest F1 first): " + ", ".join(_cell(w) for w in analysis["worst"][:top]), ""]
        per_class = by_f1(analysis.get("per_class", []))
        lines += _table(("class", "precision", "recall", "F1", "support"),
                        [(r["label"], number(r["precision"]), number(r["recall"]), number(r["f1"]), r["support"])
                         for r in per_class[:max(top, len(worst_classes(analysis, top)))]])
        if analysis.get("confused"):
            lines += ["", "Most confused pairs:", ""] + _table(
                ("true → predicted", "count", "share of the true class"),
                [(f"{c['true']} → {c['predicted']}", c["count"], percent(c.get("rate")))
                 for c in analysis["confused"][:top]])
        if analysis.get("top_loss"):
            lines += ["", "Top-loss samples:", ""] + _table(
                ("position", "label", "predicted", "loss", "confidence"),
                [(sample_at(t), labels_text(t["label"]), labels_text(t["predicted"]), number(t["loss"]),
                  number(t.get("confidence")))
                 for t in analysis["top_loss"][:top]])
    else:
        lines += _table(("target range", "count", "MSE", "MAE", "bias"),
                        [(f"[{number(r['low'])}, {number(r['high'])})", r["count"], number(r["mse"]), number(r["mae"]),
                          number(r["bias"])) for r in analysis.get("by_target_range", [])])
        if analysis.get("top_loss"):
            lines += ["", "Top-loss samples:", ""] + _table(
                ("position", "target", "predicted", "loss"),
                [(sample_at(t), number(t["target"]), number(t["predicted"]), number(t["loss"]))
                 for t in analysis["top_loss"][:top]])
    return "\n".join(lines)


def error_budget_markdown(budget: Mapping[str, Any]) -> str:
    """The budget table (bounds marked ≤/≥, the dominant term in bold), then that term's remedies in order."""
    metric = budget.get("metric", "error")
    measured = ", ".join(f"{what} {value}" for what, value in measured_errors(budget))
    lines = [f"**Error budget** ({metric}): {measured}.", ""]
    dominant = budget.get("dominant")
    rows = []
    for r in budget.get("rows", []):
        term, value = _cell(r["term"]), budget_cell(r, metric)
        rows.append((f"**{term}**" if r["term"] == dominant else term, f"**{value}**" if r["term"] == dominant
                     else value, r.get("note", "")))
    lines += ["| term | " + metric + " | how it is measured |", "|---|---|---|",
              *(f"| {t} | {v} | {_cell(n)} |" for t, v, n in rows)]
    if any(r.get("bound") for r in budget.get("rows", [])):
        lines += ["", "≤: an upper bound (the true term is at most this); ≥: a lower bound; ± the noise."]
    if dominant:
        lines += ["", f"**Dominant: {_cell(dominant)}.** Remedies, in the guide's order:", ""]
        lines += [f"{i}. {_cell(r)}" for i, r in enumerate(budget.get("remedies", []), 1)]
    else:
        lines += ["", sentence(NO_DOMINANT)]
    return "\n".join(lines)


def label_errors_markdown(reports: list[Mapping[str, Any]], top: int = 20) -> str:
    """Per source: the estimated noise, the most swapped pairs, the top suspects; every flagged sample is in
    ``doctor_label_issues.csv``."""
    lines: list[str] = []
    for report in reports:
        flagged = report.get("flagged", [])
        lines += [f"**Label errors, {_cell(report.get('source'))}**: estimated noise "
                  f"{percent(report.get('noise_rate'))} "
                  f"of {report.get('samples')} samples ({report.get('classes')} classes), {len(flagged)} flagged. "
                  f"{_cell(sentence(report.get('method')))} "
                  f"{_cell(sentence('position: ' + str(report.get('positions'))))}",
                  ""]
        if report.get("swapped"):
            lines += _table(("given → likely", "count", "share of the given class"),
                            [(f"{p['given']} → {p['likely']}", p["count"], percent(p.get("rate")))
                             for p in report["swapped"][:top]]) + [""]
        if flagged:
            lines += _table(("position", "given", "likely", "label quality", "sha1"),
                            [(s["position"], s["given"], s["likely"], number(s["quality"], 2),
                              (s.get("sha1") or "")[:12])
                             for s in flagged[:top]]) + [""]
        noisy = [c for c in noisiest_classes(report) if c.get("noise_rate")]
        if noisy:
            lines += ["Estimated noise per class: " + ", ".join(
                f"{_cell(c['label'])} {percent(c['noise_rate'])}" for c in noisy[:top]) + ".", ""]
    lines.append(f"Every flagged sample: `{label_files.LABEL_ISSUES_FILE}` in the run's directory.")
    return "\n".join(lines)


def _location(finding: Finding) -> str:
    """``Finding.where`` with the source file by its name only: the table is read in a narrow tab."""
    source = finding.location.get("file")
    return finding.where.replace(str(source), Path(str(source)).name) if source else finding.where


def _finding_row(finding: Finding) -> str:
    step = "" if finding.step is None else str(finding.step)
    return (f"| {finding.severity.value} | {finding.code} {_cell(finding.rule)} | {_cell(_location(finding))} | {step} "
            f"| {_cell(finding.message)} | {_cell(finding.suggestion)} |")


def _stamp_time(summary: Any, info: str, field: str) -> None:
    """Set an HParams session time to now: tensorboardX leaves them at 0 (1970 in the session table)."""
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    plugin_data = summary.value[0].metadata.plugin_data
    data = HParamsPluginData.FromString(plugin_data.content)
    setattr(getattr(data, info), field, time.time())
    plugin_data.content = data.SerializeToString()


def hparam_values(run_info: Mapping[str, Any]) -> dict[str, str | float | int | bool]:
    """The run's configuration as HParams values (unknown entries left out: the plugin has no null)."""
    return {k: v for k, v in run_info.items()
            if isinstance(v, (str, bool)) or (isinstance(v, (int, float)) and finite(v))}


class TensorBoardWriter(BufferedSummaryWriter):
    """Appends the Doctor's scalars, histograms, findings table and HParams to one event file."""

    check = "tensorboard"
    shows_findings = True
    updates_every_probe = True  # ~1 ms per tensor: every probe step (1 in 50 by default) is affordable

    def __init__(self, summary_dir: str | os.PathLike, *, run_info: Mapping[str, Any] | None = None,
                 **options: Any) -> None:
        from tensorboardX import summary
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event

        super().__init__(summary_dir, **options)
        self.suspects_dir: Path = self.summary_dir
        """Where :meth:`close` reads ``doctor_label_suspects.npz`` (a conversion's staging folder is not the run's)."""
        self._summary, self._event_cls = summary, Event
        self._events: Any = EventsWriter(str(self.summary_dir / "events"), f".{unique_file_tag()}.doctor")
        self.path = Path(self._events._file_name)  # pylint: disable=protected-access
        self._written_counts: dict[str, tuple[int, float]] = {}  # tag: (step, value) last written
        self._reusable: tuple[tuple[str, ...], Any] = ((), None)
        self._pending.append(self._event(0, summary.custom_scalars(CUSTOM_SCALARS)))
        if run_info is not None:
            experiment, session_start, self._session_end = summary.hparams(hparam_values(run_info),
                                                                           dict.fromkeys(HPARAM_METRICS, 0.0))
            _stamp_time(session_start, "session_start_info", "start_time_secs")
            self._pending += [self._event(0, experiment), self._event(0, session_start)]
        else:
            self._session_end = None
        self.flush()
        self._register()

    @property
    def closed(self) -> bool:
        return self._events is None

    def _event(self, step: int, summary: Any, wall_time: float | None = None) -> Any:
        return self._event_cls(step=step, wall_time=time.time() if wall_time is None else wall_time, summary=summary)

    def _scalar_events(self, step: int, wall_time: float, scalars: Mapping[str, float],
                       every_count: bool = False) -> list[Any]:
        """The step's scalars as one event; a finding count only when it changed since it was last written (or
        ``every_count``), and then also its old value at the step before, so that the chart steps up instead of
        ramping.

        Steps with the same tags as the previous one (most steps: the loss alone) refill that step's event in
        place, which :meth:`_append` has written already: a third cheaper than building one.
        """
        items, held = [], {}
        for tag, value in scalars.items():
            if tag.startswith("findings/"):
                last = self._written_counts.get(tag)
                if last is not None and last[1] == value and not every_count:
                    continue
                if last is not None and last[1] != value and last[0] < step - 1:
                    held[tag] = last[1]
                self._written_counts[tag] = (step, value)
            items.append((tag, value))
        events = [self._new_scalar_event(step - 1, wall_time, held)] if held else []
        if items:
            tags = tuple(tag for tag, _ in items)
            if tags != self._reusable[0]:
                self._reusable = (tags, self._new_scalar_event(step, wall_time, dict(items)))
            event = self._reusable[1]
            event.step, event.wall_time = step, wall_time
            for slot, (_, value) in zip(event.summary.value, items):
                slot.simple_value = value
            events.append(event)
        return events

    def _new_scalar_event(self, step: int, wall_time: float, scalars: Mapping[str, float]) -> Any:
        event = self._event_cls(step=step, wall_time=wall_time)
        for tag, value in scalars.items():
            event.summary.value.add(tag=f"{TAG_PREFIX}/{tag}", simple_value=value)
        return event

    def _final_item(self, step: int, scalars: dict[str, float]) -> Any:
        """The final counts, every one of them: the end point of each count series, and HParams' metrics."""
        return step, time.time(), scalars, True

    def _histogram_event(self, step: int, arrays: Mapping[str, np.ndarray]) -> Any:
        """Histograms of the finite values (TensorBoard has no NaN/Inf counts; the findings name those)."""
        event = self._event_cls(step=step, wall_time=time.time())
        for tag, array in arrays.items():
            array = np.asarray(array, dtype=np.float64).ravel()
            array = array[np.isfinite(array)]
            if array.size:
                event.summary.value.extend(self._summary.histogram(tag, array, HISTOGRAM_BINS).value)
        return event

    def write_findings(self, report: Report, diagnosis: Mapping[str, Any] | None, step: int,
                       final: bool = False) -> None:
        """The Text plugin shows one table per step it was written at; the last one is the run's."""
        if not self.closed:
            self._text(FINDINGS_TAG, findings_markdown(report, diagnosis, step=step, final=final), step)

    def _text(self, tag: str, markdown: str, step: int) -> None:
        table = self._summary.text(tag, markdown)
        table.value[0].tag = tag  # tensorboardX appends "/text_summary"
        table.value[0].tensor.tensor_shape.ClearField("dim")  # a scalar: shape [1] renders in a wrapper table
        self._pending.append(self._event(step, table))

    def write_analysis(self, meta: Mapping[str, Any], step: int, suspects_dir: str | os.PathLike | None = None,
                       top: int | None = None) -> list[str]:
        """The run's analyses (``meta["error_analysis"]``, ``["error_budget"]``, ``["label_issues"]``) as text
        tables, and each label source's top suspects as one image grid (their inputs read from
        ``doctor_label_suspects.npz`` in ``suspects_dir``, by default ``summary_dir``). ``top``: rows and suspects
        shown, by default the run's ``analysis_top``. Returns the tags written."""
        if self.closed:
            return []
        if top is None:
            configured = (meta.get("config") or {}).get("analysis_top")
            top = int(OPTIONS["analysis_top"].default if configured is None else configured)
        tags = []
        if meta.get("error_analysis"):
            self._text(ERROR_ANALYSIS_TAG, error_analysis_markdown(meta["error_analysis"], top), step)
            tags.append(ERROR_ANALYSIS_TAG)
        if meta.get("error_budget"):
            self._text(ERROR_BUDGET_TAG, error_budget_markdown(meta["error_budget"]), step)
            tags.append(ERROR_BUDGET_TAG)
        reports = list(meta.get("label_issues") or [])
        if reports:
            self._text(LABEL_ERRORS_TAG, label_errors_markdown(reports, top), step)
            tags.append(LABEL_ERRORS_TAG)
            stored = label_files.read_label_suspects(self.summary_dir if suspects_dir is None else suspects_dir)
            for report in reports:
                samples = label_files.suspect_samples(stored, report.get("source", ""))
                shown = [s for s in report.get("flagged", [])[:top] if s["position"] in samples]
                grid = label_files.suspect_grid([samples[s["position"]] for s in shown],
                                                [f"#{s['position']}: {s['given']} → {s['likely']}" for s in shown],
                                                columns=GRID_COLUMNS, title=f"{report['source']}: the most "
                                                "suspect labels first; #position: given label → likely class")
                if grid is not None:
                    tag = f"{SUSPECTS_TAG}/{report['source']}"
                    self._pending.append(self._event(step, self._summary.image(tag, grid, dataformats="HWC")))
                    tags.append(tag)
        return tags

    def _append(self, pending: list[Any]) -> None:
        for item in pending:
            for event in self._scalar_events(*item) if isinstance(item, tuple) else [item]:
                self._events.write_event(event)  # now: a reused event is refilled by the next step
        self._events.flush()

    def close(self, report: Report | None = None, run_info: Mapping[str, Any] | None = None,
              episodes: Mapping[str, float] | None = None, diagnosis: Mapping[str, Any] | None = None) -> Path:
        """Final counts, the final findings table and the HParams session end (``run_info`` went in when the file
        was opened); then close the file."""
        try:
            if not self.closed:
                self._final_counts(report, episodes)
                if report is not None:
                    self.write_findings(report, diagnosis, self.last_step, final=True)
                if self._session_end is not None:
                    _stamp_time(self._session_end, "session_end_info", "end_time_secs")
                    self._pending.append(self._event(self.last_step, self._session_end))
                self.flush()
                if report is not None:  # after the findings are on disk: a failing section cannot lose them
                    self.write_analysis(report.meta, self.last_step, self.suspects_dir)
                    self.flush()
        finally:
            self._close_file()
        return self.path

    def discard(self) -> None:
        """Drop what is still buffered and close the file as it stands: the caller deletes an unfinished file."""
        self._pending.clear()
        self._close_file()

    def _close_file(self) -> None:
        """Close the event file and stop being the directory's writer, even when the last write failed."""
        events, self._events = self._events, None
        try:
            if events is not None:
                events.close()
        finally:
            self._unregister()


def convert_run(run_dir: str | os.PathLike) -> Path:
    """TensorBoard files for a finished run from its ``doctor_report.json`` and ``doctor_history.json`` (e.g. a
    run made before the option existed). Finding counts are rebuilt per step from the step each was found at.

    The file is written in a staging folder inside ``run_dir`` and moved beside the other files once complete: a
    conversion that fails leaves no half-written file to refuse the next one (nor to show TensorBoard a torn run).
    """
    run_dir = Path(run_dir)
    existing = sorted(run_dir.glob(EVENTS_GLOB))
    if existing:
        raise FileExistsError(f"{run_dir} already has the Doctor's TensorBoard file {existing[0].name}; a second one "
                              "would show every series twice (delete it to convert again)")
    report = Report.from_json((run_dir / REPORT_FILE).read_text(encoding="utf-8"))
    history_path = run_dir / HISTORY_FILE
    history = (TrainingHistory.from_dict(json.loads(history_path.read_text(encoding="utf-8")))
               if history_path.is_file() else TrainingHistory())
    run_info = {"network": report.meta.get("target"), **report.meta.get("run", {})}
    with tempfile.TemporaryDirectory(prefix=".doctor-tensorboard.", dir=run_dir) as staging:
        writer = TensorBoardWriter(staging, run_info=run_info, flush_seconds=float("inf"))
        writer.suspects_dir = run_dir
        try:
            _write_history(writer, report, history)
            staged = writer.close(report, diagnosis=report.meta.get("diagnosis"))
        except BaseException:
            writer.discard()
            raise
        return staged.replace(run_dir / staged.name)


def _write_history(writer: TensorBoardWriter, report: Report, history: TrainingHistory) -> None:
    """Every step of ``history``, with the finding counts as they stood at that step."""
    found = sorted(report.findings, key=lambda f: -1 if f.step is None else f.step)
    so_far = Report()
    for signals in history.steps:
        while len(so_far.findings) < len(found) and (found[len(so_far.findings)].step or -1) <= signals.step:
            so_far.findings.append(found[len(so_far.findings)])
        writer.write_step(signals, so_far)
    writer.last_step = max(writer.last_step, max((f.step or 0 for f in report.findings), default=0))
