"""The offline HTML page of a hyperparameter study (``msdoctor tune ... --html``): results, importance, trials.

It renders the study's summary, a plain JSON-able dict the tuner writes, with the main report's parts: its
template environment, finding rows, rule links and matplotlib charts inlined as SVG. One file, no script,
nothing to fetch.
"""
from __future__ import annotations

import datetime as _dt
import itertools
import math
import os
import re
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import markupsafe

from mindspore_doctor._io import atomic_write_text
from mindspore_doctor.export.html import (
    SEVERITY_COLORS, figure_svg, finding_row, inline_code, rule_doc_href, template_environment,
)
from mindspore_doctor.findings import Finding

COMPLETE_COLOR = "#37474f"
PRUNED_COLOR = "#9e9e9e"
BEST_COLOR = "#2e7d32"
SHORT_MESSAGE = 110
"""Characters of a trial's top finding shown in the trials table (the whole message is its tooltip)."""
SLICE_SIZE = (3.8, 2.7)
_CODE = re.compile(r"\bMSD\d{3}\b")


def _number(value: Any) -> float | None:
    """A finite float, else None: a value may be missing, NaN, or NaN as the string a JSON round trip leaves."""
    if value is None or isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _text(value: Any) -> str:
    """A table cell: floats to 4 significant digits, a missing value as an empty cell."""
    if value is None:
        return ""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _code_links(text: str | None) -> markupsafe.Markup:
    """``inline_code`` text whose MSDnnn codes link to their rule pages (a knob's "why", a prune reason)."""
    def link(match: re.Match[str]) -> str:
        return f'<a href="{markupsafe.escape(rule_doc_href(match[0]))}">{match[0]}</a>'

    return markupsafe.Markup(_CODE.sub(link, str(inline_code(text or ""))))


def _finding(data: dict[str, Any]) -> dict[str, Any]:
    """A summary's finding (``Finding.to_dict()`` with ``where``) as the main report's finding row."""
    row = finding_row(Finding.from_dict(data))
    message = str(data.get("message") or "")
    return {**row, "where": data.get("where") or row["where"], "full_message": message,
            "short_message": inline_code(textwrap.shorten(message, SHORT_MESSAGE, placeholder=" …"))}


def _padded(low: float, high: float, log: bool) -> tuple[float, float]:
    """Axis limits 4 % wider than [low, high] (in log space on a log axis), so edge points are not cut."""
    if log:
        pad = (math.log10(high) - math.log10(low)) * 0.04
        return low / 10 ** pad, high * 10 ** pad
    pad = (high - low) * 0.04
    return low - pad, high + pad


def _numeric_knob_axis(ax: Any, knob: dict[str, Any], xs: tuple[float, ...]) -> None:
    """Log scale for a log knob, and the knob's whole range: the slice shows where in it the search went."""
    log = bool(knob.get("log")) and min(xs) > 0
    if log:
        ax.set_xscale("log")
    low, high = _number(knob.get("low")), _number(knob.get("high"))
    if low is not None and high is not None and low < high and (low > 0 or not log):
        ax.set_xlim(_padded(min(low, *xs), max(high, *xs), log))


class _Study:
    """The summary parsed once: trials by number, the knobs, the best trial; each chart method returns an SVG,
    or None when there is nothing to draw."""

    def __init__(self, summary: dict[str, Any]) -> None:
        self.summary = summary
        self.maximize = summary.get("direction") != "minimize"
        self.metric = summary.get("metric") or "value"
        self.space: dict[str, dict[str, Any]] = summary.get("space") or {}
        self.trials: list[dict[str, Any]] = sorted(summary.get("trials") or [], key=lambda t: t["number"])
        self.best: dict[str, Any] = summary.get("best") or {}
        self.baseline: dict[str, Any] = summary.get("baseline") or {}
        seen = {name for t in self.trials for name in t.get("params") or {}} | set(self.best.get("params") or {})
        self.params = [*self.space, *sorted(seen - set(self.space))]
        self.completed = [(t, v) for t in self.trials
                          if t.get("state") == "COMPLETE" and (v := _number(t.get("value"))) is not None]

    def finish_axes(self, ax: Any, xlabel: str) -> None:
        """The history and the learning curves: whole trial numbers or epochs on x, the metric on y."""
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{self.metric} ({'higher' if self.maximize else 'lower'} is better)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.grid(alpha=0.3)

    def is_best(self, trial: dict[str, Any]) -> bool:
        return self.best.get("number") is not None and trial.get("number") == self.best["number"]

    @staticmethod
    def curve(trial: dict[str, Any]) -> list[tuple[float, float]]:
        """The trial's (epoch, value) points with both finite, by epoch."""
        points = [(_number(e), _number(v)) for e, v in (trial.get("intermediate") or {}).items()]
        return sorted((e, v) for e, v in points if e is not None and v is not None)

    def importance(self) -> str | None:
        ranked = sorted(((name, v) for name, imp in (self.summary.get("importance") or {}).items()
                         if (v := _number(imp)) is not None), key=lambda item: -item[1])
        if not ranked:
            return None

        def draw(fig: Any, ax: Any) -> None:
            names, values = zip(*ranked)
            ax.barh(range(len(ranked)), values, color=COMPLETE_COLOR, height=0.6)
            for y, v in enumerate(values):
                ax.annotate(f"{v:.2f}", (v, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
            ax.set_yticks(range(len(ranked)), names)
            ax.invert_yaxis()
            ax.set_xlim(0, max(max(values) * 1.15, 1e-9))
            ax.set_xlabel("importance")
            ax.grid(axis="x", alpha=0.3)

        return figure_svg(draw, height=max(1.4, 0.6 + 0.35 * len(ranked)))

    def history(self) -> str | None:
        """Completed trials as dots, pruned ones as x at their last reported value, best so far, the baseline."""
        done = [(t["number"], v) for t, v in self.completed]
        pruned = [(t["number"], curve[-1][1], bool(_CODE.search(t.get("pruned_reason") or "")))
                  for t in self.trials if t.get("state") == "PRUNED" and (curve := self.curve(t))]
        if not done and not pruned:
            return None
        baseline = _number(self.baseline.get("value"))

        def draw(fig: Any, ax: Any) -> None:
            if done:
                numbers, values = zip(*done)
                ax.plot(numbers, values, "o", color=COMPLETE_COLOR, label="completed")
                ax.step(numbers, list(itertools.accumulate(values, max if self.maximize else min)), where="post",
                        color=BEST_COLOR, linewidth=1.6, label="best so far")
            for by_finding, color, label in ((True, SEVERITY_COLORS["error"], "pruned by a finding"),
                                             (False, PRUNED_COLOR, "pruned (learning curve)")):
                points = [(n, v) for n, v, found in pruned if found is by_finding]
                if points:
                    ax.plot(*zip(*points), "x", color=color, markersize=8, label=label)
            if baseline is not None:
                ax.axhline(baseline, color="#616161", linestyle="--", linewidth=1.2,
                           label=f"baseline (your configuration): {baseline:.4g}")
            self.finish_axes(ax, "trial")

        return figure_svg(draw)

    def slice(self, name: str) -> str | None:
        """The value of each completed trial against one knob: log x for log knobs, positions for choices."""
        knob = self.space.get(name) or {}
        raw = [(t["params"][name], v, self.is_best(t)) for t, v in self.completed if name in (t.get("params") or {})]
        categorical = knob.get("kind") == "categorical" or any(isinstance(x, (str, bool)) for x, _, _ in raw)
        if categorical:
            labels = list(dict.fromkeys([*map(str, knob.get("choices") or []), *(str(x) for x, _, _ in raw)]))
            points = [(labels.index(str(x)), v, best) for x, v, best in raw]
        else:
            points = [(x, v, best) for x, v, best in ((_number(x), v, best) for x, v, best in raw) if x is not None]
        if not points:
            return None

        def draw(fig: Any, ax: Any) -> None:
            xs, ys, _ = zip(*points)
            ax.scatter(xs, ys, s=18, color=COMPLETE_COLOR, alpha=0.8)
            top = [(x, y) for x, y, best in points if best]
            if top:
                ax.scatter(*zip(*top), s=90, facecolors="none", edgecolors=BEST_COLOR, linewidths=1.8)
            if categorical:
                ax.set_xticks(range(len(labels)), labels)
                ax.set_xlim(-0.5, len(labels) - 0.5)
            else:
                _numeric_knob_axis(ax, knob, xs)
            ax.set_xlabel(name)
            ax.set_ylabel(self.metric)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)

        return figure_svg(draw, height=SLICE_SIZE[1], width=SLICE_SIZE[0])

    def intermediate(self) -> str | None:
        """Each trial's eval value per epoch; pruned trials lighter and dashed, the best trial in bold."""
        curves = [(t, curve) for t in self.trials if (curve := self.curve(t))]
        if not curves:
            return None

        def draw(fig: Any, ax: Any) -> None:
            labelled: set[str] = set()
            for trial, curve in curves:
                if self.is_best(trial):
                    label, style = f"best (trial {trial['number']})", {"color": BEST_COLOR, "linewidth": 2.2}
                elif trial.get("state") == "PRUNED":
                    label, style = "pruned", {"color": PRUNED_COLOR, "alpha": 0.6, "linestyle": "--"}
                else:
                    label, style = "other trials", {"color": COMPLETE_COLOR, "alpha": 0.7, "linewidth": 1}
                ax.plot(*zip(*curve), marker="x" if label == "pruned" else ".", markevery=[-1] if label == "pruned"
                        else None, label=None if label in labelled else label, **style)
                labelled.add(label)
            self.finish_axes(ax, "epoch")

        return figure_svg(draw)


def _svg(svg: str | None) -> markupsafe.Markup | None:
    return markupsafe.Markup(svg) if svg else None


def _knob_range(knob: dict[str, Any]) -> str:
    if knob.get("kind") == "categorical":
        return ", ".join(map(str, knob.get("choices") or []))
    span = f"{_text(knob.get('low'))} … {_text(knob.get('high'))}"
    return f"{span} (log)" if knob.get("log") else span


def _duration(seconds: Any) -> str:
    s = _number(seconds)
    if s is None:
        return ""
    return f"{s:.1f} s" if s < 60 else "{} min {:02d} s".format(*divmod(round(s), 60))


def _results(study: _Study) -> dict[str, Any]:
    """Section 1: the counts, the baseline against the best trial, the best parameters, the study's findings, the
    failed trials and why."""
    counts = Counter(t.get("state") for t in study.trials)
    baseline, best = _number(study.baseline.get("value")), _number(study.best.get("value"))
    gain = None if baseline is None or best is None else (best - baseline if study.maximize else baseline - best)
    best_params = study.best.get("params") or {}
    baseline_params = study.baseline.get("params") or {}
    return {
        "counts": {"requested": study.summary.get("trials_requested"), "finished": counts["COMPLETE"],
                   "pruned": counts["PRUNED"], "failed": counts["FAIL"],
                   "running": counts["RUNNING"] + counts["WAITING"]},
        "baseline": {
            "value": _text(study.baseline.get("value")), "state": study.baseline.get("state") or "",
            "findings": [_finding(f) for f in study.baseline.get("findings") or []],
        } if study.baseline else None,
        "best": {"number": study.best.get("number"), "value": _text(study.best.get("value")),
                 "holdout": _text(study.best.get("holdout"))} if study.best else None,
        "gain": None if gain is None else {
            "better": gain > 0, "amount": f"{abs(gain):.4g}",
            "relative": f"{100 * abs(gain) / abs(baseline):.0f} %" if baseline else ""},
        "best_params": [{"name": n, "best": _text(best_params.get(n)), "baseline": _text(baseline_params.get(n))}
                        for n in study.params if n in best_params],
        "show_baseline_params": bool(baseline_params),
        "study_findings": [_finding(f) for f in study.summary.get("findings") or []],
        "failed": [{"number": t["number"], "reason": t.get("failed_reason") or "no reason recorded",
                    "params": ", ".join(f"{name}={_text(value)}" for name, value in (t.get("params") or {}).items())}
                   for t in study.trials if t.get("state") == "FAIL"],
    }


def _trial_row(study: _Study, trial: dict[str, Any]) -> dict[str, Any]:
    params = trial.get("params") or {}
    reason = (trial.get("pruned_reason") or trial.get("failed_reason")
              or (f"at step {trial['pruned_step']}" if trial.get("pruned_step") else ""))
    return {
        "number": trial["number"], "state": trial.get("state") or "", "best": study.is_best(trial),
        "value": _text(trial.get("value")), "holdout": _text(trial.get("holdout")),
        "params": [_text(params.get(n)) for n in study.params], "reason": _code_links(reason),
        "top": _finding(trial["top_finding"]) if trial.get("top_finding") else None,
        "duration": _duration(trial.get("duration_s")),
    }


def render_tune_html(summary: dict[str, Any]) -> str:
    """The study page as one HTML string (no external resource); a chart without data is a one-line note."""
    study = _Study(summary)
    return template_environment().get_template("tune.html.j2").render(
        title=f"mindspore_doctor tune: {summary.get('study_name') or 'study'}",
        generated=_dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        metric=study.metric, maximize=study.maximize, storage=summary.get("storage"),
        **_results(study),
        space=[{"name": n, "kind": k.get("kind") or "", "range": _knob_range(k), "why": _code_links(k.get("why"))}
               for n, k in study.space.items()],
        completed=len(study.completed),
        importance=_svg(study.importance()),
        history=_svg(study.history()),
        slices=[{"name": n, "svg": _svg(study.slice(n))} for n in study.params] if study.completed else [],
        has_curves=any(t.get("intermediate") for t in study.trials),
        intermediate=_svg(study.intermediate()),
        params=study.params,
        trials=[_trial_row(study, t) for t in study.trials],
    )


def write_tune_html(summary: dict[str, Any], out_path: str | os.PathLike) -> Path:
    """Render and write the study page atomically (usual umask-based mode); returns the path."""
    return atomic_write_text(out_path, render_tune_html(summary))
