"""``msdoctor tune BUILD --data DATA``: the study from the command line, its summary, its HTML report."""
from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_SPACE_HELP = ("'auto' (from the Doctor's diagnosis of the default configuration) or pkg.module:attr of a dict "
               "name -> (low, high), (low, high, 'log') or [choices]")


def add_tune_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``msdoctor tune`` (the CLI owns the parser, this module its options)."""
    parser.add_argument("build", metavar="BUILD", help="pkg.module:attr of build(params) returning a fresh "
                        "(net, loss_fn, optimizer); params holds the searched values")
    parser.add_argument("--data", required=True, metavar="DATA", help="pkg.module:attr of (train, eval) or "
                        "(train, eval, holdout) datasets, or a zero-argument factory returning them; train may be a "
                        "factory train(params) (then batch_size is searched)")
    parser.add_argument("--space", default="auto", metavar="SPACE", help=_SPACE_HELP)
    parser.add_argument("--trials", type=int, default=30, help="trials the study ends with, finished or failed by "
                        "their configuration's error (default 30)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per trial (default 3)")
    parser.add_argument("--random-trials", type=int, metavar="N", help="random (coarse) trials before TPE "
                        "(default: a third of --trials, at least 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--storage", metavar="URL", help="database URL of the study: sqlite:///runs/tune.db, "
                        "postgresql://...; it resumes from there and --jobs workers share it (default: in memory)")
    parser.add_argument("--study-name", default="mindspore_doctor")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes on this machine (needs --storage)")
    parser.add_argument("--summary-dir", metavar="DIR", help="each trial's Doctor reports (and TensorBoard files) "
                        "in DIR/trial_NNN")
    parser.add_argument("--tensorboard", action="store_true", help="with --summary-dir: TensorBoard files too, "
                        "the trials side by side in the HParams tab")
    parser.add_argument("--html", metavar="OUT", help="write the study's HTML report to OUT")
    parser.add_argument("--json", action="store_true", help="print the study summary as JSON")
    parser.add_argument("--worker", type=int, default=0, metavar="W", help="this process's index among the "
                        "processes sharing the study (its sampler's seed is --seed + W): give each machine its own, "
                        "W, W + --jobs... (default 0)")
    # a --jobs worker: no report of its own; it creates READY once it is about to train
    parser.add_argument("--spawned", metavar="READY", help=argparse.SUPPRESS)


WORKER_START_S = 300.0
"""How long ``--jobs`` waits for its workers to load MindSpore and the data before it trains alone."""
WORKER_FINISH_S = 60.0
"""Once the study is done, the workers finish the trial each is training: the launcher waits twice the longest
trial so far plus this long, then stops those still running (a hung worker never blocks it)."""
WORKER_STOP_GRACE_S = 10.0
"""How long a worker sent SIGTERM gets to exit before SIGKILL."""


def _worker_argv(args: argparse.Namespace, index: int, ready: Path) -> list[str]:
    """The command line of this process's ``index``-th extra worker: the same study, no report of its own."""
    argv = [sys.executable, "-m", "mindspore_doctor.cli", "tune", args.build, "--data", args.data,
            "--space", args.space, "--trials", str(args.trials), "--epochs", str(args.epochs), "--seed",
            str(args.seed), "--storage", args.storage, "--study-name", args.study_name,
            "--worker", str(args.worker + index), "--spawned", str(ready)]
    if args.random_trials is not None:
        argv += ["--random-trials", str(args.random_trials)]
    if args.summary_dir:
        argv += ["--summary-dir", args.summary_dir]
    if args.tensorboard:
        argv.append("--tensorboard")
    return argv


class WorkerPool:
    """The ``--jobs`` workers of this launcher: started once the study is ready, waited for with a deadline, and
    never left behind: on the way out (an error, Ctrl-C, SIGTERM) those still running are terminated, then killed
    after ``WORKER_STOP_GRACE_S``. A SIGKILLed launcher leaves them to finish the study on their own."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.processes: list[subprocess.Popen] = []
        self._sigterm: Any = None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Start the other workers and wait until they can train: else on a slow machine this process finishes a
        short study alone while they are still importing MindSpore."""
        self._sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)  # `kill` runs __exit__, as Ctrl-C does
        ready_dir = Path(tempfile.mkdtemp(prefix="msdoctor-tune-"))
        ready = [ready_dir / f"worker_{i}" for i in range(1, self.args.jobs)]
        self.processes.extend(subprocess.Popen(_worker_argv(self.args, i, path))
                              for i, path in enumerate(ready, start=1))
        print(f"waiting for {len(self.processes)} worker(s) to start", file=sys.stderr)
        deadline = time.monotonic() + WORKER_START_S
        while time.monotonic() < deadline and any(
                not path.exists() and w.poll() is None for path, w in zip(ready, self.processes)):
            time.sleep(0.2)
        shutil.rmtree(ready_dir, ignore_errors=True)

    def wait(self, timeout: float) -> list[str]:
        """Wait at most ``timeout`` s for the workers to end; what went wrong, one phrase per worker."""
        deadline = time.monotonic() + timeout
        problems = []
        for index, process in enumerate(self.processes, start=self.args.worker + 1):
            try:
                code = process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(f"worker {index} still running after {timeout:.3g} s (stopped)")
                continue
            if code != 0:
                problems.append(f"worker {index} exited with {code}")
        return problems

    def stop(self) -> None:
        """Terminate the workers still running, kill those still there after the grace."""
        running = [w for w in self.processes if w.poll() is None]
        for process in running:
            process.terminate()
        deadline = time.monotonic() + WORKER_STOP_GRACE_S
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._sigterm is not None:
            signal.signal(signal.SIGTERM, self._sigterm)
            self._sigterm = None


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _finish_timeout(study: Any) -> float:
    """How long the workers may take to finish their last trials: ``WORKER_FINISH_S`` beyond twice the longest."""
    longest = max((t.user_attrs.get("duration_s") or 0.0 for t in study.get_trials(deepcopy=False)), default=0.0)
    return 2 * longest + WORKER_FINISH_S


def _datasets(value: Any) -> tuple[Any, Any, Any]:
    from mindspore_doctor.tuner.failures import TuneError

    if callable(value) and not hasattr(value, "create_tuple_iterator"):
        value = value()
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        raise TuneError(f"--data must give (train, eval) or (train, eval, holdout), got {type(value).__name__}")
    train, evaluation, *holdout = value
    return train, evaluation, holdout[0] if holdout else None


def format_tune_text(summary: dict[str, Any], limit: int = 10) -> str:
    """Best configuration against the baseline, the trials that were pruned or failed and why, the study's
    findings."""
    rows = summary["trials"]
    states = {s: sum(1 for r in rows if r["state"] == s) for s in ("COMPLETE", "PRUNED", "FAIL")}
    metric, baseline, best = summary["metric"], summary.get("baseline") or {}, summary["best"]
    lines = [f"msdoctor tune: study {summary['study_name']!r}, {states['COMPLETE']} complete, {states['PRUNED']} "
             f"pruned, {states['FAIL']} failed; score: {metric} ({summary['direction']})"]
    if baseline.get("value") is not None:
        top = baseline.get("top_finding")
        lines.append(f"  baseline (your defaults): {baseline['value']:.4g}"
                     + (f"; {top['code']} {top['rule']}" if top else ""))
    if best:
        held = f", held-out {best['holdout']:.4g}" if best.get("holdout") is not None else ""
        lines.append(f"  best: trial {best['number']}, {best['value']:.4g}{held}")
        lines += [f"    {name} = {value:.4g}" if isinstance(value, float) else f"    {name} = {value}"
                  for name, value in best["params"].items()]
    if summary["importance"]:
        lines.append("  importance: " + ", ".join(f"{k} {v:.2f}" for k, v in summary["importance"].items()))
    for state, title, reason in (("PRUNED", "pruned", "pruned_reason"), ("FAIL", "failed", "failed_reason")):
        stopped = [r for r in rows if r["state"] == state][:limit]
        if stopped:
            lines.append(f"  {title} trials:")
            lines += [f"    {r['number']:>3}: {r.get(reason) or title}" for r in stopped]
    lines += [f"  {f['severity']} {f['code']} [{f['rule']}] {f['message']}" for f in summary["findings"]]
    return "\n".join(lines)


def run_tune_command(args: argparse.Namespace) -> int:
    """``msdoctor tune``. Exit codes: 0 the study finished, 2 bad input, every trial failed or a worker failed (one
    line on stderr)."""
    from mindspore_doctor.loading import load_attr
    from mindspore_doctor.static.loader import LoadError
    from mindspore_doctor.tuner.failures import TuneError
    from mindspore_doctor.tuner.study import tune
    from mindspore_doctor.tuner.summary import study_summary

    try:
        if args.jobs < 1:
            raise TuneError(f"--jobs must be at least 1, got {args.jobs}")
        if args.jobs > 1 and not args.storage:
            raise TuneError("--jobs needs --storage: the workers share the study through its database")
        if args.tensorboard and not args.summary_dir:
            raise TuneError("--tensorboard needs --summary-dir: the trials' event files go into DIR/trial_NNN")
        build = load_attr(args.build, "BUILD")
        if not callable(build):
            raise TuneError(f"{args.build} is not callable; give build(params) returning (net, loss_fn, optimizer)")
        train, evaluation, holdout = _datasets(load_attr(args.data, "--data"))
        space = args.space if args.space == "auto" else load_attr(args.space, "--space")

        def mark_ready() -> None:
            with contextlib.suppress(OSError):  # the launcher stopped waiting and removed its directory
                Path(args.spawned).touch()

        with WorkerPool(args) as workers:
            on_ready = mark_ready if args.spawned else workers.start if args.jobs > 1 else None
            study = tune(build, train, evaluation, space=space, trials=args.trials, storage=args.storage,
                         study_name=args.study_name, epochs=args.epochs, seed=args.seed,
                         random_trials=args.random_trials, holdout_ds=holdout, summary_dir=args.summary_dir,
                         worker=args.worker, on_ready=on_ready,
                         tensorboard=args.tensorboard)
            problems = workers.wait(_finish_timeout(study))
    except (LoadError, TuneError) as exc:
        print(f"msdoctor: {exc}", file=sys.stderr)
        return 2
    if problems:
        print(f"msdoctor: {', '.join(problems)}; the study is in {args.storage}", file=sys.stderr)
        return 2
    if args.spawned:
        return 0
    summary = study_summary(study, args.trials, args.storage)
    print(json.dumps(summary, indent=2, default=str) if args.json else format_tune_text(summary))
    if args.html:
        from mindspore_doctor.export.tune_html import write_tune_html

        write_tune_html(summary, args.html)
        print(f"HTML report: {args.html}", file=sys.stderr)
    return 0
