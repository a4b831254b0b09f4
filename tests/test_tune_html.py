"""The study's HTML page: results, space, charts, trials table; degenerate studies; atomic write; in Chromium."""
from __future__ import annotations

import math
import os
import re
import stat

import markupsafe
import pytest

from mindspore_doctor.export import tune_html
from mindspore_doctor.export.html import rule_doc_href
from test_html_browser import ARTIFACTS, browser  # noqa: F401  (the fixture)


def finding(code: str, rule: str, severity: str, message: str, step: int | None = None) -> dict:
    return {"code": code, "rule": rule, "severity": severity, "message": message, "where": "fc.weight",
            "step": step, "suggestion": f"Fix for {code}."}


NAN_LOSS = finding("MSD201", "nonfinite-loss", "error", "Loss is NaN at step 9 (`fc.weight` overflowed)", step=9)
OVERFIT = finding("MSD401", "overfitting", "warning", "Eval loss rises from epoch 3 while train loss falls " * 4)
OPTIMISTIC = finding("MSD406", "tuning-optimistic-best", "warning",
                     "The best of 10 trials was scored on 500 validation samples: <likely optimistic>")
DIVERGING = finding("MSD202", "loss-diverging", "error", "Loss grows to 40x its minimum")

#       number, state,      value, lr,     wd,    width, optimizer,  intermediate,        extra
TRIALS = [
    (0, "COMPLETE", 0.81, 0.05, 1e-4, 2, "momentum", {"1": 0.6, "2": 0.74, "3": 0.81}, {}),
    (1, "PRUNED", None, 0.09, 1e-3, 4, "adam", {},
     {"pruned_step": 9, "pruned_reason": "MSD201 nonfinite-loss at step 9", "top_finding": NAN_LOSS,
      "findings": [NAN_LOSS]}),
    (2, "COMPLETE", 0.88, 0.02, 3e-4, 2, "adam", {"1": 0.7, "2": 0.85, "3": 0.88}, {"holdout": 0.86}),
    (3, "PRUNED", None, 0.0003, 1e-5, 1, "momentum", {"1": 0.31, "2": 0.35},
     {"pruned_step": 2, "pruned_reason": "learning curve below the median at epoch 2"}),
    (4, "FAIL", None, 0.07, 1e-2, 4, "adam", {}, {}),
    (5, "COMPLETE", 0.9, 0.015, 5e-4, 4, "momentum", {"1": 0.72, "2": 0.86, "3": 0.9}, {}),
    (6, "COMPLETE", 0.84, 0.004, 1e-4, 1, "adam", {"1": 0.5, "2": 0.7, "3": 0.84},
     {"top_finding": OVERFIT, "findings": [OVERFIT]}),
    (7, "COMPLETE", 0.93, 0.012, 2e-4, 4, "adam", {"1": 0.78, "2": 0.9, "3": 0.93}, {"holdout": 0.91}),
    (8, "PRUNED", None, 0.0008, 5e-3, 2, "momentum", {"1": 0.4},
     {"pruned_step": 1, "pruned_reason": "learning curve below the median at epoch 1"}),
    (9, "COMPLETE", 0.87, 0.03, 1e-4, 2, "adam", {"1": 0.69, "2": 0.82, "3": 0.87}, {}),
]


def study_summary() -> dict:
    """A 10-trial study with a float log knob, an int log knob, categorical int and string knobs."""
    trials = [
        {"number": n, "state": state, "value": value, "intermediate": curve, "pruned_step": None,
         "pruned_reason": None, "top_finding": None, "findings": [], "holdout": None, "duration_s": 3.2 + n,
         "params": {"learning_rate": lr, "weight_decay": wd, "width_multiplier": width, "optimizer": opt}, **extra}
        for n, state, value, lr, wd, width, opt, curve, extra in reversed(TRIALS)  # the page sorts them
    ]
    return {
        "study_name": "mnist-tune", "direction": "maximize", "metric": "accuracy", "trials_requested": 12,
        "storage": "sqlite:///runs/tune.db",
        "baseline": {"params": {"learning_rate": 0.5, "weight_decay": 0.0, "width_multiplier": 1,
                                "optimizer": "momentum"},
                     "value": 0.41, "state": "COMPLETE", "top_finding": DIVERGING, "findings": [DIVERGING]},
        "space": {
            "learning_rate": {"kind": "float", "low": 1e-4, "high": 1e-1, "log": True, "choices": [],
                              "why": "MSD201, MSD202: below the configured learning rate (0.5)"},
            "weight_decay": {"kind": "float", "low": 1e-5, "high": 1e-2, "log": True, "choices": [],
                             "why": "MSD401: overfitting on `fc.weight`"},
            "width_multiplier": {"kind": "categorical", "low": None, "high": None, "log": False,
                                 "choices": [1, 2, 4], "why": "MSD402: underfitting"},
            "optimizer": {"kind": "categorical", "low": None, "high": None, "log": False,
                          "choices": ["momentum", "adam"], "why": "default knob"},
        },
        "best": {"number": 7, "value": 0.93, "holdout": 0.91,
                 "params": {"learning_rate": 0.012, "weight_decay": 2e-4, "width_multiplier": 4, "optimizer": "adam"}},
        "importance": {"learning_rate": 0.62, "weight_decay": 0.21, "width_multiplier": 0.12, "optimizer": 0.05},
        "trials": trials,
        "findings": [OPTIMISTIC],
    }


def section(page: str, anchor: str) -> str:
    return page.split(f'id="{anchor}"', 1)[1].split("</section>", 1)[0]


def trial_rows(page: str) -> list[str]:
    return re.findall(r'<tr id="trial-\d+" class="trial.*?</tr>', page, re.S)


def test_study_page_has_results_space_charts_and_trials():
    summary = study_summary()
    page = tune_html.render_tune_html(summary)
    assert "<title>mindspore_doctor tune: mnist-tune</title>" in page
    summary_part = section(page, "summary")
    counts = "<strong>6</strong> finished, <strong>3</strong> pruned, <strong>1</strong> failed"
    assert counts in re.sub(r"\s+", " ", summary_part)
    assert "of 12 requested" in summary_part and "0.41" in summary_part and "0.93" in summary_part
    assert "better by 0.52, 127 %" in summary_part and "0.91" in summary_part  # gain and holdout
    best = section(page, "summary").split('id="best-params"', 1)[1].split("</table>", 1)[0]
    for shown in ("learning_rate", "0.012", "0.0002", "adam", "0.5"):
        assert shown in best
    for f in (OPTIMISTIC, DIVERGING, NAN_LOSS, OVERFIT):  # study, baseline and trials' top findings, linked
        assert f'href="{rule_doc_href(f["code"])}"' in page
    assert "&lt;likely optimistic&gt;" in summary_part and "sev-warning" in summary_part

    space = section(page, "space")
    assert "0.0001 … 0.1 (log)" in space and "momentum, adam" in space and "1, 2, 4" in space
    assert f'<a href="{rule_doc_href("MSD202")}">MSD202</a>' in space and "<code>fc.weight</code>" in space

    for chart in ("chart-importance", "chart-history", "chart-intermediate"):
        assert section(page, chart).count("<svg") == 1, chart
    assert section(page, "chart-slices").count("<svg") == len(summary["space"])
    assert page.count("<svg") == 3 + len(summary["space"])

    rows = trial_rows(page)
    assert [int(re.search(r'id="trial-(\d+)"', r)[1]) for r in rows] == list(range(10))
    for row, (number, state, *_) in zip(rows, TRIALS):
        assert f'state-{state}">{state}<' in row
        assert ("best" in row.split(">", 1)[0]) == (number == 7)
    assert "learning curve below the median at epoch 2" in rows[3] and "MSD201</a> nonfinite-loss" in rows[1]
    assert "…" in rows[6] and 'title="Eval loss rises' in rows[6]  # the long message, shortened


def test_failed_trials_are_listed_with_their_parameters_and_error():
    summary = study_summary()
    error = "build({'learning_rate': 0.07}) raised MemoryError: cannot allocate <64 MiB>"
    next(t for t in summary["trials"] if t["number"] == 4)["failed_reason"] = error
    page = tune_html.render_tune_html(summary)
    (failed,) = re.findall(r'<li><a href="#trial-(\d+)">.*?</li>', section(page, "summary"), re.S)
    assert failed == "4"
    listed = section(page, "summary").split('id="failed-trials"', 1)[1].split("</ul>", 1)[0]
    assert "learning_rate=0.07, weight_decay=0.01, width_multiplier=4, optimizer=adam" in listed
    shown = str(markupsafe.escape(error))
    assert shown in listed and shown in trial_rows(page)[4] and "<64 MiB>" not in page
    assert "Pruned or failed because" in section(page, "trials")


def test_page_is_self_contained_and_escaped():
    page = tune_html.render_tune_html(study_summary())
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert not re.search(r"(src|href)=\"(https?:)?//", page)
    assert "<likely" not in page


def test_minimize_counts_improvement_downwards():
    summary = study_summary()
    summary.update(direction="minimize", metric="mse")
    summary["baseline"]["value"] = 0.5
    summary["best"]["value"] = 0.93
    assert "not better by 0.43" in section(tune_html.render_tune_html(summary), "summary")


def degenerate(case: str) -> dict:
    summary = study_summary()
    if case == "no trials":
        summary.update(trials=[], best=None, importance={}, baseline=None, findings=[], space={})
    elif case == "only failed":
        for t in summary["trials"]:
            t.update(state="FAIL", value=None, intermediate={})
        summary.update(best=None, importance={})
    elif case == "single trial":
        summary["trials"] = [t for t in summary["trials"] if t["number"] == 7]
        summary["importance"] = {}
    elif case == "nan values":
        for t in summary["trials"]:
            t.update(value=math.nan if t["state"] == "COMPLETE" else "nan",
                     intermediate={e: math.nan for e in t["intermediate"]})
        summary.update(importance={"learning_rate": math.nan}, best=None)
        summary["baseline"]["value"] = math.nan
    return summary


@pytest.mark.parametrize("case", ["no trials", "only failed", "single trial", "nan values"])
def test_degenerate_studies_render_notes_instead_of_charts(case):
    page = tune_html.render_tune_html(degenerate(case))
    trials = degenerate(case)["trials"]
    assert len(trial_rows(page)) == len(trials)
    if case == "single trial":
        assert section(page, "chart-history").count("<svg") == 1
        assert section(page, "chart-slices").count("<svg") == 4
        assert "needs at least 2 completed trials (this study has 1)" in page
    else:
        assert "<svg" not in page
        assert page.count('class="no-data"') >= 3
    if case == "nan values":
        assert "No finite intermediate value" in page and ">nan<" in page


def test_string_and_odd_param_values_do_not_break_the_slices():
    summary = study_summary()
    del summary["space"]["optimizer"]  # a knob missing from the space is still a column and a slice
    summary["trials"][0]["params"]["width_multiplier"] = "wide"  # a value outside the choices
    summary["trials"][1]["params"]["learning_rate"] = None
    page = tune_html.render_tune_html(summary)
    assert section(page, "chart-slices").count("<svg") == 4
    assert "<th><code>optimizer</code></th>" in page


def test_write_is_atomic_with_the_usual_mode(tmp_path):
    old = os.umask(0o027)
    try:
        path = tune_html.write_tune_html(study_summary(), tmp_path / "out" / "tune.html")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in path.parent.iterdir()] == ["tune.html"]  # no temp file left
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_study_page_in_chromium(browser, tmp_path):  # noqa: F811  (the imported fixture)
    from selenium.webdriver.common.by import By

    summary = study_summary()
    page = tune_html.write_tune_html(summary, tmp_path / "tune.html")
    browser.get(page.as_uri())
    rows = browser.find_elements(By.CSS_SELECTOR, "#trials-table tbody tr")
    assert [r.get_attribute("id") for r in rows] == [f"trial-{n}" for n in range(len(summary["trials"]))]
    for chart in ("chart-importance", "chart-history", "chart-intermediate"):
        svg = browser.find_element(By.CSS_SELECTOR, f"#{chart} figure svg")
        assert svg.size["width"] > 400 and svg.size["height"] > 100, chart
    slices = browser.find_elements(By.CSS_SELECTOR, "#chart-slices figure svg")
    assert len(slices) == 4 and len({s.location["y"] for s in slices}) < 4  # several per row
    ARTIFACTS.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(ARTIFACTS / "tune_report.png"))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
