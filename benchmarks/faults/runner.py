"""Run one benchmark program in this process: plain (the effect check), with ``Doctor()``, plain again.

    python -m benchmarks.faults.runner NAME --out result.json

All runs start from the same seeds, so the final weights also tell whether the
Doctor changed training; the second plain run is the step-time reference. Under ``msrun`` every rank runs this; rank 0 writes
the result. The result is JSON: the answer key, the effect check, both runs'
step times, and the Doctor's findings.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from mindspore_doctor._io import atomic_write_text

PROGRAMS = "benchmarks.faults.programs"


def load(name: str) -> Any:
    return importlib.import_module(f"{PROGRAMS}.{name}")


def program_names() -> list[str]:
    """Every program module, sorted (files starting with ``_`` are helpers)."""
    folder = Path(__file__).parent / "programs"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def seed_all(mode: str) -> None:
    import mindspore as ms
    import mindspore.dataset as mds
    import numpy as np

    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_seed(0)
    mds.config.set_seed(0)
    np.random.seed(0)


def final_weights(net: Any) -> dict[str, Any]:
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import numpy as np

    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def doctor_left_weights_alone(deterministic: bool, plain: dict[str, Any] | None, doctored: dict[str, Any],
                               plain_again: dict[str, Any] | None) -> bool | None:
    """True/False; None when the plain run does not repeat itself either (MindSpore's CPU Dropout)."""
    if plain is None or not deterministic:
        return None
    if same_weights(plain, doctored):
        return True
    return False if plain_again is not None and same_weights(plain, plain_again) else None


def run_timed(module: Any, callbacks: list[Any]) -> tuple[Any, dict[str, Any]]:
    from benchmarks.faults.kit import StepClock

    clock = StepClock()
    started = time.perf_counter()
    outcome = module.train(clock.wrap(callbacks))
    steps = clock.step_seconds[2:] or clock.step_seconds  # the first steps compile
    timing = {"steps": len(clock.step_seconds), "wall_s": time.perf_counter() - started,
              "median_step_s": statistics.median(steps) if steps else None}
    return outcome, timing


def finding_row(f: Any, source: str) -> dict[str, Any]:
    """One finding; a resolved one (the finding lifecycle) also carries the severity it was logged with."""
    lifecycle = {k: f.evidence[k] for k in ("original_severity", "resolved_step") if k in f.evidence}
    return {"code": f.code, "severity": f.severity.value, "step": f.step, "where": f.where,
            "message": f.message, "source": source, **lifecycle}


def run(name: str) -> dict[str, Any]:
    """Plain run + effect check, then the Doctor run (+ sanity when the program asks for it)."""
    from mindspore_doctor import Doctor, sanity

    module = load(name)
    fault = module.FAULT
    result: dict[str, Any] = {"name": name, "fault": {
        "description": fault.description, "expect": sorted(fault.expect), "accept": sorted(fault.accept),
        "arch": fault.arch, "data": fault.data, "category": fault.category, "onset_step": fault.onset_step,
        "fast": fault.fast, "sanity": fault.sanity, "launcher": fault.launcher, "mode": fault.mode,
        "options": sorted(fault.options)}}

    seed_all(fault.mode)
    try:
        outcome, result["plain"] = run_timed(module, [])
        module.effect(outcome)
        result["effect"] = {"ok": True, "reason": ""}
        plain_weights = final_weights(outcome.network)
    except Exception as exc:  # noqa: BLE001 - a broken program is a benchmark result, not a crash
        result["effect"] = {"ok": False, "reason": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        plain_weights = None

    seed_all(fault.mode)
    options = {**fault.options, **(module.doctor_options() if hasattr(module, "doctor_options") else {})}
    doctor = Doctor(**options)
    findings: list[dict[str, Any]] = []
    try:
        outcome, result["doctor"] = run_timed(module, [doctor])
        result["loop"] = outcome.extra.get("loop", "Model.train")
        doctored = final_weights(outcome.network)
    except Exception as exc:  # noqa: BLE001 - recorded: the Doctor must never crash training
        result["doctor"] = {"crashed": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        doctored = None
    findings += [finding_row(f, "doctor") for f in doctor.report.findings]

    # The plain run once more: the step-time reference (the first run in a process pays one-off warm-ups:
    # data pipeline threads, PyNative kernel builds) and the check that the program repeats itself at all.
    seed_all(fault.mode)
    outcome, result["plain_again"] = run_timed(module, [])
    if doctored is not None:
        result["doctor"]["weights_identical"] = doctor_left_weights_alone(
            fault.deterministic, plain_weights, doctored, final_weights(outcome.network) if plain_weights else None)

    if fault.sanity:
        started = time.perf_counter()
        report = sanity(module.build, module.dataset(), progress=False, **fault.options)
        result["sanity_s"] = time.perf_counter() - started
        findings += [finding_row(f, "sanity") for f in report.findings]
    result["findings"] = findings
    return result


def _rank() -> int:
    return int(os.environ.get("RANK_ID", os.environ.get("MS_NODE_ID", "0")) or 0)


def write_result(path: str, result: dict[str, Any]) -> None:
    """Whole or not at all: the parent reads the file as soon as the process ends."""
    atomic_write_text(path, json.dumps(result, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="program module name in benchmarks/faults/programs")
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    args = parser.parse_args(argv)
    result = run(args.name)
    if _rank() == 0:
        write_result(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
