"""The real-code corpus (issue 13): healthy library models must get no warning or error from lint or the Doctor.

The fast subset (``FAULT(fast=True)``) runs here end to end; the whole corpus runs with
``python scripts/bench_realworld.py --jobs 1``.
"""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.realworld import bench, model_zoo
from benchmarks.realworld import lint_only as LINT_ONLY

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_realworld.py"
PROGRAMS = ROOT / "benchmarks" / "realworld" / "programs"


def _keys():
    return {p.stem: report.literal_keywords(p) for p in sorted(PROGRAMS.glob("[a-z]*.py"))}


def test_corpus_covers_enough_architectures_and_trains_enough_of_them():
    keys = _keys()
    lint_only = LINT_ONLY.MODELS
    sources = {name: (PROGRAMS / f"{name}.py").read_text() for name in keys}
    assert all(k["category"] == "healthy" and not k["expect"] for k in keys.values())
    assert len({k["arch"] for k in keys.values()} | {m.arch for m in lint_only.values()}) >= 12
    assert all("\ndef train(" in text for text in sources.values())
    # A Model recipe and its data, or (a GAN's several models in its own loop) what to lint
    assert all(all(f"\n{part}" in text for part in ("DATA = ", "def recipe(")) or "\ndef lint_targets(" in text
               for text in sources.values())
    assert len(keys) >= 8 and not set(keys) & set(lint_only)
    assert bench.discover(None, fast=True)  # a CI subset exists


@pytest.mark.parametrize("library", ["mindcv", "mindyolo", "mindaudio"])
def test_model_libraries_are_installed_by_the_test_setup(library):
    """setup.py's ``test`` extra pins them: the corpus never downloads anything at run time."""
    assert importlib.import_module(library).__name__ == library


def _row(name, lint=(), doctor=(), effect=True, weights=True, trained=True, resolved=()):
    findings = [{"source": "lint", "code": c, "severity": s, "step": None, "where": "-", "message": c}
                for c, s in lint]
    findings += [{"source": "doctor", "code": c, "severity": s, "step": 50, "where": "-", "message": c}
                 for c, s in doctor]
    findings += [{"source": "doctor", "code": c, "severity": "info", "original_severity": "warning", "step": 40,
                  "resolved_step": 90, "where": "-", "message": c} for c in resolved]
    result = {"name": name, "library": "mindcv 0.3.0", "covers": ["BatchNorm"], "trained": trained,
              "fault": {"arch": name, "data": "images", "fast": False}, "findings": findings, "process_s": 1.0,
              "rss_same_process_mb": {"lint": 500.0, "plain": 600.0, "doctor": 720.0}}
    if trained:  # bench.run_one's fresh-process runs, one per variant
        result["rss_mb"] = {"plain": 550.0, "doctor": 605.0, "plain_vmhwm": 551.0, "doctor_vmhwm": 606.0}
        result["run_s"] = {"plain": 10.0, "doctor": 13.0}
    if trained:
        result.update(effect={"ok": effect, "reason": ""}, plain={"steps": 200},
                      doctor={"weights_identical": weights}, paired={"median_ratio": 1.2, "mean_ratio": 1.3})
    return result


def test_scorer_counts_alarms_by_source_and_ignores_info_and_resolved_findings():
    scored = bench.score([
        _row("a", lint=[("MSD109", "warning"), ("MSD115", "info")]),
        _row("b", doctor=[("MSD209", "warning"), ("MSD401", "warning")], effect=False),
        _row("c", doctor=[("MSD115", "info")], weights=False, resolved=["MSD203"]),
        _row("d", lint=[("MSD101", "warning")], trained=False),
    ])
    totals = scored["totals"]
    assert scored["rows"][2]["resolved"] == ["MSD203"] and scored["rows"][2]["doctor_alarms"] == []
    assert totals["with_alarms"] == ["a", "b", "d"]
    assert (totals["lint_alarms"], totals["doctor_alarms"]) == (2, 2)
    assert totals["effect_failures"] == ["b"] and totals["weights_changed"] == ["c"]
    assert (totals["trained"], totals["linted_only"]) == (3, 1)
    assert totals["median_step_ratio"] == 1.2 and totals["median_rss_ratio"] == pytest.approx(1.1)
    assert totals["median_mean_step_ratio"] == 1.3 and totals["max_mean_step_ratio"] == 1.3
    assert totals["median_rss_same_process_ratio"] == pytest.approx(1.2) and totals["rss_not_measured"] == []
    assert totals["median_run_ratio"] == pytest.approx(1.3) and scored["rows"][3]["run_ratio"] is None


def test_model_zoo_summary_lists_failures_and_each_alarm_once_with_its_recipes(tmp_path):
    unused = {"code": "MSD110", "severity": "warning", "where": "conv2d", "message": "never used"}
    note = {"code": "MSD115", "severity": "info", "where": "bn.beta", "message": "redundant"}
    results = {"repmlp": {"model": "repmlp", "runs": {"momentum": {"findings": [unused, note]},
                                                      "adamw": {"findings": [unused]}}},
               "resnet": {"model": "resnet", "runs": {"momentum": {"findings": [note]}}},
               "rexnet": {"model": "rexnet", "failed": "device address error"}}
    for name, result in results.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    (tmp_path / model_zoo.SUMMARY).write_text("{}")  # an earlier summary is not a model
    summary = model_zoo.summarize(tmp_path)
    assert summary["models"] == 3 and summary["failed"] == {"rexnet": "device address error"}
    assert summary["with_alarms"] == ["repmlp"]
    assert summary["alarms"] == [{"model": "repmlp", "code": "MSD110", "where": "conv2d", "message": "never used",
                                  "recipes": ["momentum", "adamw"]}]


def test_each_benchmark_rewrites_only_its_own_part_of_the_docs(tmp_path, monkeypatch):
    doc = tmp_path / "benchmark.md"
    doc.write_text("# Fault benchmark\n\nfault tables\n")
    monkeypatch.setattr(report, "DOC", doc)
    scored = bench.score([_row("a")])
    meta = {"date": "2026-01-01", "machine": "2-core", "seconds": 10.0, "jobs": 1}
    report.write_doc(realworld=bench.markdown(scored, meta))
    report.write_doc(realworld=bench.markdown(scored, meta))
    text = doc.read_text()
    assert text.startswith("# Fault benchmark\n\nfault tables\n") and text.count(report.REALWORLD_SECTION[0]) == 1
    assert "| a | mindcv 0.3.0 |" in text
    report.write_doc(fault_tables="# Fault benchmark\n\nnew fault tables\n")  # bench_faults.py --write-docs
    text = doc.read_text()
    assert text.startswith("# Fault benchmark\n\nnew fault tables\n\n") and "| a | mindcv 0.3.0 |" in text


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ci_subset_of_the_corpus_learns_with_no_false_alarm(tmp_path):
    out = tmp_path / "scores.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--fast", "--jobs", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=850, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    totals = json.loads(out.read_text())["totals"]
    report = run.stdout[-4000:]
    assert totals["programs"] >= 4 and totals["failed_to_run"] == [], report
    assert totals["effect_failures"] == [] and totals["crashes"] == [] and totals["internal_errors"] == [], report
    assert totals["with_alarms"] == [], report
    assert totals["weights_changed"] == [], report
    assert totals["rss_not_measured"] == [], report  # each trained program's fresh plain and Doctor processes
