"""Finding/Report contract: JSON shape, de-duplication, severities, selection."""
import json

import pytest

from mindspore_doctor import Finding, Report, Severity
from mindspore_doctor.catalog import RULES, make_finding, resolve_codes


def test_report_json_contract_round_trips():
    report = Report()
    report.add(make_finding("MSD104", "drops 90 %", location={"cell": "head.dropout"}, evidence={"p": 0.9}))
    report.add(make_finding("MSD201", "loss is nan", step=7, evidence={"loss": float("nan")}))
    data = json.loads(report.to_json())
    assert data["version"] == 1 and data["tool"] == "mindspore_doctor"
    assert [f["code"] for f in data["findings"]] == ["MSD201", "MSD104"]  # errors first
    first = data["findings"][0]
    assert set(first) == {"code", "rule", "severity", "message", "location", "step", "evidence", "suggestion"}
    assert first["evidence"]["loss"] == "nan"
    assert Report.from_json(report.to_json()).codes() == {"MSD104", "MSD201"}


def test_same_code_and_location_is_reported_once():
    report = Report()
    assert report.add(make_finding("MSD209", "a", location={"parameter": "fc.weight"}, step=1))
    assert not report.add(make_finding("MSD209", "b", location={"parameter": "fc.weight"}, step=9))
    assert report.add(make_finding("MSD209", "c", location={"parameter": "fc.bias"}, step=9))
    assert len(report) == 2


def test_text_table_names_location_and_counts():
    report = Report([make_finding("MSD104", "drops 90 %", location={"cell": "head.dropout"}, suggestion="use p=0.1")])
    text = str(report)
    assert "MSD104" in text and "head.dropout" in text and "fix: use p=0.1" in text
    assert "1 warning(s)" in text
    assert str(Report()) == "mindspore_doctor: no findings."


def test_catalog_codes_and_selectors():
    assert RULES["MSD104"].slug == "dropout-rate-suspicious"
    assert resolve_codes(["MSD10"]) >= {"MSD101", "MSD109"}
    assert resolve_codes(["dead-relu"]) == {"MSD212"}
    with pytest.raises(ValueError):
        resolve_codes(["MSD999"])
    assert Finding("MSD001", "internal-error", "warning", "x").severity is Severity.WARNING
    with pytest.raises(ValueError):
        Severity.parse("fatal")
