"""A training process SIGKILLed mid-epoch leaves files MindInsight, TensorBoard and ``msdoctor report`` can still
read."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mindspore_doctor.export.mindinsight import read_scalars
from mindspore_doctor.export.tensorboard import FINDINGS_TAG
from mindspore_doctor.findings import Report
from test_mindinsight_server import mindinsight_server  # noqa: F401  (fixture)
from test_tensorboard_server import assert_findings_table, plain_text, tensorboard_server  # noqa: F401  (fixture)

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
               summary_flush_seconds=0.0, tensorboard=True)
"""


@pytest.mark.slow
def test_sigkill_mid_epoch_leaves_readable_summary_tensorboard_file_and_report(  # noqa: F811
        tmp_path, mindinsight_server, tensorboard_server):
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
    report = Report.from_json(report_path.read_text())
    history = json.loads((run / "doctor_history.json").read_text())
    last_epoch_end = (KILL_EPOCH - 1) * STEPS_PER_EPOCH
    assert history["steps"][-1]["step"] == last_epoch_end

    # The summary holds every step up to the kill, and MindInsight serves exactly those.
    (events,) = run.glob("*_doctor")
    written = [s for s, _ in read_scalars(events)["doctor/loss"]]
    assert written == list(range(1, killed_at + 1))
    server = mindinsight_server(run.parent)
    assert [s for s, _ in server.scalars("./killed", "doctor/loss/scalar", killed_at)] == written

    # TensorBoard too: the loss up to the kill, and the findings table of the last finished epoch.
    board = tensorboard_server(run.parent)
    assert [s for s, _ in board.scalars("killed", "doctor/loss", killed_at)] == written
    tables = board.wait_for(lambda: board.get("/data/plugin/text/text", run="killed", tag=FINDINGS_TAG),
                            lambda a: len(a) == KILL_EPOCH - 1)
    assert [t["step"] for t in tables] == [STEPS_PER_EPOCH * e for e in range(1, KILL_EPOCH)]
    last = plain_text(tables[-1]["text"])
    assert f"(as of step {last_epoch_end})" in last and len(report.findings) >= 1
    assert_findings_table(last, report)
    assert board.errors() == []
