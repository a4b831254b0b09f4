"""Where a study lives: Optuna's RDB storage (SQLite, PostgreSQL, MySQL) with a heartbeat, so that a killed study
resumes, a dead worker's trial is retried once, and several processes share one study through one URL."""
from __future__ import annotations

import contextlib
import logging
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

import optuna
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from mindspore_doctor.tuner.failures import TuneError

STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")
HEARTBEAT_S = 2
"""Seconds between a running trial's heartbeats in the storage."""
SQLITE_LOCK_WAIT_S = 10
"""SQLite's busy timeout: how long a write waits for another process's lock before it fails ("database is
locked"). Optuna's transactions hold the lock for milliseconds: 10 s absorbs a burst of every worker's writes on a
slow disk many times over (pysqlite's default is 5 s)."""
GRACE_S = 30
"""A trial whose heartbeat is this old belonged to a dead process: it is failed (and retried once) by the next
trial start of any process. A live process records a beat at least every ``HEARTBEAT_S + SQLITE_LOCK_WAIT_S`` =
12 s (a beat waits at most the busy timeout for the lock); one beat lost to a timed-out wait (``HeartbeatStorage``
goes on beating) makes that 24 s. 30 s is above both, so a trial is never failed while its process waits on a lock,
and a killed worker's trial is retried about 30 s after its last beat."""
SETUP_ATTR = "mindspore_doctor"
"""The study's user attribute holding the search space, the metric and the baseline: every worker and every
resumed run reads the same ones."""

logger = logging.getLogger("mindspore_doctor")


class HeartbeatStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose heartbeat survives a write that fails (a lock held past the busy timeout): Optuna's
    heartbeat thread ends at the first error, and the live trial would then be failed as dead ``GRACE_S`` later."""

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            super().record_heartbeat(trial_id)
        except optuna.exceptions.StorageInternalError as exc:
            logger.warning("a trial heartbeat was not recorded (%s); the next one follows in %d s",
                           exc.__cause__ or exc, HEARTBEAT_S)


@contextlib.contextmanager
def settled_features() -> Iterator[None]:
    """Optuna's heartbeat, multivariate TPE and constant liar are "experimental" (since 2.x): not the user's
    concern, no warning on their console."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def open_storage(url: str | None) -> Any:
    """Optuna's RDB storage with a heartbeat (a killed worker's trial is failed, then retried once); in memory
    when ``url`` is None."""
    if url is None:
        return optuna.storages.InMemoryStorage()
    scheme = url.partition(":")[0].partition("+")[0]
    if scheme not in STORAGE_SCHEMES:
        raise TuneError(f"unknown storage {url!r}: give a database URL, sqlite:///path/study.db (one machine) or "
                        "postgresql://... / mysql://... (many machines)")
    engine = {"connect_args": {"timeout": SQLITE_LOCK_WAIT_S}} if scheme == "sqlite" else {}
    try:
        if scheme == "sqlite":
            Path(url.partition(":///")[2]).parent.mkdir(parents=True, exist_ok=True)
        with settled_features():
            return HeartbeatStorage(
                url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
    except (OSError, ImportError, SQLAlchemyError) as exc:  # a directory, a driver, a server out of reach
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        shown = make_url(url).render_as_string(hide_password=True)
        raise TuneError(f"cannot open the study's storage {shown!r}: {reason}") from None


def fail_dead_trials(study: Any) -> None:
    """Fail (and so retry) the trials a killed process left running before this process starts its own.

    Optuna does it when a trial starts, but only once the dead one's heartbeat is ``GRACE_S`` old: a study
    resumed at once after a crash, with short trials, would end with the dead trial still running and its
    parameters never retried. A trial of a live worker keeps beating and is waited for only ``GRACE_S`` + 1 s.
    """
    running = (optuna.trial.TrialState.RUNNING,)
    deadline = time.monotonic() + GRACE_S + 1
    while study.get_trials(deepcopy=False, states=running) and time.monotonic() < deadline:
        with settled_features():
            optuna.storages.fail_stale_trials(study)
        time.sleep(0.5)


def existing_setup(backend: Any, study_name: str) -> dict[str, Any] | None:
    """The setup a study in ``backend`` already has (a resumed study, or another worker's): nothing to train."""
    try:
        study = optuna.load_study(study_name=study_name, storage=backend)
    except KeyError:
        return None
    return study.user_attrs.get(SETUP_ATTR)
