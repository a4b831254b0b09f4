"""One self-contained HTML file: the diagnosis, the findings table, the run's analyses (error analysis, error
budget, label errors) and the training charts.

Charts are matplotlib figures inlined as SVG (text drawn as paths), the label suspects' thumbnails PNG ``data:``
URIs, styles are inline: the file opens offline, with no CDN, script or font to fetch.
"""
from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable

from mindspore_doctor._io import HISTORY_FILE, HTML_FILE, REPORT_FILE, atomic_write_text
from mindspore_doctor.catalog import RULES
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.export import labels as label_files
from mindspore_doctor.export.summary import (NO_DOMINANT, budget_cell, by_f1, finite, is_classification, labels_text,
                                             measured_errors, noisiest_classes, number, percent, sample_at, scored,
                                             sentence, spread_evenly)
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.rule_docs import rule_doc_uri as rule_doc_href  # one lookup for every report's rule links
from mindspore_doctor.signals import TrainingHistory

MAX_HEATMAP_ROWS = 40
MAX_LINES = 10
MAX_CLASS_ROWS = 50
"""Per-class tables show at most this many classes (the worst F1 first when there are more); the JSON has all."""
MAX_CLASS_BARS = 40
MAX_PAIR_ROWS = 8
"""Rows of the label errors' swapped-pair and noisiest-class tables (the JSON report and the CSV have them all)."""
SEVERITY_COLORS = {"error": "#c62828", "warning": "#ef8f00", "info": "#1565c0"}
_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)
"""matplotlib's RDF block only names schema URLs; dropped so the page mentions no external address."""


def _log10(value: float | None) -> float:
    return math.log10(value) if value is not None and math.isfinite(value) and value > 0 else math.nan


def _format_evidence(evidence: dict[str, Any]) -> str:
    def short(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return json.dumps(v) if isinstance(v, (list, dict)) else str(v)

    return ", ".join(f"{k}={short(v)}" for k, v in evidence.items())


_BACKTICKS = re.compile(r"`([^`]+)`")


def inline_code(text: str) -> Any:
    """Escape, then show the `cell.path` / `param` names of messages as code."""
    import markupsafe

    return markupsafe.Markup(_BACKTICKS.sub(r"<code>\1</code>", str(markupsafe.escape(text))))


def finding_row(f: Finding) -> dict[str, Any]:
    rule = RULES.get(f.code)
    return {
        "severity": f.severity.value,
        "code": f.code,
        "rule": f.rule,
        "summary": rule.summary if rule else "",
        "href": rule_doc_href(f.code),
        "where": f.where,
        "step": "" if f.step is None else f.step,
        "resolved_step": f.evidence.get("resolved_step") if f.resolved else None,
        "original_severity": f.evidence.get("original_severity") if f.resolved else None,
        "message": inline_code(f.message),
        "evidence": _format_evidence(f.evidence),
        "suggestion": inline_code(f.suggestion),
    }


def figure_svg(draw: Callable[[Any, Any], None], height: float = 3.2, width: float = 9) -> str:
    """A matplotlib figure drawn by ``draw(fig, ax)``, as an inline ``<svg>`` (no XML prolog, no metadata)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    try:
        draw(fig, ax)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    finally:
        plt.close(fig)
    svg = buffer.getvalue()
    return _METADATA.sub("", svg[svg.index("<svg") :])


def template_environment() -> Any:
    """The jinja2 environment of the package's HTML templates: autoescaped, strict about missing variables."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("mindspore_doctor", "export/templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


class _Charts:
    """Each method draws one chart from the history, or returns None when there is nothing to draw."""

    def __init__(self, report: Report, history: TrainingHistory, config: DoctorConfig) -> None:
        self.report, self.history, self.config = report, history, config
        self.probed = history.probed()

    def loss(self) -> str | None:
        losses = [(s, v) for s, v in self.history.losses if math.isfinite(v)]
        marked = [f for f in self.report.sorted() if f.step is not None]
        if not losses:
            return None

        def draw(fig: Any, ax: Any) -> None:
            ax.plot(*zip(*losses), color="#37474f", linewidth=1.4, label="loss")
            seen: set[str] = set()
            for f in marked:
                color = SEVERITY_COLORS[_logged_severity(f)]
                ax.axvline(f.step, color=color, linestyle=":" if f.resolved else "--", linewidth=1, alpha=0.8)
                if f.resolved:  # the episode: from detection to the step its condition stopped holding
                    ax.axvspan(f.step, f.evidence["resolved_step"], color=color, alpha=0.08, linewidth=0)
                if f.code not in seen:
                    ax.annotate(f.code, (f.step, 1), xycoords=("data", "axes fraction"), rotation=90,
                                va="top", ha="right", fontsize=8, color=color)
                    seen.add(f.code)
            ax.set_xlabel("step")
            ax.set_ylabel("loss")
            ax.grid(alpha=0.3)

        return figure_svg(draw)

    def timeline(self) -> str | None:
        """One bar per training finding: from the step it was logged to the step it resolved, or to the end."""
        last = self.history.steps[-1].step if self.history.steps else None
        found = [f for f in self.report.findings if f.step is not None and f.code.startswith("MSD2")]
        if last is None or not found:
            return None
        found.sort(key=lambda f: (f.step, f.code, f.where))
        rows = found[:MAX_HEATMAP_ROWS]

        def draw(fig: Any, ax: Any) -> None:
            for y, f in enumerate(rows):
                end = f.evidence["resolved_step"] if f.resolved else last
                color = SEVERITY_COLORS[_logged_severity(f)]
                ax.barh(y, max(end - f.step, 0.5), left=f.step, height=0.6, color=color,
                        alpha=0.35 if f.resolved else 0.9, hatch="//" if f.resolved else None, edgecolor=color)
                if f.resolved:
                    ax.annotate("resolved", (end, y), xytext=(3, 0), textcoords="offset points", va="center",
                                fontsize=7, color="#616161")
            ax.set_yticks(range(len(rows)), [f"{f.code} {f.where}"[:60] for f in rows], fontsize=7)
            ax.invert_yaxis()
            ax.set_xlim(0, last * 1.08 + 1)
            ax.set_xlabel("step")
            ax.grid(axis="x", alpha=0.3)

        return figure_svg(draw, height=max(1.6, 0.7 + 0.22 * len(rows)))

    def grad_heatmap(self) -> str | None:
        steps = [s for s in self.probed if s.grad_norm]
        if not steps:
            return None
        order = self.history.parameter_order or list(steps[0].grad_norm)
        names = spread_evenly([n for n in order if any(n in s.grad_norm for s in steps)], MAX_HEATMAP_ROWS)
        grid = [[_log10(s.grad_norm.get(n)) for s in steps] for n in names]

        def draw(fig: Any, ax: Any) -> None:
            image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
            ticks = spread_evenly(list(range(len(steps))), 8)
            ax.set_xticks(ticks, [str(steps[i].step) for i in ticks])
            ax.set_yticks(range(len(names)), names, fontsize=7)
            ax.set_xlabel("step")
            fig.colorbar(image, ax=ax, label="log10 gradient norm")

        return figure_svg(draw, height=max(2.6, 0.9 + 0.2 * len(names)))

    def update_ratio(self) -> str | None:
        steps = [s for s in self.probed if s.update_ratio]
        if not steps:
            return None
        order = self.history.parameter_order or list(steps[0].update_ratio)
        names = spread_evenly([n for n in order if any(n in s.update_ratio for s in steps)], MAX_LINES)

        def draw(fig: Any, ax: Any) -> None:
            x = [s.step for s in steps]
            for name in names:
                ax.plot(x, [s.update_ratio.get(name, math.nan) for s in steps], marker=".", label=name)
            for bound in (self.config.update_ratio_min, self.config.update_ratio_max):
                ax.axhline(bound, color="#9e9e9e", linestyle=":", linewidth=1)
            ax.set_yscale("log")
            ax.set_xlabel("step")
            ax.set_ylabel("mean|Δw| / mean|w|")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
            ax.grid(alpha=0.3)

        return figure_svg(draw)

    def activations(self) -> str | None:
        steps = [s for s in self.probed if s.activations]
        if not steps:
            return None
        cells = sorted({c for s in steps for c in s.activations},
                       key=lambda c: next(s.activations[c].order for s in steps if c in s.activations))
        cells = spread_evenly(cells, MAX_LINES)

        def fraction(stats: Any) -> float:
            return max(stats.dead_fraction, stats.saturated_fraction) if stats is not None else math.nan

        def draw(fig: Any, ax: Any) -> None:
            x = [s.step for s in steps]
            for cell in cells:
                kind = next(s.activations[cell].kind for s in steps if cell in s.activations)
                ax.plot(x, [fraction(s.activations.get(cell)) for s in steps], marker=".", label=f"{cell} ({kind})")
            ax.axhline(self.config.dead_relu_fraction, color="#c62828", linestyle=":", linewidth=1)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("step")
            ax.set_ylabel("dead / saturated fraction")
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
            ax.grid(alpha=0.3)

        return figure_svg(draw)

    def lr_range_test(self) -> str | None:
        """The ``sanity()`` learning-rate range test: loss against lr, the minimum and the suggestion marked."""
        test = self.report.meta.get("lr_range_test") or {}
        points = [(lr, v) for lr, v in zip(test.get("lrs", []), test.get("losses", [])) if math.isfinite(v) and lr > 0]
        if not points:
            return None
        smoothed = list(zip(test["lrs"], test.get("smoothed", [])))

        def draw(fig: Any, ax: Any) -> None:
            ax.plot(*zip(*points), color="#b0bec5", marker=".", linewidth=1, label="loss")
            if smoothed:
                ax.plot(*zip(*smoothed), color="#37474f", linewidth=1.6, label="smoothed loss")
            for key, label, color in (("min_loss_lr", "lowest smoothed loss", "#9e9e9e"),
                                      ("suggested_lr", "suggested", "#2e7d32")):
                if test.get(key):
                    ax.axvline(test[key], color=color, linestyle="--", linewidth=1.2,
                               label=f"{label}: lr {test[key]:.3g}")
            ax.set_xscale("log")
            ax.set_xlabel("learning rate")
            ax.set_ylabel("loss")
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)

        return figure_svg(draw)

    def evaluation(self) -> str | None:
        """``Doctor(eval_dataset=...)``: train and eval loss per evaluated epoch, eval metric vs the trivial one."""
        records = (self.report.meta.get("evaluation") or {}).get("records") or []
        epochs = [r["epoch"] for r in records]
        if not epochs:
            return None

        def series(key: str, field: str | None = None) -> list[float]:
            values = [r.get(key) if field is None else (r.get(key) or {}).get(field) for r in records]
            return [float(v) if isinstance(v, (int, float)) else math.nan for v in values]

        def draw(fig: Any, ax: Any) -> None:
            ax.plot(epochs, series("train_loss"), marker="o", color="#1565c0", label="train loss (eval mode)")
            ax.plot(epochs, series("eval_loss"), marker="o", color="#c62828", label="eval loss")
            ax.set_xlabel("epoch")
            ax.set_ylabel("loss")
            ax.grid(alpha=0.3)
            metric = next((r["eval_metric"]["name"] for r in records if r.get("eval_metric")), None)
            handles, labels = ax.get_legend_handles_labels()
            if metric:
                right = ax.twinx()
                right.plot(epochs, series("eval_metric", "value"), color="#2e7d32", marker=".", label=f"eval {metric}")
                right.plot(epochs, series("baseline", "value"), color="#2e7d32", linestyle=":",
                           label=f"trivial predictor's {metric}")
                right.set_ylabel(metric)
                more = right.get_legend_handles_labels()
                handles, labels = handles + more[0], labels + more[1]
            ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.08, 1))

        return figure_svg(draw)


CHARTS = (
    ("loss", "Loss", "Loss per step; dashed lines mark the step a finding was raised; dotted lines and a shaded "
     "span, a finding that resolved (its condition no longer held from the span's end on)."),
    ("timeline", "Findings timeline", "Each training finding from the step it was raised, in the colour of the "
     "severity it was raised with: solid while it holds (to the end of training), hatched up to the step it "
     "resolved."),
    ("grad_heatmap", "Gradient norms per layer", "log10 of each parameter's gradient L2 norm, first layer on top."),
    ("update_ratio", "Update ratios", "mean|Δw| / mean|w| per step; dotted lines are the MSD210/MSD211 bounds."),
    ("activations", "Activation health", "Fraction of dead (ReLU-like) or saturated (Sigmoid/Tanh) outputs."),
)
META_CHARTS = (
    ("evaluation", "Evaluation",
     ("Doctor(eval_dataset=...): losses per evaluated epoch (left), the eval metric and the majority-class / "
      "mean predictor's (right). Eval loss rising while train loss falls is overfitting (MSD401).")),
    ("lr_range_test", "Learning-rate range test",
     ("sanity(): one step per learning rate, increasing exponentially; suggested lr = lr at the lowest smoothed "
      "loss / 10.")),
)
"""Charts of a ``report.meta`` section, shown only when the report has that section."""


def _logged_severity(f: Finding) -> str:
    """The severity ``f`` had when it was logged (a resolved finding is info now)."""
    return str(f.evidence.get("original_severity", f.severity.value))


def _diagnosis(report: Report, history: TrainingHistory) -> dict[str, Any]:
    losses = [v for _, v in history.losses]
    return {
        "counts": report.counts(),
        "total": len(report),
        "top": [finding_row(f) for f in report.sorted()[:3]],
        "steps": history.steps[-1].step if history.steps else None,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "causes": report.meta.get("diagnosis", {}).get("causes", [])[:5],
    }


def _bars(groups: list[str], series: dict[str, list[float]], ylabel: str, colors: tuple[str, ...],
          ylim: tuple[float, float] | None = None, xlabel: str = "") -> str:
    """Grouped vertical bars: one group per class (or target range), one bar per series."""
    import numpy as np

    def draw(fig: Any, ax: Any) -> None:
        x = np.arange(len(groups))
        width = 0.8 / max(len(series), 1)
        for i, ((name, values), color) in enumerate(zip(series.items(), colors)):
            ax.bar(x + (i - (len(series) - 1) / 2) * width, [v if finite(v) else 0.0 for v in values], width,
                   label=name, color=color)
        ax.set_xticks(x, groups, fontsize=8, rotation=0 if len(groups) <= 20 else 90)
        if ylim:
            ax.set_ylim(*ylim)
        ax.axhline(0, color="#9e9e9e", linewidth=0.8)
        ax.set_ylabel(ylabel)
        ax.set_xlabel(xlabel)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.grid(axis="y", alpha=0.3)

    return figure_svg(draw, height=2.6)


def _error_analysis(analysis: dict[str, Any], top: int) -> dict[str, Any]:
    """``meta["error_analysis"]`` as the template shows it, with a chart per class (or per target range)."""
    import markupsafe

    view: dict[str, Any] = {"task": analysis.get("task", "?"), "unit": analysis.get("unit", "sample"),
                            "scored": scored(analysis), "classification": is_classification(analysis),
                            "number": number, "percent": percent, "labels": labels_text, "at": sample_at}
    if view["classification"]:
        per_class = sorted(analysis.get("per_class", []), key=lambda r: str(r["label"]))
        if all(isinstance(r["label"], int) for r in per_class):
            per_class.sort(key=lambda r: r["label"])
        worst = list(analysis.get("worst", []))
        shown = per_class if len(per_class) <= MAX_CLASS_ROWS else by_f1(per_class)[:MAX_CLASS_ROWS]
        view.update(per_class=shown, hidden=len(per_class) - len(shown), worst=worst[:top],
                    confused=analysis.get("confused", [])[:top], top_loss=analysis.get("top_loss", [])[:top])
        if 0 < len(per_class) <= MAX_CLASS_BARS:
            view["chart"] = markupsafe.Markup(_bars(
                [str(r["label"]) for r in per_class],
                {name: [r.get(k) for r in per_class] for name, k in (("precision", "precision"), ("recall", "recall"),
                                                                     ("F1", "f1"))},
                "score", ("#90caf9", "#1565c0", "#2e7d32"), (0, 1.05), "class"))
    else:
        ranges = analysis.get("by_target_range", [])
        view.update(ranges=ranges, top_loss=analysis.get("top_loss", [])[:top])
        if ranges:
            view["chart"] = markupsafe.Markup(_bars(
                [f"[{number(r['low'])}, {number(r['high'])})" for r in ranges],
                {"MAE": [r.get("mae") for r in ranges],
                 "bias (mean predicted - target)": [r.get("bias") for r in ranges]},
                "error", ("#c62828", "#1565c0"), None, "target range"))
    return view


def _error_budget(budget: dict[str, Any]) -> dict[str, Any]:
    metric = budget.get("metric", "error")
    rows = [{"term": r["term"], "value": budget_cell(r, metric), "bound": r.get("bound"), "note": r.get("note", ""),
             "dominant": r["term"] == budget.get("dominant")} for r in budget.get("rows", [])]
    return {"metric": metric, "rows": rows, "measured": measured_errors(budget), "dominant": budget.get("dominant"),
            "no_dominant": sentence(NO_DOMINANT),
            "remedies": list(budget.get("remedies", [])), "target_source": budget.get("target_source"),
            "has_bounds": any(r["bound"] for r in rows)}


def _data_uri(png: bytes | None) -> str | None:
    return f"data:image/png;base64,{base64.b64encode(png).decode('ascii')}" if png else None


def _label_issues(reports: list[dict[str, Any]], suspects: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """Each label report (one per source) with its top suspects, a thumbnail where the stored input is an image."""
    views = []
    for report in reports:
        samples = label_files.suspect_samples(suspects, report.get("source", ""))
        flagged = [{**s, "thumbnail": _data_uri(label_files.thumbnail_png(samples[s["position"]]))
                    if s["position"] in samples else None} for s in report.get("flagged", [])[:top]]
        per_class = noisiest_classes(report)
        views.append({**report, "flagged_count": len(report.get("flagged", [])), "suspects": flagged,
                      "thumbnails": any(s["thumbnail"] for s in flagged),
                      "per_class": [c for c in per_class if c.get("noise_rate")][:MAX_PAIR_ROWS],
                      "swapped": report.get("swapped", [])[:MAX_PAIR_ROWS]})
    return views


def _analyses(meta: dict[str, Any], run_dir: str | os.PathLike | None, top: int) -> dict[str, Any]:
    """The analysis sections a report has (``meta`` keys ``error_analysis``, ``error_budget``, ``label_issues``)."""
    reports = meta.get("label_issues") or []
    suspects = label_files.read_label_suspects(run_dir) if run_dir is not None and reports else {}
    return {
        "error_analysis": _error_analysis(meta["error_analysis"], top) if meta.get("error_analysis") else None,
        "error_budget": _error_budget(meta["error_budget"]) if meta.get("error_budget") else None,
        "label_issues": _label_issues(reports, suspects, top),
        "number": number, "percent": percent, "sentence": sentence, "issues_file": label_files.LABEL_ISSUES_FILE,
    }


def render_html(report: Report, history: TrainingHistory | None = None, title: str = "mindspore_doctor report",
                config: DoctorConfig | None = None, run_dir: str | os.PathLike | None = None) -> str:
    """The report page as one HTML string (no external resource).

    ``config``: the thresholds the charts draw; by default those the run stored in its report (``meta.config``),
    else the defaults. ``run_dir``: the run's ``summary_dir``, where the label suspects' inputs are
    (``doctor_label_suspects.npz``, drawn as thumbnails).
    """
    import markupsafe

    history = history or TrainingHistory()
    stored = report.meta.get("config")
    config = config or (DoctorConfig.from_values(stored) if isinstance(stored, dict) else DoctorConfig())
    charts = _Charts(report, history, config)
    return template_environment().get_template("report.html.j2").render(
        rule_href=rule_doc_href,
        title=title,
        generated=_dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        diagnosis=_diagnosis(report, history),
        findings=[finding_row(f) for f in report.sorted()],
        charts=[
            {"id": f"chart-{key.replace('_', '-')}", "title": heading, "caption": caption,
             "svg": markupsafe.Markup(svg) if (svg := getattr(charts, key)()) else None}
            for key, heading, caption in (*CHARTS, *((k, h, c) for k, h, c in META_CHARTS if k in report.meta))
        ],
        has_signals=bool(history.steps),
        analysis=_analyses(report.meta, run_dir, int(config.analysis_top)),
    )


def write_html(report: Report, history: TrainingHistory | None, out_path: str | os.PathLike,
               title: str = "mindspore_doctor report", config: DoctorConfig | None = None,
               run_dir: str | os.PathLike | None = None) -> Path:
    """Render and write the report atomically; returns the path. ``run_dir`` (the label suspects' thumbnails)
    defaults to the folder of ``out_path`` (the run writes its page into its ``summary_dir``)."""
    run_dir = Path(out_path).parent if run_dir is None else run_dir
    return atomic_write_text(out_path, render_html(report, history, title=title, config=config, run_dir=run_dir))


def write_run_report(run_dir: str | os.PathLike, out_path: str | os.PathLike | None = None) -> Path:
    """Render a finished (or running) Doctor run directory; ``out_path`` defaults to ``run_dir/doctor_report.html``.

    Raises FileNotFoundError with a one-line reason when ``run_dir`` has no report,
    ValueError when a file is not valid JSON.
    """
    run = Path(run_dir)
    report_path = run / REPORT_FILE
    if not report_path.is_file():
        raise FileNotFoundError(f"{run} has no {REPORT_FILE}: is it a Doctor(summary_dir=...) directory?")
    try:
        report = Report.from_json(report_path.read_text(encoding="utf-8"))
        history_path = run / HISTORY_FILE
        history = (TrainingHistory.from_dict(json.loads(history_path.read_text(encoding="utf-8")))
                   if history_path.is_file() else TrainingHistory())
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        raise ValueError(f"cannot read the Doctor run in {run}: {exc}") from None
    return write_html(report, history, out_path or run / HTML_FILE, title=f"mindspore_doctor: {run.name}",
                      run_dir=run)
