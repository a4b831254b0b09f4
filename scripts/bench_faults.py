#!/usr/bin/env python
"""The fault benchmark: run every program in benchmarks/faults/programs with and without the Doctor, score it.

    python scripts/bench_faults.py                 # everything, prints the tables
    python scripts/bench_faults.py --fast          # the CI subset (Fault(fast=True))
    python scripts/bench_faults.py --write-docs    # also rewrite docs/benchmark.md from this run

Each program runs in its own process (``benchmarks.faults.runner``): a plain
run whose effect check proves the fault is real (or that a healthy program
learns), then the same run with ``Doctor()`` at its defaults. Programs with
``launcher="msrun"`` run as 2 ranks under ``msrun`` on loopback. Scores count
only warning and error findings; a finding is correct when its code is one the
program expects or accepts as a secondary symptom.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "benchmarks" / "faults" / "programs"
DOC = ROOT / "docs" / "benchmark.md"
ALARM = ("warning", "error")
DYNAMIC_GROUPS = ("MSD2", "MSD4", "MSD5")  # codes found while training: steps-to-detection applies


@dataclass(frozen=True)
class Program:
    name: str
    fast: bool
    launcher: str


def literal_keywords(path: Path) -> dict[str, Any]:
    """The literal keyword arguments of ``FAULT = Fault(...)``, read without importing the program
    (importing one runs its module code: data generation, and ``init()`` under msrun)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FAULT" for t in node.targets):
            found = {}
            for keyword in getattr(node.value, "keywords", []):
                try:
                    found[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    continue  # not a literal (e.g. options built from a variable)
            return found
    raise SystemExit(f"{path}: no FAULT = Fault(...) assignment")


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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _codes(codes: list[str]) -> str:
    return ", ".join(codes) or "-"


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
        f"| recall (expected codes found / expected) | {_pct(t['recall'])} ({t['found_pairs']}/{t['expected_pairs']}) | ≥ 0.95 |",
        f"| faulty programs with every expected code found | {t['programs_fully_detected']}/{t['faulty']} | |",
        f"| precision (reports that are expected or accepted symptoms) | {_pct(t['precision'])} "
        f"({t['correct_reports']}/{t['reports']}) | |",
        f"| healthy programs with a false alarm | {len(t['healthy_with_false_alarms'])}/{t['healthy']} | 0 |",
        f"| false-alarm findings on faulty programs | {t['false_alarm_findings_on_faulty']} | |",
        f"| effect checks failed (fault not real / healthy not learning) | {len(t['effect_failures'])} | 0 |",
        f"| Doctor crashed training / MSD001 internal errors | {len(t['doctor_crashes'])} / {len(t['internal_errors'])} | 0 / 0 |",
        f"| final weights changed by the Doctor | {len(t['weights_changed'])} "
        f"(not reproducible without it: {len(t['weights_not_reproducible'])}) | 0 |",
        f"| Doctor step time / plain, median (max) over programs | {_pct(t['median_step_ratio'])} "
        f"({_pct(t['max_step_ratio'])}) | |",
        f"| hand-written loops (`doctor.watch`, ↻): programs / recall / healthy with a false alarm / weights "
        f"changed | {fn['programs']} / {_pct(fn['recall'])} / {len(fn['healthy_with_false_alarms'])}"
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
                     f"{_codes(row['expect'])} | {_codes(row['found'])} | {_codes(row['missed'])} | "
                     f"{_codes(row['false'])} | {steps} | {'ok' if row['effect_ok'] else 'FAILED'} | "
                     f"{_pct(row['step_ratio'])} |")
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
        print(f"{row['name']:<{width}}  {verdict}  expect {_codes(row['expect'])}  found {_codes(row['found'])}"
              f"  missed {_codes(row['missed'])}  false {_codes(row['false'])}"
              f"{'' if row['effect_ok'] else '  EFFECT FAILED: ' + row['effect_reason'][:120]}"
              f"  ({row['process_s']:.0f} s)")
    print(f"\nrecall {_pct(t['recall'])} ({t['found_pairs']}/{t['expected_pairs']}), precision {_pct(t['precision'])}, "
          f"healthy with false alarms {len(t['healthy_with_false_alarms'])}/{t['healthy']}, "
          f"effect failures {len(t['effect_failures'])}, crashes {len(t['doctor_crashes'])}, "
          f"MSD001 {len(t['internal_errors'])}, weights changed {len(t['weights_changed'])}")
    fn = t["functional"]
    print(f"hand-written loops: {fn['programs']} programs, recall {_pct(fn['recall'])}, healthy with false alarms "
          f"{len(fn['healthy_with_false_alarms'])}/{fn['healthy']}, weights changed {len(fn['weights_changed'])}")


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


REALWORLD_SECTION = ("<!-- realworld:begin -->", "<!-- realworld:end -->")
"""docs/benchmark.md holds both benchmarks: the real-code corpus (scripts/bench_realworld.py) owns the text between
these markers, this script everything else."""


def write_doc(fault_tables: str | None = None, realworld: str | None = None) -> None:
    """Rewrite one part of docs/benchmark.md and keep the other (None: keep that part as it is)."""
    text = DOC.read_text() if DOC.exists() else ""
    begin, end = REALWORLD_SECTION
    match = re.search(re.escape(begin) + ".*?" + re.escape(end), text, re.S)
    kept_realworld = match.group(0) if match else ""
    kept_faults = (text[: match.start()] + text[match.end():]) if match else text
    parts = [(fault_tables if fault_tables is not None else kept_faults).rstrip("\n"),
             realworld if realworld is not None else kept_realworld]
    write_atomically(DOC, "\n\n".join(p for p in parts if p) + "\n")
    print(f"wrote {DOC}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the CI subset")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these programs")
    parser.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1), help="parallel programs")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per program")
    parser.add_argument("--json", type=Path, help="write the scored results here")
    parser.add_argument("--write-docs", action="store_true", help=f"rewrite {DOC.relative_to(ROOT)}")
    parser.add_argument("--keep", type=Path, help="keep each program's raw result and log in this folder")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="run nothing: rewrite the docs from a --json file of an earlier run")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        write_doc(fault_tables=markdown(saved, saved["meta"]))
        return 0

    programs = discover(args.only, args.fast)
    workdir = Path(tempfile.mkdtemp(prefix="bench_faults_")) if args.keep is None else args.keep
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    single = [p for p in programs if p.launcher != "msrun"]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda p: run_one(p, workdir, args.timeout), single))
    results += [run_one(p, workdir, args.timeout) for p in programs if p.launcher == "msrun"]  # 2 ranks each
    seconds = time.perf_counter() - started
    scored = score(results)
    print_summary(scored)
    meta = {"date": date.today().isoformat(), "seconds": seconds, "jobs": args.jobs,
            "machine": f"{os.cpu_count()}-core {platform.machine()} CPU, Python {platform.python_version()}"}
    if args.json:
        write_atomically(args.json, json.dumps({"meta": meta, **scored}, indent=1))
    if args.write_docs:
        write_doc(fault_tables=markdown(scored, meta))
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{len(programs)} programs in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
