"""Fault injection: every way training can end early, and every way a report write can fail.

The do-no-harm contract (DESIGN.md, "Never break, always report"): on every exit path the user's objects are
restored, the report is written with what was seen so far (MSD003 names what ended training, where and at which
step), the user's own exception goes on unchanged, and the files on disk are complete or absent, never
half-written. A report that cannot be written (read-only or full disk) is an MSD002 finding, not a crash.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model

from benchmarks.faults.kit import quick_start_step
from mindspore_doctor import Doctor, _io
from mindspore_doctor._io import HISTORY_FILE, HTML_FILE, REPORT_FILE
from mindspore_doctor.findings import Report, Severity
from test_callback import MLP, QUIET, _dataset, _train

TESTS = Path(__file__).resolve().parent
STEPS_PER_EPOCH = 8  # test_callback._dataset(): 128 samples, batches of 16
REPORT_FILES = (REPORT_FILE, HISTORY_FILE, HTML_FILE)


class UserError(Exception):
    """The user's own exception type: it must reach the caller as it was raised."""


# --- what every exit path must leave behind ---------------------------------------------------------


def _assert_restored(net, optimizer, optimizer_class, *others):
    """The user's classes are back and nothing of the Doctor's is left on their objects."""
    assert type(optimizer) is optimizer_class
    assert type(net.relu1) is nn.ReLU
    for owner in (optimizer, *(cell for _, cell in net.cells_and_names()), *others):
        assert not hasattr(type(owner), "_msd_base"), f"{type(owner).__name__} still probed"
        assert [name for name in vars(owner) if name.startswith("_msd_")] == [], type(owner).__name__
    names = [p.name for p in (*net.get_parameters(), *optimizer.get_parameters())]
    assert not any("msd" in name for name in names)


def _probed(obj) -> bool:
    """The Doctor's probed class (SGD's gradients are read in the graph; Momentum's are derived on the host and it
    keeps its own class)."""
    return hasattr(type(obj), "_msd_base")


def _no_temp_files(folder: Path):
    assert sorted(p.name for p in folder.rglob("*.tmp")) == []


def _read_report(folder: Path, html: bool = True) -> Report:
    """The report files are complete: both JSON files parse, the HTML page is whole, no temp file is left."""
    _no_temp_files(folder)
    report = Report.from_json((folder / REPORT_FILE).read_text())
    history = json.loads((folder / HISTORY_FILE).read_text())
    assert isinstance(history["steps"], list)
    if html:
        assert (folder / HTML_FILE).read_text().rstrip().endswith("</html>")
    return report


def _interruption(report: Report, step: int, severity: Severity, error: BaseException, epoch: int | None = None):
    """The report holds exactly one MSD003, naming the exception, its message and the step it ended at."""
    (finding,) = report.by_code("MSD003")
    assert finding.rule == "training-interrupted"
    assert finding.severity is severity
    assert finding.step == step
    assert f"at step {step}" in finding.message
    if epoch is not None:
        assert f"(epoch {epoch})" in finding.message
    assert f"by {type(error).__name__}" in finding.message
    assert str(error) in finding.message
    assert finding.evidence["exception"] == type(error).__name__
    assert [f.message for f in report.by_code("MSD001")] == []  # the fault is the user's, the Doctor did not break
    return finding


def _raise_site(error: BaseException) -> str:
    """``file:line`` of the last frame of this test file in the error's traceback: where the user raised."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == __file__]
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"


def _setup(doctor_dir=None, **options):
    ms.set_seed(0)
    net = MLP()
    optimizer = nn.SGD(net.trainable_params(), 0.05, momentum=0.9)
    doctor = Doctor(doctor_dir, ignore=QUIET, probe_every=2, **options)
    return net, optimizer, doctor


class RaiseAtStep(Callback):
    """A user callback that raises ``error`` at the end of step ``step``."""

    def __init__(self, step: int, error: BaseException):
        super().__init__()
        self.step, self.error = step, error
        self.probed = None  # whether the optimizer carried the Doctor's probes when it raised

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num == self.step:
            self.probed = _probed(cb.optimizer)
            raise self.error


class StepsSeen(Callback):
    """The steps a user callback saw begin (the last one: the step training was at when it raised), and whether
    the optimizer carried the Doctor's probes at each."""

    def __init__(self):
        super().__init__()
        self.steps, self.probed = [], []

    def on_train_step_begin(self, run_context):
        cb = run_context.original_args()
        self.steps.append(cb.cur_step_num)
        self.probed.append(_probed(cb.optimizer))


# --- 1. an exception from the user's code: a callback, a hand-written loop ------------------------------


def test_a_user_callback_raising_at_step_5_is_reported_and_propagates_unchanged(tmp_path):
    net, optimizer, doctor = _setup(tmp_path)
    raised = UserError("checkpoint bucket unreachable")
    user_callback = RaiseAtStep(5, raised)
    with pytest.raises(UserError) as caught:
        _train(net, _dataset(), doctor, opt=optimizer, epochs=2, callbacks=(user_callback,))
    assert caught.value is raised and str(caught.value) == "checkpoint bucket unreachable"
    assert user_callback.probed  # the Doctor's probes were in place when the user's code raised
    _assert_restored(net, optimizer, nn.SGD)
    report = _read_report(tmp_path)
    finding = _interruption(report, 5, Severity.ERROR, raised, epoch=1)
    assert _raise_site(raised) in finding.message and "on_train_step_end" in finding.message
    assert finding.location["file"] == __file__
    assert doctor.report.codes() == report.codes()
    assert [s.step for s in doctor.history.steps][-1] in (4, 5)  # the Doctor runs after the raising callback


class RaiseAtBegin(Callback):
    """A user callback whose ``on_train_begin`` raises: before MindSpore has set the epoch in ``cb_params``."""

    def __init__(self, error: BaseException):
        super().__init__()
        self.error = error

    def on_train_begin(self, run_context):
        raise self.error


def test_a_user_callback_raising_before_the_first_epoch_is_reported_and_propagates_unchanged(tmp_path):
    """After the Doctor's own ``on_train_begin``, ``cb_params`` has no ``cur_epoch_num`` yet (MindSpore raises
    KeyError for it): MSD003 says training ended before the first step, the Doctor does not break (no MSD001)."""
    net, optimizer, doctor = _setup(tmp_path)
    raised = UserError("experiment tracker login failed")
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
    with pytest.raises(UserError) as caught:
        model.train(2, _dataset(), callbacks=[doctor, RaiseAtBegin(raised)], dataset_sink_mode=False)
    assert caught.value is raised
    _assert_restored(net, optimizer, nn.SGD)
    report = _read_report(tmp_path)
    (finding,) = report.by_code("MSD003")
    assert finding.message.startswith("Training ended before the first step by UserError: experiment tracker login")
    assert "holds the checks the Doctor ran before training" in finding.message
    assert finding.step == 0 and finding.evidence["epoch"] is None and _raise_site(raised) in finding.message
    assert report.by_code("MSD001") == []
    assert doctor.history.steps == []


def _hand_written_loop(net, optimizer, doctor, data, raise_after_step=None, error=None, epochs=2, seen=None):
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    train_step = quick_start_step(net, loss_fn, optimizer)
    with doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=data, epochs=epochs) as run:
        step = 0
        for _ in range(epochs):
            net.set_train()
            for x, label in data.create_tuple_iterator():
                loss = train_step(x, label)
                run.step(loss, x, label)
                step += 1
                if step == raise_after_step:
                    seen["probed"] = _probed(optimizer)
                    raise error
            run.epoch_end()


def test_an_exception_in_a_hand_written_loop_under_watch_is_reported_and_propagates_unchanged(tmp_path):
    net, optimizer, doctor = _setup(tmp_path)
    raised = UserError("metrics server refused the connection")
    seen = {}
    with pytest.raises(UserError) as caught:
        _hand_written_loop(net, optimizer, doctor, _dataset(), raise_after_step=5, error=raised, seen=seen)
    assert caught.value is raised and seen["probed"]
    _assert_restored(net, optimizer, nn.SGD)
    report = _read_report(tmp_path)
    finding = _interruption(report, 5, Severity.ERROR, raised, epoch=1)
    assert _raise_site(raised) in finding.message
    assert [s.step for s in doctor.history.steps] == [1, 2, 3, 4, 5]


# --- 2. an exception from the loss function's construct --------------------------------------------------


class FlakyLoss(nn.Cell):
    """Cross-entropy that raises on its ``fail_at``-th call (PyNative runs construct as Python)."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.inner = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.fail_at, self.calls, self.raised = fail_at, 0, None

    def construct(self, logits, label):
        self.calls += 1
        if self.calls == self.fail_at:
            self.raised = UserError(f"label out of range in call {self.calls}")
            raise self.raised
        return self.inner(logits, label)


def test_an_exception_from_the_loss_construct_is_reported_and_propagates_unchanged(tmp_path):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net, optimizer, doctor = _setup(tmp_path)
    loss, seen = FlakyLoss(fail_at=4), StepsSeen()
    with pytest.raises(UserError) as caught:
        Model(net, loss, optimizer).train(2, _dataset(), callbacks=[seen, doctor], dataset_sink_mode=False)
    assert loss.calls == 4, "the Doctor called the user's loss itself"
    assert seen.steps == [1, 2, 3, 4] and all(seen.probed)
    assert caught.value is loss.raised
    _assert_restored(net, optimizer, nn.SGD, loss, loss.inner)
    report = _read_report(tmp_path)
    finding = _interruption(report, 4, Severity.ERROR, loss.raised, epoch=1)
    assert _raise_site(loss.raised) in finding.message and "in construct" in finding.message
    assert [s.step for s in doctor.history.steps] == [1, 2, 3]


# --- 3. an exception from the dataset iterator ---------------------------------------------------------


class BrokenSource:
    """A random-access source (so the dataset knows its size without reading it) that raises at ``fail_at``."""

    def __init__(self, n: int = 128, fail_at: int = 5 * 16 + 3):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n, 8)).astype(np.float32)
        self.y = (self.x[:, 0] > 0).astype(np.int32)
        self.fail_at = fail_at

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == self.fail_at:
            raise UserError(f"corrupt record {i}")
        return self.x[i], self.y[i]


def _broken_dataset(**kw):
    return ds.GeneratorDataset(BrokenSource(**kw), ["x", "label"], shuffle=False, num_parallel_workers=1,
                               python_multiprocessing=False).batch(16)


def _train_on_broken_data(doctor=None):
    ms.set_seed(0)
    net = MLP()
    optimizer = nn.SGD(net.trainable_params(), 0.05, momentum=0.9)
    seen = StepsSeen()
    with pytest.raises(Exception) as caught:
        Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer).train(
            2, _broken_dataset(n=2048, fail_at=64 * 16 + 3), callbacks=[seen, *([doctor] if doctor else [])],
            dataset_sink_mode=False)
    return net, optimizer, caught.value, seen


def test_an_exception_from_the_dataset_iterator_is_reported_and_propagates_unchanged(tmp_path):
    """MindSpore's pipeline reads ahead and raises the source's error at the next batch after it, wrapped in its own
    RuntimeError: the Doctor changes neither. The bad record sits in batch 65, beyond the pipeline's read-ahead: with
    it in batch 6 (128 records), a slow first step let the read-ahead reach it before step 1 (a flaky test)."""
    doctor = Doctor(tmp_path, ignore=QUIET, probe_every=2)
    net, optimizer, error, seen = _train_on_broken_data(doctor)
    _, _, plain_error, _ = _train_on_broken_data()
    assert all(seen.probed)
    assert type(error) is type(plain_error)
    assert str(error) == str(plain_error) and "UserError: corrupt record 1027" in str(error)
    _assert_restored(net, optimizer, nn.SGD)
    report = _read_report(tmp_path)
    ended_at = seen.steps[-1]  # the step training was at when the next batch could not be read
    assert [s.step for s in doctor.history.steps] == list(range(1, ended_at + 1))
    finding = _interruption(report, ended_at, Severity.ERROR, error, epoch=1)
    # The error is raised inside MindSpore; the user's line is in its text (MindSpore's "Python Call Stack").
    raised_at = _line_of("raise UserError(f\"corrupt record")
    assert f'{__file__}", line {raised_at}, in __getitem__' in finding.message


def _line_of(text: str) -> int:
    """The line of this file holding ``text``."""
    (line,) = [n for n, source in enumerate(Path(__file__).read_text().splitlines(), 1) if text in source
               and "_line_of" not in source]
    return line


# --- 4. an exception from evaluation -------------------------------------------------------------------


class EvaluateEachEpoch(Callback):
    """The user's own per-epoch evaluation with ``model.eval``."""

    def __init__(self, eval_dataset):
        super().__init__()
        self.model, self.eval_dataset = None, eval_dataset

    def on_train_epoch_end(self, run_context):
        self.model.eval(self.eval_dataset, dataset_sink_mode=False)


def test_a_user_callback_whose_model_eval_raises_is_reported_and_propagates_unchanged(tmp_path):
    net, optimizer, doctor = _setup(tmp_path)
    evaluate = EvaluateEachEpoch(_broken_dataset(n=64, fail_at=20))
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer,
                  metrics={"loss": nn.Loss()})
    evaluate.model = model
    with pytest.raises(Exception) as caught:
        model.train(2, _dataset(), callbacks=[evaluate, doctor], dataset_sink_mode=False)
    error = caught.value
    assert "UserError: corrupt record 20" in str(error)
    assert _raise_site(error) == f"{Path(__file__).name}:{_line_of('self.model.eval(self.eval_dataset')}"
    _assert_restored(net, optimizer, nn.SGD)
    report = _read_report(tmp_path)
    finding = _interruption(report, STEPS_PER_EPOCH, Severity.ERROR, error, epoch=1)
    assert _raise_site(error) in finding.message and "on_train_epoch_end" in finding.message
    assert [s.step for s in doctor.history.steps] == list(range(1, STEPS_PER_EPOCH + 1))


def test_the_doctors_own_evaluation_on_a_raising_dataset_never_stops_training(tmp_path):
    net, optimizer, doctor = _setup(tmp_path, eval_dataset=_broken_dataset(n=64, fail_at=20))
    _train(net, _dataset(), doctor, opt=optimizer, epochs=2)
    _assert_restored(net, optimizer, nn.SGD)
    assert [s.step for s in doctor.history.steps] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
    failures = [f for f in doctor.report.findings if f.code in ("MSD001", "MSD002")
                and f.location.get("check") == "evaluation"]
    assert len(failures) == 1 and "corrupt record 20" in failures[0].message
    report = _read_report(tmp_path)
    assert "MSD003" not in report.codes()


# --- 5. KeyboardInterrupt ------------------------------------------------------------------------------


def test_keyboard_interrupt_at_step_5_is_a_warning_and_propagates(tmp_path):
    net, optimizer, doctor = _setup(tmp_path)
    interrupt = KeyboardInterrupt()
    user_callback = RaiseAtStep(5, interrupt)
    with pytest.raises(KeyboardInterrupt) as caught:
        _train(net, _dataset(), doctor, opt=optimizer, epochs=2, callbacks=(user_callback,))
    assert caught.value is interrupt and user_callback.probed
    _assert_restored(net, optimizer, nn.SGD)
    report = _read_report(tmp_path)
    finding = _interruption(report, 5, Severity.WARNING, interrupt, epoch=1)
    assert "KeyboardInterrupt" in finding.message and "partial" in finding.suggestion
    assert doctor.report.by_code("MSD003")[0].severity is Severity.WARNING


# --- 6, 7. SIGTERM and SIGKILL mid-epoch, in a subprocess ----------------------------------------------

HOLD_STEP = 10  # tiny net of test_mindinsight_server: 6 steps an epoch; step 10 is in the middle of epoch 2

MODEL_TRAIN = f"""
import sys, time
sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}]
from mindspore.train import Callback
from test_mindinsight_server import train_tiny_net

class HoldMidEpoch(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == {HOLD_STEP}:
            print("MID", flush=True)
            time.sleep(600)

train_tiny_net(__import__("pathlib").Path(sys.argv[1]), epochs=4, extra_callbacks=(HoldMidEpoch(),),
               mindinsight=False)
print("FINISHED", flush=True)
"""

WATCH_LOOP = f"""
import sys, time
sys.path[:0] = [{str(TESTS)!r}, {str(TESTS.parent)!r}]
import mindspore as ms
from mindspore import nn
from test_callback import MLP, QUIET, _dataset
from benchmarks.faults.kit import quick_start_step
from mindspore_doctor import Doctor

ms.set_context(mode=ms.GRAPH_MODE)
net, data = MLP(), _dataset(n=96)  # 6 steps an epoch
optimizer = nn.SGD(net.trainable_params(), 0.05, momentum=0.9)
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
train_step = quick_start_step(net, loss_fn, optimizer)

with Doctor(sys.argv[1], ignore=QUIET, probe_every=2, mindinsight=False).watch(
        net, optimizer, loss_fn=loss_fn, train_dataset=data, epochs=4) as run:
    step = 0
    for epoch in range(4):
        for x, label in data.create_tuple_iterator():
            run.step(train_step(x, label), x, label)
            step += 1
            if step == {HOLD_STEP}:
                print("MID", flush=True)
                time.sleep(600)
        run.epoch_end()
print("FINISHED", flush=True)
"""


def _signal_mid_epoch(tmp_path: Path, script: str, signum: int) -> tuple[Path, int]:
    """Run ``script`` until it holds at step HOLD_STEP, send ``signum``; the run folder and the return code."""
    path, run = tmp_path / "train.py", tmp_path / "run"
    path.write_text(script)
    process = subprocess.Popen([sys.executable, str(path), str(run)], stdout=subprocess.PIPE, text=True,
                               cwd=tmp_path)
    try:
        for line in process.stdout:
            if line.startswith("MID"):
                break
        else:
            pytest.fail(f"training ended before step {HOLD_STEP} (exit code {process.wait()})")
        os.kill(process.pid, signum)
        rest = process.stdout.read()
        code = process.wait(timeout=120)
    finally:
        process.kill()
        process.wait(timeout=60)
    assert "FINISHED" not in rest
    return run, code


@pytest.mark.slow
@pytest.mark.parametrize("script", [MODEL_TRAIN, WATCH_LOOP], ids=["model-train", "watch"])
def test_sigterm_mid_epoch_writes_the_report_then_dies_by_sigterm(tmp_path, script):
    run, code = _signal_mid_epoch(tmp_path, script, signal.SIGTERM)
    assert code == -signal.SIGTERM
    report = _read_report(run)
    (finding,) = report.by_code("MSD003")
    assert finding.severity is Severity.WARNING and finding.step == HOLD_STEP
    assert f"at step {HOLD_STEP} (epoch 2)" in finding.message and "SIGTERM" in finding.message
    assert "MSD001" not in report.codes()
    history = json.loads((run / HISTORY_FILE).read_text())
    assert history["steps"][-1]["step"] == HOLD_STEP


@pytest.mark.slow
def test_sigkill_mid_epoch_leaves_the_complete_report_of_the_last_epoch_end(tmp_path):
    """The atomic writer's guarantee: a file under its final name is always complete (the rename is the commit);
    a temp file can only be left by a kill during the write itself, and this kill comes between writes."""
    run, code = _signal_mid_epoch(tmp_path, MODEL_TRAIN, signal.SIGKILL)
    assert code == -signal.SIGKILL
    report = _read_report(run, html=False)
    assert not (run / HTML_FILE).exists()  # written only when training ends
    assert "MSD003" not in report.codes()  # nothing can run after SIGKILL: this is the report of the epoch end
    history = json.loads((run / HISTORY_FILE).read_text())
    assert history["steps"][-1]["step"] == 6  # the end of epoch 1


# --- 8. a summary_dir that cannot be written: read-only, full ------------------------------------------


class _OsWithFailingWrites:
    """``os`` for ``mindspore_doctor._io`` only, on a full disk: the temp file is created and partly written,
    then the write fails with ENOSPC."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def fdopen(fd, *args, **kwargs):
        fh = os.fdopen(fd, *args, **kwargs)

        class FullDisk:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                fh.close()

            def fileno(self):
                return fh.fileno()

            def write(self, data):
                fh.write(data[: len(data) // 2])
                fh.flush()
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            def flush(self):
                fh.flush()

        return FullDisk()


class _TempfileOnReadOnlyDisk:
    """``tempfile`` for ``mindspore_doctor._io`` only, on a read-only file system: creating the temp file fails."""

    @staticmethod
    def mkstemp(*args, dir=None, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))


def _final_weights(doctor=None):
    ms.set_seed(0)
    net = MLP()
    optimizer = nn.SGD(net.trainable_params(), 0.05, momentum=0.9)
    _train(net, _dataset(), doctor, opt=optimizer, epochs=2) if doctor else Model(
        net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer).train(
        2, _dataset(), dataset_sink_mode=False)
    _assert_restored(net, optimizer, nn.SGD)
    return [p.asnumpy().copy() for p in net.trainable_params()]


@pytest.mark.parametrize("disk", ["read-only", "full"])
def test_a_summary_dir_that_cannot_be_written_is_msd002_and_training_is_unchanged(tmp_path, monkeypatch, disk):
    strerror = os.strerror(errno.EROFS if disk == "read-only" else errno.ENOSPC)
    if disk == "read-only":
        monkeypatch.setattr(_io, "tempfile", _TempfileOnReadOnlyDisk())
    else:
        monkeypatch.setattr(_io, "os", _OsWithFailingWrites())
    doctor = Doctor(tmp_path, ignore=QUIET, probe_every=2)
    weights = _final_weights(doctor)  # no exception reaches the user
    monkeypatch.undo()
    plain = _final_weights()
    assert len(weights) == len(plain) and all(np.array_equal(a, b) for a, b in zip(weights, plain))
    assert [s.step for s in doctor.history.steps] == list(range(1, 2 * STEPS_PER_EPOCH + 1))
    assert "MSD003" not in doctor.report.codes()
    # Nothing half-written: the report files are absent (none could be written), no temp file is left.
    assert [name for name in REPORT_FILES if (tmp_path / name).exists()] == []
    _no_temp_files(tmp_path)
    # The report's failed write is named (MSD002), and so is every other failed write: a full or read-only disk
    # is no bug of the Doctor's (MSD001).
    writes = [f for f in doctor.report.by_code("MSD002") if strerror in f.message]
    assert any(f.location.get("check") == "write-report" and str(tmp_path) in f.message for f in writes)
    assert [f.message for f in doctor.report.by_code("MSD001")] == []
