"""``msdoctor tune`` from the command line: bad input, every trial failing, the ``--jobs`` workers never left
behind, a SIGKILLed study resuming, two workers on one study."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mindspore_doctor.cli import main

DATA = Path(__file__).resolve().parent / "data"
TARGET = ["tune_target:build", "--data", "tune_target:make_data"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(DATA), os.environ.get("PYTHONPATH", "")])}


def _msdoctor(*args: str) -> list[str]:
    return [sys.executable, "-m", "mindspore_doctor.cli", "tune", *args]


def _states(db: Path) -> list[tuple[int, str]]:
    """(number, state) of every trial, read from the database itself."""
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT number, state FROM trials ORDER BY number").fetchall()


def _beating(db: Path) -> set[int]:
    """The running trials with a heartbeat: a trial killed before its first beat is never failed as stale."""
    with sqlite3.connect(db) as connection:
        return {n for (n,) in connection.execute("SELECT number FROM trials JOIN trial_heartbeats USING (trial_id) "
                                                 "WHERE state = 'RUNNING'")}


def _sampled(db: Path, number: int) -> int:
    """How many parameters trial ``number`` has drawn so far (a trial stores them one by one as it starts)."""
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT COUNT(*) FROM trials JOIN trial_params USING (trial_id) WHERE number = ?",
                                  (number,)).fetchone()[0]


@pytest.mark.parametrize("args, message", [
    (["--storage", "redis://localhost/0"], "unknown storage 'redis://localhost/0'"),
    (["--space", "tune_target:EMPTY_SPACE"], "the search space is empty"),
    (["--jobs", "2"], "--jobs needs --storage"),
    (["--tensorboard"], "--tensorboard needs --summary-dir"),
    (["--storage", "sqlite:///{tmp}"], "cannot open the study's storage 'sqlite:///"),  # a directory
    (["--storage", "postgresql://me:secret@127.0.0.1:1/db"], "storage 'postgresql://me:***@127.0.0.1:1/db'"),
    (["--space", "tune_target:DEFAULT_LR"], "the search space must be a dict"),
    (["--epochs", "0"], "epochs must be at least 1"),
    (["--data", "tune_target:make_empty_data"], "train_ds yields no batch"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_trains(args, message, capsys, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(DATA))
    assert main(["tune", *TARGET, *(a.format(tmp=tmp_path) for a in args)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("msdoctor: ") and message in err, err


def test_a_build_that_raises_and_a_missing_module_are_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(DATA))
    assert main(["tune", "tune_target:raising_build", "--data", "tune_target:make_data", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "msdoctor: build({}) raised RuntimeError: the model file is missing"
    assert all(not line.startswith("Traceback") for line in err)
    assert main(["tune", "nosuchmodule:build", "--data", "tune_target:make_data"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nosuchmodule" in err


def test_a_study_whose_every_trial_fails_is_one_line_and_exit_2(capfd, monkeypatch):
    monkeypatch.syspath_prepend(str(DATA))
    code = main(["tune", "tune_target:fragile_build", "--data", "tune_target:make_data", "--space",
                 "tune_target:WIDEST_SPACE", "--trials", "2", "--epochs", "1"])
    out, err = capfd.readouterr()
    assert code == 2 and out == ""
    errors = [line for line in err.splitlines() if line.startswith("msdoctor: ")]
    assert errors == ["msdoctor: every trial failed (2); the first, trial 0: build({'width_multiplier': 4}) raised "
                      "MemoryError: cannot allocate the width-64 layers"], err
    assert "Traceback" not in err and "Trial 0 failed" not in err  # nor Optuna's warnings
    assert "trial_001         done in" in err and "failed: build(" in err  # each trial's progress line


SLEEPING_WORKER = """import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a worker slow to stop: killed after the grace
with open(sys.argv[2], "w") as pid:
    pid.write(str(os.getpid()))
open(sys.argv[1], "w").close()  # ready
time.sleep(600)
"""


def _gone(pid_file: Path) -> bool:
    """The worker whose pid is in ``pid_file`` no longer exists (stopped and reaped)."""
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def sleeping_workers(monkeypatch, tmp_path):
    """``--jobs`` workers replaced by sleepers that ignore SIGTERM; the file where the first writes its pid."""
    from mindspore_doctor.tuner import cli

    pid_file = tmp_path / "worker.pid"
    monkeypatch.setattr(cli, "_worker_argv", lambda args, index, ready: [
        sys.executable, "-c", SLEEPING_WORKER, str(ready), str(pid_file)])
    monkeypatch.setattr(cli, "WORKER_STOP_GRACE_S", 0.5)
    return pid_file


def test_ctrl_c_in_a_trial_stops_the_study_and_the_workers(sleeping_workers, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(DATA))
    db = tmp_path / "tune.db"
    code = main(["tune", "tune_target:interrupted_build", "--data", "tune_target:make_data", "--space",
                 "tune_target:LR_SPACE", "--trials", "3", "--epochs", "1", "--jobs", "2",
                 "--storage", f"sqlite:///{db}"])
    assert code == 130 and _states(db) == [(0, "FAIL")]  # not a failed trial the study goes on after
    assert _gone(sleeping_workers)


def test_a_terminated_launcher_stops_its_workers_and_puts_back_the_sigterm_handler(sleeping_workers):
    from mindspore_doctor.tuner.cli import WorkerPool

    def before(signum, frame):  # were the launcher's own handler missing, this one, not the default, would run
        sys.exit(99)

    previous = signal.signal(signal.SIGTERM, before)
    try:
        with pytest.raises(SystemExit) as stopped, WorkerPool(argparse.Namespace(jobs=2, worker=0)) as workers:
            workers.start()
            os.kill(os.getpid(), signal.SIGTERM)  # `kill LAUNCHER`
            time.sleep(5)
        assert stopped.value.code == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert _gone(sleeping_workers)


def test_a_hung_worker_is_waited_for_with_a_deadline_then_killed(sleeping_workers):
    import optuna

    from mindspore_doctor.tuner import cli

    study = optuna.create_study()
    for seconds in (1.5, 4.0):
        study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"duration_s": seconds}))
    assert cli._finish_timeout(study) == 2 * 4.0 + cli.WORKER_FINISH_S  # one last trial each, with room
    with cli.WorkerPool(argparse.Namespace(jobs=2, worker=3)) as workers:
        workers.start()
        started = time.monotonic()
        assert workers.wait(0.5) == ["worker 4 still running after 0.5 s (stopped)"]
        assert time.monotonic() - started < 2
    assert _gone(sleeping_workers)


@pytest.mark.slow
def test_a_study_killed_mid_trial_resumes_from_sqlite_and_finishes(tmp_path):
    db = tmp_path / "tune.db"
    command = _msdoctor(*TARGET, "--space", "tune_target:LR_SPACE", "--trials", "5", "--epochs", "2",
                        "--storage", f"sqlite:///{db}", "--json")
    first = subprocess.Popen(command, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in first.stderr:  # the progress lines: kill it once trial_001 is done, in trial_002
        if line.startswith("trial_001") and "done in" in line:
            break
    else:
        pytest.fail(f"the study ended before trial_001: rc {first.wait()}")
    deadline = time.monotonic() + 60  # trial_002 beats within a second, more on a loaded machine
    # killed once it beats and has drawn both its parameters: killed between two draws, its retry draws the missing
    # one afresh (a loaded machine did that: the retry's params then differ)
    while (2 not in _beating(db) or _sampled(db, 2) < 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert dict(_states(db))[2] == "RUNNING"  # killed mid-trial: the database still says so

    second = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "baseline" not in second.stderr  # the baseline and the space came from the database
    summary = json.loads(second.stdout)
    trials = {t["number"]: t for t in summary["trials"]}
    assert trials[2]["state"] == "FAIL"  # its heartbeat stopped: failed, then retried once
    (retry,) = [t for t in trials.values() if t["retry_of"] == 2]
    assert retry["params"] == trials[2]["params"] and retry["state"] in ("COMPLETE", "PRUNED")
    finished = [t for t in trials.values() if t["state"] in ("COMPLETE", "PRUNED")]
    assert len(finished) == 5 and {0, 1} <= {t["number"] for t in finished}, summary["trials"]
    assert summary["best"]["value"] > summary["baseline"]["value"]


@pytest.mark.slow
def test_two_workers_on_one_sqlite_study_lose_and_duplicate_no_trial(tmp_path):
    db, html = tmp_path / "tune.db", tmp_path / "tune.html"
    done = subprocess.run(
        _msdoctor(*TARGET, "--space", "tune_target:LR_SPACE", "--trials", "6", "--epochs", "2", "--jobs", "2",
                  "--storage", f"sqlite:///{db}", "--json", "--html", str(html)),
        env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    trials = summary["trials"]
    numbers = [t["number"] for t in trials]
    assert numbers == list(range(len(trials)))  # no number lost or given twice
    assert [s for _, s in _states(db)] == [t["state"] for t in trials]
    assert all(t["state"] in ("COMPLETE", "PRUNED") for t in trials)  # nothing left running or waiting
    assert 6 <= len(trials) <= 7  # the workers racing at the end may finish one more
    assert {t["worker"] for t in trials} == {0, 1}  # both processes trained trials
    assert len({json.dumps(t["params"], sort_keys=True) for t in trials}) == len(trials)
    assert html.stat().st_size > 10_000
