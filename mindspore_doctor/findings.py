"""Finding, Severity and Report: the one data model every part of the doctor shares.

Rules produce findings, exporters format reports; neither touches MindSpore here.
"""
from __future__ import annotations

import json
import math
import textwrap
from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterable

REPORT_VERSION = 1
_WHERE_KEYS = ("parameter_path", "parameter", "cell", "column", "optimizer", "check", "model")
"""Location keys that name *what* a finding is about, most specific first (``parameter_path``: the registration
path of a parameter whose name differs from it)."""
TOOL_NAME = "mindspore_doctor"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is more severe (info=0, warning=1, error=2)."""
        return {"info": 0, "warning": 1, "error": 2}[self.value]

    @classmethod
    def parse(cls, value: "str | Severity") -> "Severity":
        try:
            return cls(value.value if isinstance(value, Severity) else str(value).lower())
        except ValueError:
            raise ValueError(f"unknown severity {value!r}; expected error, warning or info") from None


def _jsonable(value: Any) -> Any:
    """Evidence carries numpy scalars and tuples; JSON wants plain floats, lists, no NaN."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if hasattr(value, "tolist"):
        return _jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan", "inf", "-inf": strict JSON has no literal for them
    return value


@dataclass
class Finding:
    """One diagnosed problem, tied to a catalog code and to where it was seen."""

    code: str
    rule: str
    severity: Severity
    message: str
    location: dict[str, Any] = field(default_factory=dict)
    step: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    suggestion: str = ""

    def __post_init__(self) -> None:
        self.severity = Severity.parse(self.severity)

    @property
    def where(self) -> str:
        """Short human location: ``cell``/``parameter`` and ``file:line`` when known."""
        loc = self.location
        parts = []
        name = next((loc[k] for k in _WHERE_KEYS if loc.get(k) not in (None, "")), None)
        if name is not None:
            parts.append(f"{loc['dataset']}:{name}" if loc.get("dataset") else str(name))
        elif "cell" in loc:
            parts.append("<network>")  # the root cell's path is ""
        elif loc.get("dataset"):
            parts.append(f"{loc['dataset']} dataset")
        if loc.get("file"):
            parts.append(f"{loc['file']}:{loc['line']}" if loc.get("line") else str(loc["file"]))
        return " ".join(parts) or "-"

    @property
    def key(self) -> tuple:
        """Identity for de-duplication: one finding per (code, location)."""
        return (self.code, tuple(sorted((k, str(v)) for k, v in self.location.items())))

    @property
    def resolved(self) -> bool:
        """The finding lifecycle: a transient training finding whose condition no longer held at the end."""
        return "resolved_step" in self.evidence

    def resolve(self, step: int) -> None:
        """Keep the finding as ``info``, saying from which step its condition no longer held and how severe it
        was when it was logged (and acted on)."""
        self.evidence["original_severity"] = self.severity.value
        self.evidence["resolved_step"] = step
        self.message = f"{self.message} Resolved: no longer the case from step {step} on (was {self.severity.value})."
        self.severity = Severity.INFO

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return _jsonable(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class Report:
    """All findings of a lint or a training run, plus free-form metadata."""

    findings: list[Finding] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def add(self, finding: Finding) -> bool:
        """Add unless a finding with the same (code, location) is already there."""
        if any(f.key == finding.key for f in self.findings):
            return False
        self.findings.append(finding)
        return True

    def extend(self, findings: Iterable[Finding]) -> None:
        for f in findings:
            self.add(f)

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]

    def at_least(self, severity: "Severity | str") -> list[Finding]:
        threshold = Severity.parse(severity).rank
        return [f for f in self.findings if f.severity.rank >= threshold]

    def counts(self) -> dict[str, int]:
        """Finding counts per severity (all three keys always present)."""
        c = Counter(f.severity.value for f in self.findings)
        return {s.value: c.get(s.value, 0) for s in Severity}

    def sorted(self) -> list[Finding]:
        """Most severe first, then by code and step."""
        return sorted(self.findings, key=lambda f: (-f.severity.rank, f.code, f.step or 0, f.where))

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": REPORT_VERSION,
            "tool": TOOL_NAME,
            "summary": self.counts(),
            "findings": [f.to_dict() for f in self.sorted()],
            **{k: _jsonable(v) for k, v in self.meta.items() if k not in ("version", "tool", "findings", "summary")},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        meta = {k: v for k, v in data.items() if k not in ("version", "tool", "findings", "summary")}
        return cls(findings=[Finding.from_dict(f) for f in data.get("findings", [])], meta=meta)

    @classmethod
    def from_json(cls, text: str) -> "Report":
        return cls.from_dict(json.loads(text))

    def to_text(self, width: int = 100) -> str:
        """The diagnosis first (when the report has one), then every finding, most severe first: what
        ``print(report)``, ``msdoctor lint`` and the end of training show."""
        if not self.findings:
            return "mindspore_doctor: no findings."
        lines = []
        if self.meta.get("diagnosis"):
            lines += [diagnosis_text(self.meta["diagnosis"], width), "", "Findings:"]
        for f in self.sorted():
            step = f" @step {f.step}" if f.step is not None else ""
            lines.append(f"{_MARK[f.severity.value]} {f.code} [{f.rule}] {f.where}{step}")
            lines.extend(textwrap.wrap(f.message, width, initial_indent="    ", subsequent_indent="    "))
            if f.suggestion:
                lines.extend(textwrap.wrap(f"fix: {f.suggestion}", width, initial_indent="    ",
                                           subsequent_indent="         "))
        c = self.counts()
        lines.append(f"{len(self)} finding(s): {c['error']} error(s), {c['warning']} warning(s), {c['info']} info.")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_text()

    def __len__(self) -> int:
        return len(self.findings)


_MARK = {"error": "E", "warning": "W", "info": "I"}


def diagnosis_text(diagnosis: dict[str, Any], width: int = 100, limit: int = 5) -> str:
    """A diagnosis (``Diagnosis.to_dict()``, as a report's ``meta["diagnosis"]`` holds it) as text: the likely
    causes, most likely first, with their evidence and remedies."""
    causes = diagnosis.get("causes", [])
    if not causes:
        return "Diagnosis: no likely cause (no symptom the knowledge base knows)."
    lines = ["Diagnosis: likely causes, most likely first"]
    for rank, cause in enumerate(causes[:limit], 1):
        lines.append(f"  {rank}. {cause['title']} [{cause['category']}] score {cause['score']:g}, "
                     f"confidence {cause['confidence']:.0%}")
        shown = "; ".join(f"{e['code']} {e['detail']}" for e in cause["evidence"] if e["weight"] > 0)
        lines.extend(textwrap.wrap(f"evidence: {shown}", width, initial_indent="     ",
                                   subsequent_indent="               "))
        for i, remedy in enumerate(cause["remedies"], 1):
            lines.extend(textwrap.wrap(f"{i}) {remedy}", width, initial_indent="     ", subsequent_indent="        "))
    if len(causes) > limit:
        lines.append(f"  ... and {len(causes) - limit} less likely cause(s) in the JSON report.")
    return "\n".join(lines)
