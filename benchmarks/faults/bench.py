"""The fault benchmark's logic: find the programs, run each in its own process, score the results, format them
(``scripts/bench_faults.py`` is its command line).

Each program runs in its own process (``benchmarks.faults.runner``): a plain
run whose effect check proves the fault is real (or that a healthy program
learns), then the same run with ``Doctor()`` at its defaults. Programs with
``launcher="msrun"`` run as 2 ranks under ``msrun`` on loopback. Scores count
only warning and error findings; a finding is correct when its code is one the
program expects or accepts as a secondary symptom.
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.report import ALARM, ROOT, code_list, literal_keywords, number

PROGRAMS = ROOT / "benchmarks" / "faults" / "programs"
DYNAMIC_GROUPS = ("MSD2", "MSD4", "MSD5")  # codes found while training: steps-to-detection applies


@dataclass(frozen=True)
class Program:
    name: str
    fast: bool
    launcher: str


def discover(only: list[str] | None, fast: bool) -> list[Program]:
    programs = []
    for path in sorted(PROGRAMS.glob("*.py")):
        if path.stem.startswith("_") or (only and path.stem not in only):
            continue
        flags = literal_keywords(path)
        program = Program(path.stem, flags.get("fast", False), flags.get("launcher", "python"))
        if program.fast or not fast:
            programs.append(program)
    missing = set(only or ()) - {p.name for p in programs}
    if missing:
        raise SystemExit(f"unknown program(s): {', '.join(sorted(missing))}")
    return programs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(program: Program, out: Path, logs: Path) -> list[str]:
    arguments = [program.name, "--out", str(out)]
    if program.launcher == "msrun":  # msrun takes a script, not -m: the runner imports benchmarks via PYTHONPATH
        msrun = str(Path(sys.executable).with_name("msrun"))
        return [msrun, "--worker_num=2", "--local_worker_num=2", "--master_addr=127.0.0.1",
                f"--master_port={_free_port()}", "--join=True", f"--log_dir={logs / program.name}",
                str(ROOT / "benchmarks" / "faults" / "runner.py"), *arguments]
    return [sys.executable, "-m", "benchmarks.faults.runner", *arguments]


def run_one(program: Program, workdir: Path, timeout_s: float) -> dict[str, Any]:
    out = workdir / f"{program.name}.json"
    log = workdir / f"{program.name}.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    started = time.perf_counter()
    with log.open("w") as sink:
        try:
            rc = subprocess.run(_command(program, out, workdir / "msrun_logs"), cwd=workdir, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - started
    if out.exists():
        result = json.loads(out.read_text())
    else:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        result = {"name": program.name, "failed": f"runner exit {rc}", "log_tail": tail}
    result["process_s"] = wall
    return result


# --- scoring ---------------------------------------------------------------------------------


def _alarms(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Warning/error findings, first one per code (the Doctor logs each (code, location) once, in order).

    A finding the lifecycle resolved by the end counts with the severity it was logged with: it alarmed then.
    """
    first: dict[str, dict[str, Any]] = {}
    for f in result.get("findings", []):
        if f.get("original_severity", f["severity"]) in ALARM:
            first.setdefault(f["code"], f)
    return first


def score(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows, per_rule, detection = [], {}, {}
    correct = reported = 0
    for r in sorted(results, key=lambda r: r["name"]):
        if "failed" in r:
            rows.append({"name": r["name"], "failed": r["failed"], "log_tail": r.get("log_tail", [])})
            continue
        fault = r["fault"]
        expect, accept = set(fault["expect"]), set(fault["accept"])
        alarms = _alarms(r)
        found = set(alarms)
        false = sorted(found - expect - accept)
        correct += len(found & (expect | accept))
        reported += len(found)
        for code in expect:
            hit = per_rule.setdefault(code, {"programs": 0, "detected": 0, "missed_in": []})
            hit["programs"] += 1
            if code in found:
                hit["detected"] += 1
            else:
                hit["missed_in"].append(r["name"])
        steps = {}
        for code in sorted(expect & found):
            step = alarms[code].get("step")
            if code.startswith(DYNAMIC_GROUPS) and step is not None:
                steps[code] = step - fault["onset_step"] + 1
                detection.setdefault(code, []).append(steps[code])
        plain, doctor = r.get("plain_again") or r.get("plain", {}), r.get("doctor", {})
        ratio = (doctor["median_step_s"] / plain["median_step_s"]
                 if doctor.get("median_step_s") and plain.get("median_step_s") else None)
        rows.append({
            "name": r["name"], "category": fault["category"], "arch": fault["arch"], "data": fault["data"],
            "healthy": not expect, "fast": fault["fast"], "expect": sorted(expect), "found": sorted(found),
            "missed": sorted(expect - found), "false": false, "steps_to_detect": steps,
            "effect_ok": r["effect"]["ok"], "effect_reason": r["effect"]["reason"],
            "doctor_crashed": doctor.get("crashed"), "weights_identical": doctor.get("weights_identical"),
            "step_ratio": ratio,
            "internal_errors": [f["message"] for f in r.get("findings", []) if f["code"] == "MSD001"],
            "false_messages": {c: alarms[c]["message"] for c in false},
            "options": fault["options"], "process_s": r["process_s"], "loop": r.get("loop", "Model.train"),
        })
    valid = [row for row in rows if "failed" not in row]
    faulty = [row for row in valid if not row["healthy"]]
    healthy = [row for row in valid if row["healthy"]]
    expected_pairs = sum(len(row["expect"]) for row in faulty)
    found_pairs = sum(len(row["expect"]) - len(row["missed"]) for row in faulty)
    ratios = [row["step_ratio"] for row in valid if row["step_ratio"]]
    functional = [row for row in valid if row["loop"] == "functional"]
    functional_expected = sum(len(row["expect"]) for row in functional)
    return {
        "rows": rows, "per_rule": dict(sorted(per_rule.items())),
        "detection": {code: sorted(v) for code, v in sorted(detection.items())},
        "totals": {
            "programs": len(rows), "faulty": len(faulty), "healthy": len(healthy),
            "failed_to_run": [row["name"] for row in rows if "failed" in row],
            "recall": found_pairs / expected_pairs if expected_pairs else None,
            "expected_pairs": expected_pairs, "found_pairs": found_pairs,
            "programs_fully_detected": sum(not row["missed"] for row in faulty),
            "precision": correct / reported if reported else None, "correct_reports": correct, "reports": reported,
            "healthy_with_false_alarms": [row["name"] for row in healthy if row["false"]],
            "faulty_with_false_alarms": [row["name"] for row in faulty if row["false"]],
            "false_alarm_findings_on_faulty": sum(len(row["false"]) for row in faulty),
            "effect_failures": [row["name"] for row in valid if not row["effect_ok"]],
            "doctor_crashes": [row["name"] for row in valid if row["doctor_crashed"]],
            "internal_errors": [row["name"] for row in valid if row["internal_errors"]],
            "weights_changed": [row["name"] for row in valid if row["weights_identical"] is False],
            "weights_not_reproducible": [row["name"] for row in valid if row["weights_identical"] is None],
            "median_step_ratio": statistics.median(ratios) if ratios else None,
            "max_step_ratio": max(ratios) if ratios else None,
            "rules_covered": sorted(per_rule),
            "functional": {
                "programs": len(functional), "healthy": sum(row["healthy"] for row in functional),
                "recall": (sum(len(row["expect"]) - len(row["missed"]) for row in functional) / functional_expected
                           if functional_expected else None),
                "healthy_with_false_alarms": [row["name"] for row in functional if row["healthy"] and row["false"]],
                "weights_changed": [row["name"] for row in functional if row["weights_identical"] is False],
            },
        },
    }


# --- output ----------------------------------------------------------------------------------


def markdown(scored: dict[str, Any], meta: dict[str, Any]) -> str:
    t = scored["totals"]
    fn = t["functional"]
    lines = [
        "# Fault benchmark",
        "",
        "Generated by `python scripts/bench_faults.py --write-docs`; do not edit by hand (notes go in",
        "`docs/benchmark-notes.md`, thresholds in `docs/rules/`).",
        "",
        f"Run of {meta['date']} on {meta['machine']}: {t['programs']} programs ({t['faulty']} with one seeded fault,",
        f"{t['healthy']} healthy) in {meta['seconds']:.0f} s with {meta['jobs']} parallel jobs. Every program is a",
        "real MindSpore training script; a plain run without the Doctor first proves the fault has its effect",
        "(or that the healthy program learns), then the same run with `Doctor()` at its defaults is scored.",
        "Only warning and error findings count.",
        "",
        "## Summary",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| recall (expected codes found / expected) | {number(t['recall'])} ({t['found_pairs']}/{t['expected_pairs']}) | ≥ 0.95 |",
        f"| faulty programs with every expected code found | {t['programs_fully_detected']}/{t['faulty']} | |",
        f"| precision (reports that are expected or accepted symptoms) | {number(t['precision'])} "
        f"({t['correct_reports']}/{t['reports']}) | |",
        f"| healthy programs with a false alarm | {len(t['healthy_with_false_alarms'])}/{t['healthy']} | 0 |",
        f"| false-alarm findings on faulty programs | {t['false_alarm_findings_on_faulty']} | |",
        f"| effect checks failed (fault not real / healthy not learning) | {len(t['effect_failures'])} | 0 |",
        f"| Doctor crashed training / MSD001 internal errors | {len(t['doctor_crashes'])} / {len(t['internal_errors'])} | 0 / 0 |",
        f"| final weights changed by the Doctor | {len(t['weights_changed'])} "
        f"(not reproducible without it: {len(t['weights_not_reproducible'])}) | 0 |",
        f"| Doctor step time / plain, median (max) over programs | {number(t['median_step_ratio'])} "
        f"({number(t['max_step_ratio'])}) | |",
        f"| hand-written loops (`doctor.watch`, ↻): programs / recall / healthy with a false alarm / weights "
        f"changed | {fn['programs']} / {number(fn['recall'])} / {len(fn['healthy_with_false_alarms'])}"
        f"/{fn['healthy']} / {len(fn['weights_changed'])} | |",
        "",
    ]
    if t["failed_to_run"]:
        lines += [f"Programs that did not produce a result: {', '.join(t['failed_to_run'])}.", ""]
    lines += ["## Per rule", "",
              "| code | programs | detected | recall | median steps to detect | missed in |", "|---|---|---|---|---|---|"]
    for code, hit in scored["per_rule"].items():
        steps = scored["detection"].get(code)
        lines.append(f"| {code} | {hit['programs']} | {hit['detected']} | {hit['detected'] / hit['programs']:.2f} | "
                     f"{f'{statistics.median(steps):g}' if steps else '-'} | {', '.join(hit['missed_in']) or '-'} |")
    lines += ["", "## Programs", "",
              "| program | category | arch / data | expected | found (warning/error) | missed | false alarms | "
              "steps to detect | effect | step ratio |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for row in scored["rows"]:
        if "failed" in row:
            lines.append(f"| {row['name']} | did not run: {row['failed']} | | | | | | | | |")
            continue
        steps = ", ".join(f"{c}: {s}" for c, s in row["steps_to_detect"].items()) or "-"
        marks = (" ⚡" if row["fast"] else "") + (" ↻" if row["loop"] == "functional" else "")
        lines.append(f"| {row['name']}{marks} | {row['category']} | {row['arch']} / {row['data']} | "
                     f"{code_list(row['expect'])} | {code_list(row['found'])} | {code_list(row['missed'])} | "
                     f"{code_list(row['false'])} | {steps} | {'ok' if row['effect_ok'] else 'FAILED'} | "
                     f"{number(row['step_ratio'])} |")
    alarms = [(row["name"], code, msg) for row in scored["rows"] if "failed" not in row
              for code, msg in row["false_messages"].items()]
    if alarms:
        lines += ["", "## False alarms", "", "| program | code | message |", "|---|---|---|"]
        lines += [f"| {name} | {code} | {msg.replace('|', '/')} |" for name, code, msg in alarms]
    lines += ["", "⚡ = in the CI subset (`--fast`). ↻ = a hand-written loop (`value_and_grad` + `@ms.jit`,",
              "`kit.fit_functional`) the Doctor watches through `doctor.watch`; the others use `Model.train`. Step ratio: median Doctor step time over the median step of a",
              "second plain run in the same process (steps 3+; the first run pays one-off warm-ups). Steps of",
              "these small programs take 1-20 ms, so the Doctor's fixed per-step cost (one loss read) weighs",
              "more than on real models, and two programs share the 2 cores: see docs/doctor.md for the",
              "overhead benchmark.", ""]
    return "\n".join(lines)


def print_summary(scored: dict[str, Any]) -> None:
    t = scored["totals"]
    width = max((len(r["name"]) for r in scored["rows"]), default=10)
    for row in scored["rows"]:
        if "failed" in row:
            print(f"{row['name']:<{width}}  DID NOT RUN ({row['failed']})", *row["log_tail"][-5:], sep="\n    ")
            continue
        verdict = "ok" if not row["missed"] and not row["false"] and row["effect_ok"] else "!!"
        print(f"{row['name']:<{width}}  {verdict}  expect {code_list(row['expect'])}  found {code_list(row['found'])}"
              f"  missed {code_list(row['missed'])}  false {code_list(row['false'])}"
              f"{'' if row['effect_ok'] else '  EFFECT FAILED: ' + row['effect_reason'][:120]}"
              f"  ({row['process_s']:.0f} s)")
    print(f"\nrecall {number(t['recall'])} ({t['found_pairs']}/{t['expected_pairs']}), "
          f"precision {number(t['precision'])}, "
          f"healthy with false alarms {len(t['healthy_with_false_alarms'])}/{t['healthy']}, "
          f"effect failures {len(t['effect_failures'])}, crashes {len(t['doctor_crashes'])}, "
          f"MSD001 {len(t['internal_errors'])}, weights changed {len(t['weights_changed'])}")
    fn = t["functional"]
    print(f"hand-written loops: {fn['programs']} programs, recall {number(fn['recall'])}, healthy with false alarms "
          f"{len(fn['healthy_with_false_alarms'])}/{fn['healthy']}, weights changed {len(fn['weights_changed'])}")
