"""A study as plain data: its setup, the baseline, every trial (value, learning curve, why it was pruned or failed,
its findings), the best one and the parameters' importance; what ``msdoctor tune`` prints and
``export/tune_html.py`` draws."""
from __future__ import annotations

import logging
from typing import Any

import optuna

from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.rules import tuning
from mindspore_doctor.tuner.failures import ERROR_ATTR
from mindspore_doctor.tuner.storage import SETUP_ATTR, settled_features

logger = logging.getLogger("mindspore_doctor")


def finding_dict(finding: Finding) -> dict[str, Any]:
    """The finding as JSON (a trial attribute, the summary), with its short location for tables."""
    return {**finding.to_dict(), "where": finding.where}


def ranked_findings(report: Report) -> list[dict[str, Any]]:
    """A run's findings, most severe first, without the Doctor's own notes (MSD001/MSD002)."""
    return [finding_dict(f) for f in report.sorted() if f.code not in ("MSD001", "MSD002")]


def _failed_reason(trial: Any, retry: int | None) -> str | None:
    """Why a failed trial failed: its configuration's error, else its process stopped (killed, interrupted)."""
    if trial.state != optuna.trial.TrialState.FAIL:
        return None
    if ERROR_ATTR in trial.user_attrs:
        return trial.user_attrs[ERROR_ATTR]
    return "its process stopped before the trial ended" + (f"; retried as trial {retry}" if retry is not None else "")


def study_summary(study: Any, trials_requested: int | None = None, storage: str | None = None) -> dict[str, Any]:
    """The study as plain data: what ``export/tune_html.py`` draws and ``msdoctor tune`` prints."""
    setup = study.user_attrs.get(SETUP_ATTR, {})
    with settled_features():
        retried = {t.number: optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t)
                   for t in study.get_trials(deepcopy=False)}
    retries = {original: number for number, original in retried.items() if original is not None}
    rows = [{
        "number": t.number, "state": t.state.name, "value": t.value, "params": dict(t.params),
        "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
        "pruned_step": t.user_attrs.get("pruned_step"), "pruned_reason": t.user_attrs.get("pruned_reason"),
        "failed_reason": _failed_reason(t, retries.get(t.number)),
        "top_finding": t.user_attrs.get("top_finding"), "findings": t.user_attrs.get("findings", []),
        "holdout": t.user_attrs.get("holdout"), "duration_s": t.user_attrs.get("duration_s"),
        "worker": t.user_attrs.get("worker"), "retry_of": retried[t.number],
    } for t in study.get_trials(deepcopy=False)]
    completed = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
    best, importance, findings = None, {}, []
    if completed:
        trial = study.best_trial
        best = {"number": trial.number, "value": trial.value, "params": dict(trial.params),
                "holdout": trial.user_attrs.get("holdout"), "holdout_samples": trial.user_attrs.get("holdout_samples")}
        findings = tuning.optimistic_best(setup.get("metric", ""), best["value"], setup.get("eval_samples"),
                                          len(completed), best["holdout"], best["holdout_samples"])
    if len(completed) >= 2:
        try:
            importance = dict(optuna.importance.get_param_importances(study))
        except (RuntimeError, ValueError) as exc:  # e.g. every trial drew the same values
            logger.info("parameter importance unavailable: %s", exc)
    return {
        "study_name": study.study_name, "direction": setup.get("direction"), "metric": setup.get("metric"),
        "trials_requested": trials_requested, "storage": storage, "baseline": setup.get("baseline"),
        "space": setup.get("space", {}), "best": best, "importance": importance, "trials": rows,
        "findings": [finding_dict(f) for f in findings],
    }
