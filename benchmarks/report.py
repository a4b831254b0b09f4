"""What the two scored benchmarks share: the answer key read without importing a program, the alarm severities,
the number formats of their tables, the run's record, and docs/benchmark.md, whose parts they rewrite."""
from __future__ import annotations

import ast
import json
import os
import platform
import re
from datetime import date
from pathlib import Path
from typing import Any

from mindspore_doctor._io import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmark.md"
ALARM = ("warning", "error")
"""The severities a benchmark counts: info findings are never alarms."""

REALWORLD_SECTION = ("<!-- realworld:begin -->", "<!-- realworld:end -->")
"""docs/benchmark.md holds both benchmarks: the real-code corpus (scripts/bench_realworld.py) owns the text between
these markers, the fault benchmark (scripts/bench_faults.py) everything else."""


def literal_keywords(path: Path) -> dict[str, Any]:
    """The literal keyword arguments of ``FAULT = Fault(...)``, read without importing the program
    (importing one runs its module code: data generation, and ``init()`` under msrun)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FAULT" for t in node.targets):
            found = {}
            for keyword in getattr(node.value, "keywords", []):
                try:
                    found[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    continue  # not a literal (e.g. options built from a variable)
            return found
    raise SystemExit(f"{path}: no FAULT = Fault(...) assignment")


def number(value: float | None) -> str:
    """A ratio or a score in a table: two decimals, ``-`` when there is none."""
    return "-" if value is None else f"{value:.2f}"


def code_list(codes: list[str]) -> str:
    return ", ".join(codes) or "-"


def run_meta(seconds: float, jobs: int, **extra: Any) -> dict[str, Any]:
    """The record of one benchmark run: when, how long, how parallel, on what machine."""
    return {"date": date.today().isoformat(), "seconds": seconds, "jobs": jobs, **extra,
            "machine": f"{os.cpu_count()}-core {platform.machine()} CPU, Python {platform.python_version()}"}


def write_json(path: Path, meta: dict[str, Any], scored: dict[str, Any]) -> None:
    """The scored results with their run's record (``--json``; ``--render`` reads it back)."""
    atomic_write_text(path, json.dumps({"meta": meta, **scored}, indent=1))


def write_doc(fault_tables: str | None = None, realworld: str | None = None) -> None:
    """Rewrite one part of docs/benchmark.md and keep the other (None: keep that part as it is)."""
    text = DOC.read_text() if DOC.exists() else ""
    begin, end = REALWORLD_SECTION
    match = re.search(re.escape(begin) + ".*?" + re.escape(end), text, re.S)
    kept_realworld = match.group(0) if match else ""
    kept_faults = (text[: match.start()] + text[match.end():]) if match else text
    parts = [(fault_tables if fault_tables is not None else kept_faults).rstrip("\n"),
             realworld if realworld is not None else kept_realworld]
    atomic_write_text(DOC, "\n\n".join(p for p in parts if p) + "\n")
    print(f"wrote {DOC}")
