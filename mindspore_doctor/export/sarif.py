"""SARIF 2.1.0 output, so findings show up in code-scanning UIs and editors.

Findings with a known ``file``/``line`` get a physical location; every finding
that names a cell or parameter also gets a logical location (its dotted path),
which is all there is for objects built outside any file we can read.
"""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from mindspore_doctor.catalog import RULES
from mindspore_doctor.findings import TOOL_NAME, Finding, Report
from mindspore_doctor.rule_docs import rule_doc_uri

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SOURCE_ROOT = "%SRCROOT%"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _artifact(file: str) -> dict[str, Any]:
    """Relative paths are URIs against %SRCROOT% (the working directory); absolute ones file:// URIs."""
    path = Path(file)
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": quote(PurePosixPath(*path.parts).as_posix()), "uriBaseId": SOURCE_ROOT}


def _locations(finding: Finding) -> dict[str, Any]:
    loc = finding.location
    out: dict[str, Any] = {}
    if loc.get("file"):
        physical: dict[str, Any] = {"artifactLocation": _artifact(str(loc["file"]))}
        if isinstance(loc.get("line"), int) and loc["line"] >= 1:
            physical["region"] = {"startLine": loc["line"]}
        out["locations"] = [{"physicalLocation": physical}]
    logical = []
    prefix = f"{loc['target']}." if loc.get("target") else ""
    for key, kind in (("parameter", "variable"), ("cell", "member")):
        if key in loc and loc[key] is not None:
            path = str(loc[key]) or "<root>"
            logical.append({"name": path.rsplit(".", 1)[-1], "fullyQualifiedName": prefix + path, "kind": kind})
    if logical:
        out["logicalLocations"] = logical
    return out


def _result(finding: Finding, rule_index: dict[str, int]) -> dict[str, Any]:
    properties = {"severity": finding.severity.value, "evidence": finding.to_dict()["evidence"]}
    if finding.suggestion:
        properties["suggestion"] = finding.suggestion
    if finding.step is not None:
        properties["step"] = finding.step
    text = f"{finding.message} Fix: {finding.suggestion}" if finding.suggestion else finding.message
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": _LEVEL[finding.severity.value],
        "message": {"text": text},
        **_locations(finding),
        "properties": properties,
    }
    if finding.code in rule_index:
        result["ruleIndex"] = rule_index[finding.code]
    return result


def to_sarif(report: Report, tool_version: str | None = None) -> dict[str, Any]:
    """The report as a SARIF 2.1.0 log (a plain dict, ready for ``json.dumps``)."""
    if tool_version is None:
        from mindspore_doctor import __version__ as tool_version
    rules = [
        {
            "id": r.code,
            "name": r.slug,
            "shortDescription": {"text": r.summary},
            "defaultConfiguration": {"level": _LEVEL[r.severity.value]},
            "helpUri": rule_doc_uri(r.code),
        }
        for r in RULES.values()
    ]
    rule_index = {r["id"]: i for i, r in enumerate(rules)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": {"name": TOOL_NAME, "version": tool_version, "rules": rules}},
                "originalUriBaseIds": {SOURCE_ROOT: {"uri": Path.cwd().as_uri() + "/"}},
                "results": [_result(f, rule_index) for f in report.sorted()],
            }
        ],
    }


def format_sarif(report: Report, indent: int | None = 2) -> str:
    return json.dumps(to_sarif(report), indent=indent, allow_nan=False)
