"""The real Doctor() under `msrun --worker_num=2 --local_worker_num=2` on loopback (data parallel, CPU here).

Three launches (about 30-45 s each on 2 cores), shared by the tests below:
healthy (zero warnings, merged report, do-no-harm), bugs (MSD501/503, then MSD502), kill.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mindspore_doctor.findings import Report

SCRIPT = Path(__file__).parent / "dist_scripts" / "train_dp.py"
MSRUN = Path(sys.executable).with_name("msrun")
LAUNCH_TIMEOUT_S = 300
KILL_TIMEOUT_S = 3  # the Doctor's collective timeout from the kill step on (train_dp.py sets it there)
pytestmark = [pytest.mark.timeout(2 * LAUNCH_TIMEOUT_S),
              pytest.mark.skipif(not MSRUN.exists(), reason="msrun not installed next to python")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _kill_leftovers(out: Path) -> None:
    """msrun's workers write their pids; kill those still running this script (a timed-out or killed run)."""
    for marker in (out / "pids").glob("*_*"):
        pid = int(marker.name.rsplit("_", 1)[1])
        try:
            if SCRIPT.name in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass


def _msrun(scenario: str, out: Path, join: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{MSRUN.parent}{os.pathsep}{os.environ.get('PATH', '')}")  # msrun runs `python`
    command = [str(MSRUN), "--worker_num=2", "--local_worker_num=2", "--master_addr=127.0.0.1",
               f"--master_port={_free_port()}", f"--join={join}", f"--log_dir={out / 'log'}",
               str(SCRIPT), scenario, str(out)]
    try:
        return subprocess.run(command, env=env, cwd=out, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    finally:
        if join:
            _kill_leftovers(out)


def _launch(tmp_path_factory, scenario: str) -> Path:
    out = tmp_path_factory.mktemp(scenario)
    done = _msrun(scenario, out)
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "log").glob("worker_*.log")))
    assert done.returncode == 0, f"msrun {scenario} failed:\n{done.stdout[-2000:]}\n{logs}"
    return out


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    return _launch(tmp_path_factory, "healthy")


@pytest.fixture(scope="module")
def bugs(tmp_path_factory) -> Path:
    return _launch(tmp_path_factory, "bugs")


def _merged(folder: Path) -> Report:
    return Report.from_json((folder / "doctor_report.json").read_text())


def test_healthy_run_has_zero_warnings_and_rank0_merges_both_ranks(healthy):
    report = _merged(healthy / "doctor")
    assert report.at_least("warning") == [], str(report)
    assert report.meta["distributed"]["world_size"] == 2
    assert report.meta["distributed"]["ranks_merged"] == [0, 1]
    assert report.meta["distributed"]["collectives"] >= 5  # begin, batches, every 2 of 8 steps, merge
    assert all(f.location["ranks"] == [0, 1] for f in report.findings)  # both ranks saw the same infos
    for rank in (0, 1):  # each rank's report, history and MindInsight summary: summary_dir/rank_{id}
        rank_dir = healthy / "doctor" / f"rank_{rank}"
        assert (rank_dir / "doctor_report.json").is_file()
        assert list(rank_dir.glob("*.events.summary.*")), sorted(p.name for p in rank_dir.iterdir())


def test_doctor_does_no_harm_across_ranks(healthy):
    for rank in (0, 1):
        plain, doctored = np.load(healthy / f"plain_rank{rank}.npz"), np.load(healthy / f"doctor_rank{rank}.npz")
        assert sorted(plain) == sorted(doctored)
        for name in plain:
            assert np.array_equal(plain[name], doctored[name]), (rank, name)
    rank0, rank1 = np.load(healthy / "doctor_rank0.npz"), np.load(healthy / "doctor_rank1.npz")
    assert all(np.array_equal(rank0[n], rank1[n]) for n in rank0)  # why a bitwise-tight tolerance is safe


def test_no_common_seed_and_unsharded_data(bugs):
    report = _merged(bugs / "bad_init")
    assert {"MSD501", "MSD503"} <= report.codes() and "MSD502" not in report.codes()
    [init] = report.by_code("MSD501")
    assert init.location == {"parameter": "0.weight", "ranks": [0, 1]}
    assert init.evidence["differing_parameters"] == 4  # every weight and bias
    [data] = report.by_code("MSD503")
    assert data.location["ranks"] == [0, 1] and data.evidence["shared_fraction"] == 1.0


def test_train_step_without_all_reduce_diverges(bugs):
    report = _merged(bugs / "no_allreduce")
    assert "MSD502" in report.codes() and not {"MSD501", "MSD503"} & report.codes()
    [drift] = report.by_code("MSD502")
    assert drift.step == 2 and drift.location["ranks"] == [0, 1]


def test_killed_rank_does_not_hang_the_doctor(tmp_path):
    """Rank 1 dies just before a Doctor collective; rank 0's Doctor must give up after its timeout.

    Without --join msrun does not kill the survivor, so this is the Doctor's own watchdog at work.
    """
    started = time.monotonic()
    try:
        _msrun("kill", tmp_path, join=False)
        record = tmp_path / "kill_rank0.json"
        while not record.exists() and time.monotonic() - started < LAUNCH_TIMEOUT_S:
            time.sleep(0.5)
        assert record.exists(), "rank 0's Doctor never returned from its collective"
        result = json.loads(record.read_text())
    finally:
        _kill_leftovers(tmp_path)
    assert KILL_TIMEOUT_S - 0.5 <= result["doctor_seconds"] <= KILL_TIMEOUT_S + 5
    [gave_up] = [f for f in result["msd002"] if f["location"]["check"] == "rank-collectives"]
    assert gave_up["evidence"]["waited_s"] >= KILL_TIMEOUT_S - 0.5
