"""Run one real-code corpus program in this process: lint, plain training (the effect check), ``Doctor()``, timing.

    python -m benchmarks.realworld.runner NAME --out result.json [--paired-steps 200]
    python -m benchmarks.realworld.runner NAME --rss plain|doctor --out rss.json

Lint: ``lint(network, loss_fn=, optimizer=, sample_inputs=)`` on a fresh build.
Trained programs then run as the fault programs do (``benchmarks.faults.runner``'s
seeding, timing and weight comparison): plain, then with ``Doctor()`` at its
defaults (plus ``eval_dataset=`` where the program has an eval split); the plain
run is repeated only when the weights differ, to tell a Doctor that changed
training from a program that does not repeat itself (MindSpore's CPU Dropout).
The step-time ratio comes from ``benchmarks.overhead``'s paired timing
(plain and Doctor steps alternated in blocks, one process); peak RSS is read after
the plain run and after the Doctor run (``rss_same_process_mb``: same process, so the
Doctor's figure includes what the plain run left behind, an upper bound).

``--rss plain|doctor`` measures peak RSS the way a user meets it, one variant per
fresh process: the same seeding and the same training as ``run()`` (plain, or with
``Doctor()`` built from the same options), then ``ru_maxrss`` and ``/proc/self/status``
VmHWM; no lint, no effect check, no paired timing. ``benchmarks.realworld.bench.run_one``
launches both variants after the main run of a trained program.
"""
from __future__ import annotations

import argparse
import importlib
import resource
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks.faults import runner as fault_runner
from benchmarks.overhead import paired_timing
from benchmarks.realworld import lint_only
from benchmarks.realworld.bench import PAIRED_MORE_S, PAIRED_ROUNDS, PAIRED_ROUNDS_MAX, PAIRED_ROUNDS_S, PAIRED_STEPS

PROGRAMS = "benchmarks.realworld.programs"


def load(name: str) -> Any:
    """A program module, or a lint-only entry of ``lint_only.MODELS`` in the same shape."""
    return lint_only.program(name) if name in lint_only.MODELS else importlib.import_module(f"{PROGRAMS}.{name}")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _vmhwm_mb() -> float | None:
    """This process's own RSS high-water mark (Linux): unlike ``ru_maxrss``, never the parent's RSS at fork."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _doctor_options(module: Any) -> dict[str, Any]:
    """``Doctor()``'s options for a program: its FAULT's, plus its eval split where it has one (built here, after
    the seeding, as ``run()`` does)."""
    eval_ds = module.DATA.eval_dataset() if hasattr(module, "DATA") else None
    return {**module.FAULT.options, **({"eval_dataset": eval_ds} if eval_ds is not None else {})}


def _lint(module: Any) -> tuple[list[dict[str, Any]], float]:
    """``lint`` on the recipe's network, or on each of ``module.lint_targets()`` (a program training several models
    in its own loop, a GAN: ``[(network, loss_fn, optimizer, sample_inputs), ...]``)."""
    from mindspore_doctor import lint

    if hasattr(module, "lint_targets"):
        started, rows = time.perf_counter(), []
        for network, loss_fn, optimizer, sample in module.lint_targets():
            report = lint(network, loss_fn=loss_fn, optimizer=optimizer, sample_inputs=sample)
            rows += [fault_runner.finding_row(f, "lint") for f in report.findings]
        return rows, time.perf_counter() - started
    setup = module.recipe()
    sample = module.DATA.sample_inputs() if hasattr(module, "DATA") else module.sample_inputs()
    started = time.perf_counter()
    report = lint(setup.network, loss_fn=setup.loss_fn, optimizer=setup.optimizer, sample_inputs=sample,
                  train_network=setup.model._train_network)  # pylint: disable=protected-access
    return [fault_runner.finding_row(f, "lint") for f in report.findings], time.perf_counter() - started


def _paired(module: Any, steps: int, block: int) -> dict[str, Any]:
    """The program's plain and Doctor steps alternated in one process (``benchmarks.overhead.paired_timing``), over
    ``steps`` steps or the program's own run when it is shorter: each copy is a fresh recipe, whose learning-rate
    schedule ends where the program's training does. Repeated on fresh copies (``PAIRED_ROUNDS``, while the rounds
    so far took less than ``PAIRED_ROUNDS_S``; up to ``PAIRED_ROUNDS_MAX`` while they took less than
    ``PAIRED_MORE_S``): one round of a program's ratio moved by 0.05-0.15 between runs on this machine. The ratios
    and ``extra_us`` (the Doctor's mean step less the plain one) are the rounds' medians; the split (us per step) is
    the round nearest the median."""
    data = module.DATA
    if isinstance(getattr(data, "epochs", None), int):
        steps = min(steps, data.epochs * data.steps_per_epoch)
    batches: list[tuple] = []
    while len(batches) < steps:
        epoch = module.DATA.train_dataset().create_tuple_iterator(num_epochs=1)
        batches += [tuple(item) for item in epoch][: steps - len(batches)]
    rounds: list[dict[str, Any]] = []
    began = time.perf_counter()

    def more() -> bool:
        elapsed = time.perf_counter() - began
        return (not rounds or len(rounds) < PAIRED_ROUNDS and elapsed < PAIRED_ROUNDS_S
                or len(rounds) < PAIRED_ROUNDS_MAX and elapsed < PAIRED_MORE_S)

    while more():
        rounds.append(paired_timing(lambda: module.recipe().model, batches, module.DATA.train_dataset(), block))
    for r in rounds:  # the Doctor's time per step, probe steps included
        r["extra_us"] = (r["doctor_mean_ms"] - r["plain_mean_ms"]) * 1e3
    mean_ratio = statistics.median(r["mean_ratio"] for r in rounds)
    nearest = min(rounds, key=lambda r: abs(r["mean_ratio"] - mean_ratio))
    return {**nearest, "mean_ratio": mean_ratio, "median_ratio": statistics.median(r["median_ratio"] for r in rounds),
            "extra_us": statistics.median(r["extra_us"] for r in rounds),
            "rounds": [{key: r[key] for key in ("mean_ratio", "median_ratio", "extra_us", "plain_median_ms",
                                                "doctor_median_ms")} for r in rounds]}


def run(name: str, paired_steps: int, block: int) -> dict[str, Any]:
    """Lint, then (trained programs) plain + effect, Doctor, paired timing."""
    import mindspore_doctor
    from mindspore_doctor import Doctor

    module = load(name)
    fault = module.FAULT
    trained = hasattr(module, "train")
    result: dict[str, Any] = {
        "name": name, "library": module.LIBRARY, "covers": list(module.COVERS), "trained": trained,
        "mindspore_doctor": str(Path(mindspore_doctor.__file__).resolve().parent),
        "fault": {"description": fault.description, "arch": fault.arch, "data": fault.data, "fast": fault.fast,
                  "mode": fault.mode, "options": sorted(fault.options)}}
    findings: list[dict[str, Any]] = []
    fault_runner.seed_all(fault.mode)
    try:
        lint_findings, result["lint_s"] = _lint(module)
        findings += lint_findings
    except Exception as exc:  # noqa: BLE001 - recorded: lint must never crash on a healthy model
        result["lint_crashed"] = f"{type(exc).__name__}: {exc}"
        result["lint_traceback"] = traceback.format_exc()
    result["rss_same_process_mb"] = {"lint": _peak_rss_mb()}
    if not trained:
        result["findings"] = findings
        return result

    fault_runner.seed_all(fault.mode)
    plain_weights = None
    try:
        outcome, result["plain"] = fault_runner.run_timed(module, [])
        plain_weights = fault_runner.final_weights(outcome.network)
        result["plain"].update(first_loss=outcome.mean_loss(first=10), last_loss=outcome.mean_loss(last=10),
                               metrics=outcome.metrics)
        module.effect(outcome)
        result["effect"] = {"ok": True, "reason": ""}
    except Exception as exc:  # noqa: BLE001 - a broken program is a benchmark result, not a crash
        result["effect"] = {"ok": False, "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    result["rss_same_process_mb"]["plain"] = _peak_rss_mb()

    fault_runner.seed_all(fault.mode)
    doctor = Doctor(**_doctor_options(module))
    try:
        outcome, result["doctor"] = fault_runner.run_timed(module, [doctor])
        doctored = fault_runner.final_weights(outcome.network)
    except Exception as exc:  # noqa: BLE001 - recorded: the Doctor must never crash training
        result["doctor"] = {"crashed": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        doctored = None
    findings += [fault_runner.finding_row(f, "doctor") for f in doctor.report.findings]
    result["rss_same_process_mb"]["doctor"] = _peak_rss_mb()

    if doctored is not None and plain_weights is not None:
        again = None
        if not fault_runner.same_weights(plain_weights, doctored):
            # The Doctor, or a program that does not repeat itself? Run it plain once more to tell.
            fault_runner.seed_all(fault.mode)
            outcome, result["plain_again"] = fault_runner.run_timed(module, [])
            again = fault_runner.final_weights(outcome.network)
        result["doctor"]["weights_identical"] = fault_runner.doctor_left_weights_alone(
            fault.deterministic, plain_weights, doctored, again)
    if paired_steps and hasattr(module, "recipe"):  # the paired timing drives a Model; a several-model loop has none
        fault_runner.seed_all(fault.mode)
        try:
            result["paired"] = _paired(module, paired_steps, block)
        except Exception as exc:  # noqa: BLE001 - timing is a measurement, not a verdict
            result["paired"] = {"failed": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    result["findings"] = findings
    return result


def rss(name: str, variant: str) -> dict[str, Any]:
    """Train a program once, plain or under ``Doctor()``, in this (fresh) process, and read its peak RSS.

    Seeding, training and the Doctor's options are ``run()``'s; the plain variant never imports mindspore_doctor.
    """
    module = load(name)
    if not hasattr(module, "train"):
        raise SystemExit(f"{name} is lint-only: nothing to train")
    fault_runner.seed_all(module.FAULT.mode)
    callbacks: list[Any] = []
    if variant == "doctor":
        from mindspore_doctor import Doctor

        callbacks.append(Doctor(**_doctor_options(module)))
    result: dict[str, Any] = {"name": name, "variant": variant}
    try:
        _, result["timing"] = fault_runner.run_timed(module, callbacks)
    except Exception as exc:  # noqa: BLE001 - the main run records why; here it only voids the measurement
        result["crashed"] = f"{type(exc).__name__}: {exc}"
    result.update(rss_mb=_peak_rss_mb(), vmhwm_mb=_vmhwm_mb())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="program module name in benchmarks/realworld/programs")
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    parser.add_argument("--paired-steps", type=int, default=PAIRED_STEPS,
                        help="steps per variant in the paired step-time measurement, at most the program's own run "
                        "(0: skip it)")
    parser.add_argument("--block", type=int, default=10, help="steps per block in the paired timing")
    parser.add_argument("--rss", choices=("plain", "doctor"),
                        help="only train once (plain or under Doctor()) and write this process's peak RSS")
    args = parser.parse_args(argv)
    if args.rss:
        fault_runner.write_result(args.out, rss(args.name, args.rss))
    else:
        fault_runner.write_result(args.out, run(args.name, args.paired_steps, args.block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
