"""``msdoctor tune`` from the command line: bad input, a SIGKILLed study resuming, two workers on one study."""
from __future__ import annotations

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
    time.sleep(0.5)
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
    assert len(finished) == 5 and {0, 1} <= {t["number"] for t in finished}
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
