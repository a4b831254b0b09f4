"""A training process SIGKILLed mid-epoch leaves files MindInsight and ``msdoctor report`` can still read."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mindspore_doctor.export.mindinsight import read_scalars
from mindspore_doctor.findings import Report
from test_mindinsight_server import mindinsight_server  # noqa: F401  (fixture)

TESTS = Path(__file__).resolve().parent
STEPS_PER_EPOCH = 6
KILL_EPOCH, KILL_STEP_IN_EPOCH = 3, 4

TRAINING = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
from mindspore.train import Callback
from test_mindinsight_server import train_tiny_net

class HoldMidEpoch(Callback):
    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_epoch_num == {KILL_EPOCH} and cb.cur_step_num % {STEPS_PER_EPOCH} == {KILL_STEP_IN_EPOCH}:
            print("MID", cb.cur_step_num, flush=True)
            time.sleep(600)

train_tiny_net(__import__("pathlib").Path(sys.argv[1]), epochs=50, extra_callbacks=(HoldMidEpoch(),),
               summary_flush_seconds=0.0)
"""


@pytest.mark.slow
def test_sigkill_mid_epoch_leaves_readable_summary_and_report(tmp_path, mindinsight_server):  # noqa: F811
    run = tmp_path / "runs" / "killed"
    process = subprocess.Popen([sys.executable, "-c", TRAINING, str(run)], stdout=subprocess.PIPE, text=True,
                               cwd=tmp_path)
    try:
        for line in process.stdout:
            if line.startswith("MID"):
                killed_at = int(line.split()[1])
                break
        else:
            pytest.fail(f"training ended before the kill point (exit code {process.wait()})")
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=60)
    assert killed_at == (KILL_EPOCH - 1) * STEPS_PER_EPOCH + KILL_STEP_IN_EPOCH

    # The report is the complete version of the last finished epoch, never a torn file.
    report_path = run / "doctor_report.json"
    Report.from_json(report_path.read_text())
    history = json.loads((run / "doctor_history.json").read_text())
    assert history["steps"][-1]["step"] == (KILL_EPOCH - 1) * STEPS_PER_EPOCH

    # The summary holds every step up to the kill, and MindInsight serves exactly those.
    (events,) = run.glob("*_doctor")
    written = [s for s, _ in read_scalars(events)["doctor/loss"]]
    assert written == list(range(1, killed_at + 1))
    server = mindinsight_server(run.parent)
    assert [s for s, _ in server.scalars("./killed", "doctor/loss/scalar", killed_at)] == written
