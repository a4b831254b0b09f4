"""A trial that fails, a study that goes on: the user's code raising inside a trial fails that trial (``TrialFailed``,
its error kept as the trial's attribute), and only bad input, a failed baseline or a study whose every trial failed
stop the study (``TuneError``)."""
from __future__ import annotations

import contextlib
import logging
import re
import textwrap
from typing import Any, Iterator

import optuna

FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
MAX_ERROR_CHARS = 200
"""A failed trial's error as stored and shown: the exception's first line, shortened (MindSpore's run long)."""
ERROR_ATTR = "error"
"""The user attribute of a trial failed by its own configuration: what raised, with which parameters."""


class TuneError(ValueError):
    """Bad input to ``tune`` (storage URL, space, data): one line for the user."""


class TrialFailed(TuneError):
    """The user's ``build``, data factory or training raised for one configuration: inside the study that trial
    fails and the next one runs; for the baseline (the defaults: nothing to tune from) it is the study's error."""

    def __init__(self, doing: str, exc: Exception) -> None:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        reason = f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__
        super().__init__(f"{doing} raised {textwrap.shorten(reason, MAX_ERROR_CHARS, placeholder=' ...')}")


@contextlib.contextmanager
def failing_as(doing: str) -> Iterator[None]:
    """Runs the user's code: an ``Exception`` (``MemoryError`` included) becomes ``TrialFailed`` saying what was being
    done; ``KeyboardInterrupt`` and ``SystemExit`` pass, so Ctrl-C and a termination still stop the study."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the user's code: the trial fails, the study goes on
        raise TrialFailed(doing, exc) from exc


def tried_count(study: Any) -> int:
    """The trials that count towards ``trials``: finished (complete or pruned) or failed by their configuration's
    error. A trial whose process died is retried, and counts through its retry."""
    states = (*FINISHED, optuna.trial.TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=states)
               if t.state in FINISHED or ERROR_ATTR in t.user_attrs)


def require_a_finished_trial(study: Any) -> None:
    """A study whose every trial failed has no result: one line naming the first error, not an empty summary."""
    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if ERROR_ATTR in t.user_attrs]
    if failed and not any(t.state in FINISHED for t in trials):
        raise TuneError(f"every trial failed ({len(failed)}); the first, trial {failed[0].number}: "
                        f"{failed[0].user_attrs[ERROR_ATTR]}")


class _FailedTrialLog(logging.Filter):
    """Drops Optuna's two warnings per failed trial (one with the traceback): the trial's progress line and its
    ``error`` attribute already say what raised, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not re.match(r"Trial \d+ failed with ", record.getMessage())


@contextlib.contextmanager
def quiet_failed_trials() -> Iterator[None]:
    optuna_log = logging.getLogger("optuna.study._optimize")
    quiet = _FailedTrialLog()
    optuna_log.addFilter(quiet)
    try:
        yield
    finally:
        optuna_log.removeFilter(quiet)
