"""Readable text table of a Report (what ``str(report)`` and ``msdoctor lint`` print)."""
from __future__ import annotations

import textwrap

from mindspore_doctor.findings import Report

_MARK = {"error": "E", "warning": "W", "info": "I"}


def format_text(report: Report, width: int = 100) -> str:
    """The diagnosis first (when the report has one), then every finding, most severe first."""
    if not report.findings:
        return "mindspore_doctor: no findings."
    lines = []
    if report.meta.get("diagnosis"):
        from mindspore_doctor.diagnosis import Diagnosis

        lines += [Diagnosis.from_dict(report.meta["diagnosis"]).to_text(width), "", "Findings:"]
    for f in report.sorted():
        step = f" @step {f.step}" if f.step is not None else ""
        lines.append(f"{_MARK[f.severity.value]} {f.code} [{f.rule}] {f.where}{step}")
        lines.extend(textwrap.wrap(f.message, width, initial_indent="    ", subsequent_indent="    "))
        if f.suggestion:
            lines.extend(
                textwrap.wrap(f"fix: {f.suggestion}", width, initial_indent="    ", subsequent_indent="         ")
            )
    c = report.counts()
    lines.append(f"{len(report)} finding(s): {c['error']} error(s), {c['warning']} warning(s), {c['info']} info.")
    return "\n".join(lines)
