"""SARIF 2.1.0 export: structure checked against the schema's required keys and enums (no network)."""
from __future__ import annotations

import json
from typing import Any

from mindspore_doctor.catalog import RULES, make_finding
from mindspore_doctor.export.sarif import format_sarif, to_sarif
from mindspore_doctor.findings import Report

_LEVELS = {"none", "note", "warning", "error"}


def assert_valid_sarif(log: dict[str, Any]) -> None:
    """The parts of the SARIF 2.1.0 schema our output uses: required properties, enums, index integrity."""
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    assert isinstance(log["runs"], list) and log["runs"]
    for run in log["runs"]:
        driver = run["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        rules = driver.get("rules", [])
        ids = [r["id"] for r in rules]
        assert len(ids) == len(set(ids)), "reportingDescriptor ids must be unique"
        for r in rules:
            assert isinstance(r["id"], str)
            assert r["defaultConfiguration"]["level"] in _LEVELS
            assert isinstance(r["shortDescription"]["text"], str)
        for base in run.get("originalUriBaseIds", {}).values():
            assert base["uri"].endswith("/")
        for result in run["results"]:
            assert isinstance(result["message"]["text"], str) and result["message"]["text"]
            assert "ruleId" in result or "rule" in result
            assert result.get("level", "warning") in _LEVELS
            if "ruleIndex" in result:
                assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
            for loc in result.get("locations", []):
                physical = loc["physicalLocation"]
                artifact = physical["artifactLocation"]
                assert isinstance(artifact["uri"], str) and " " not in artifact["uri"]
                if "uriBaseId" in artifact:
                    assert artifact["uriBaseId"] in run["originalUriBaseIds"]
                if "region" in physical:
                    assert isinstance(physical["region"]["startLine"], int) and physical["region"]["startLine"] >= 1
            for logical in result.get("logicalLocations", []):
                assert logical.get("fullyQualifiedName") or logical.get("name")
            assert isinstance(result.get("properties", {}), dict)


def _report() -> Report:
    return Report(
        findings=[
            make_finding(
                "MSD104",
                "`head.drop` drops 90 % of activations.",
                location={"cell": "head.drop", "file": "models/my net.py", "line": 12, "target": "Net"},
                evidence={"p": 0.9},
                suggestion="Use p=0.1.",
            ),
            make_finding("MSD102", "`fc.weight` is frozen.", location={"parameter": "fc.weight", "cell": "fc"}),
            make_finding("MSD002", "check skipped", location={"check": "no-import"}, evidence={"ratio": float("nan")}),
        ]
    )


def test_sarif_log_is_structurally_valid_and_json_serialisable():
    log = json.loads(format_sarif(_report()))
    assert_valid_sarif(log)
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "mindspore_doctor"
    assert {r["id"] for r in driver["rules"]} == set(RULES)
    dropout_rule = next(r for r in driver["rules"] if r["id"] == "MSD104")
    assert dropout_rule["name"] == "dropout-rate-suspicious"
    assert dropout_rule["helpUri"].startswith("file://") and dropout_rule["helpUri"].endswith("/docs/rules/MSD104.md")


def test_results_map_severity_location_and_properties():
    results = {r["ruleId"]: r for r in to_sarif(_report())["runs"][0]["results"]}
    dropout = results["MSD104"]
    assert dropout["level"] == "warning"
    physical = dropout["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "models/my%20net.py", "uriBaseId": "%SRCROOT%"}
    assert physical["region"] == {"startLine": 12}
    assert dropout["logicalLocations"][0]["fullyQualifiedName"] == "Net.head.drop"
    assert dropout["properties"]["evidence"] == {"p": 0.9}
    assert "Use p=0.1." in dropout["message"]["text"]

    frozen = results["MSD102"]
    assert "locations" not in frozen  # no file known: logical location only
    assert [loc["kind"] for loc in frozen["logicalLocations"]] == ["variable", "member"]

    skipped = results["MSD002"]
    assert skipped["level"] == "note"
    assert skipped["properties"]["evidence"] == {"ratio": "nan"}


def test_empty_report_is_a_valid_log_with_no_results():
    log = to_sarif(Report())
    assert_valid_sarif(log)
    assert log["runs"][0]["results"] == []
