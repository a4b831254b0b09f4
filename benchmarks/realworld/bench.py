"""The real-code corpus's logic: find the programs, run each in its own process, score the results, format them
(``scripts/bench_realworld.py`` is its command line).

Each program in benchmarks/realworld/programs runs in its own process
(``benchmarks.realworld.runner``): ``lint`` with sample inputs, then for trained
programs a plain run whose effect check proves the model learns, the same run
with ``Doctor()`` at its defaults (plus the program's eval split), and the
paired step-time measurement of ``benchmarks.overhead``; then, for trained
programs, two more processes train it once each, plain and under ``Doctor()``,
for the peak RSS a user sees (``runner --rss``). Every warning or
error finding on these healthy models is a false alarm unless
docs/benchmark-notes.md explains it as a real problem.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.realworld import lint_only
from benchmarks.report import ALARM, REALWORLD_SECTION, ROOT, code_list, literal_keywords, number

PROGRAMS = ROOT / "benchmarks" / "realworld" / "programs"
PAIRED_STEPS = 200
"""Steps of each variant in the paired timing (at most the program's own run): 18 timed blocks of 10 and the
default probe cadence, where 60 steps left 4 blocks, one of them a probe step's."""
PAIRED_ROUNDS = 3
"""Rounds of the paired timing, each on fresh copies; the table gives their medians."""
PAIRED_ROUNDS_S = 100.0
"""No further round once the rounds so far took this long (a PyNative LSTM's one round: ~140 s)."""
PAIRED_ROUNDS_MAX = 9
"""Rounds up to this many while the rounds so far took less than ``PAIRED_MORE_S``: the fast programs' rounds (1-3 s
each) spread the most (three small MLPs' single rounds: 0.90-1.07 with a second plain copy in the Doctor's place)."""
PAIRED_MORE_S = 30.0


def discover(only: list[str] | None, fast: bool) -> list[str]:
    """Program modules and lint-only entries, sorted; with ``fast``, only those marked ``fast``."""
    flags = {path.stem: literal_keywords(path).get("fast", False)
             for path in PROGRAMS.glob("[a-z]*.py")}
    flags.update({name: spec.fast for name, spec in lint_only.MODELS.items()})
    names = sorted(name for name, is_fast in flags.items() if (not only or name in only) and (is_fast or not fast))
    missing = set(only or ()) - set(names)
    if missing:
        raise SystemExit(f"unknown program(s): {', '.join(sorted(missing))}")
    return names


def _runner(arguments: list[str], workdir: Path, log: Path, mode: str, timeout_s: float,
            doctor_path: Path | None) -> Any:
    """``benchmarks.realworld.runner`` in a fresh process, its output appended to ``log``: its exit code or
    ``"timeout"``."""
    paths = [str(doctor_path) if doctor_path else None, str(ROOT), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)))
    with log.open(mode) as sink:
        try:
            return subprocess.run([sys.executable, "-m", "benchmarks.realworld.runner", *arguments], cwd=workdir,
                                  env=env, stdout=sink, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return "timeout"


def _fresh_rss(name: str, workdir: Path, log: Path, timeout_s: float,
               doctor_path: Path | None) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Peak RSS of the program trained once plain and once under ``Doctor()``, each in its own fresh process (one
    after the other): ``({"plain": MB, "doctor": MB, "plain_vmhwm": MB, "doctor_vmhwm": MB}, {"plain": s, "doctor":
    s}, {variant: why it has no figure})``, the seconds being each process's whole training call (the Doctor's
    checks before the first step, its evaluations and its end-of-run analysis included). ``ru_maxrss`` and VmHWM
    are per process, so programs run in parallel (``--jobs``) do not add to them; the seconds do."""
    rss: dict[str, float] = {}
    run_s: dict[str, float] = {}
    failed: dict[str, Any] = {}
    for variant in ("plain", "doctor"):
        out = workdir / f"{name}.rss-{variant}.json"
        with log.open("a") as sink:
            sink.write(f"\n=== fresh process: {variant} run for peak RSS ===\n")
        rc = _runner([name, "--rss", variant, "--out", str(out)], workdir, log, "a", timeout_s, doctor_path)
        measured = json.loads(out.read_text()) if out.exists() else {"crashed": f"runner exit {rc}"}
        if measured.get("crashed"):
            failed[variant] = measured["crashed"]
            continue
        rss[variant] = measured["rss_mb"]
        run_s[variant] = measured["timing"]["wall_s"]
        if measured.get("vmhwm_mb"):
            rss[f"{variant}_vmhwm"] = measured["vmhwm_mb"]
    return rss, run_s, failed


def run_one(name: str, workdir: Path, timeout_s: float, paired_steps: int, doctor_path: Path | None) -> dict[str, Any]:
    """The program's main run (``runner.run``), then for a trained program the two fresh-process RSS runs:
    ``rss_mb`` holds their peaks, ``rss_same_process_mb`` the main run's (lint, plain, Doctor in one process)."""
    out, log = workdir / f"{name}.json", workdir / f"{name}.log"
    started = time.perf_counter()
    rc = _runner([name, "--out", str(out), "--paired-steps", str(paired_steps)], workdir, log, "w", timeout_s,
                 doctor_path)
    if out.exists():
        result = json.loads(out.read_text())
    else:
        result = {"name": name, "failed": f"runner exit {rc}",
                  "log_tail": log.read_text(errors="replace").splitlines()[-15:]}
    if result.get("trained") and "failed" not in result:
        result["rss_mb"], result["run_s"], failed = _fresh_rss(name, workdir, log, timeout_s, doctor_path)
        if failed:
            result["rss_failed"] = failed
    result["process_s"] = time.perf_counter() - started
    return result


# --- scoring ---------------------------------------------------------------------------------


def _ratio(result: dict[str, Any], phase: str, key: str = "rss_mb") -> float | None:
    """Peak RSS of ``phase`` over the plain run's: ``rss_mb`` (fresh processes) or ``rss_same_process_mb``."""
    rss = result.get(key, {})
    return rss[phase] / rss["plain"] if rss.get(phase) and rss.get("plain") else None


def _run_ratio(result: dict[str, Any]) -> float | None:
    """The Doctor's whole training call over the plain one's, fresh processes (``_fresh_rss``)."""
    return _ratio(result, "doctor", "run_s")


def _own_step_ratio(result: dict[str, Any]) -> float | None:
    """The Doctor's paired extra time per step over the program's own plain step (its median step in the plain
    run, its own loop around it: the data pipeline's threads, a logging callback): the ratio its user meets."""
    extra_us, own_s = result.get("paired", {}).get("extra_us"), result.get("plain", {}).get("median_step_s")
    return 1 + extra_us / 1e6 / own_s if extra_us is not None and own_s else None


def score(results: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for r in sorted(results, key=lambda r: r["name"]):
        if "failed" in r:
            rows.append({"name": r["name"], "failed": r["failed"], "log_tail": r.get("log_tail", [])})
            continue
        # The final report's severity counts: a transient training finding the lifecycle resolved by the end is
        # info there (listed under "resolved"), unlike in the fault benchmark, where its detection is what counts.
        alarms = {source: {f["code"] for f in r["findings"] if f["source"] == source and f["severity"] in ALARM}
                  for source in ("lint", "doctor")}
        doctor, paired = r.get("doctor", {}), r.get("paired", {})
        rows.append({
            "name": r["name"], "library": r["library"], "covers": r["covers"], "trained": r["trained"],
            "fast": r["fault"]["fast"], "arch": r["fault"]["arch"], "data": r["fault"]["data"],
            "lint_alarms": sorted(alarms["lint"]), "doctor_alarms": sorted(alarms["doctor"]),
            "alarm_messages": [{"source": f["source"], "code": f["code"], "severity": f["severity"],
                                "step": f["step"], "where": f["where"], "message": f["message"]}
                               for f in r["findings"] if f["severity"] in ALARM],
            "info": sorted({f["code"] for f in r["findings"] if f["severity"] == "info"}),
            "resolved": sorted({f["code"] for f in r["findings"]
                                if f["severity"] not in ALARM and f.get("original_severity") in ALARM}),
            "lint_crashed": r.get("lint_crashed"),
            "steps": r.get("plain", {}).get("steps"),
            "effect_ok": r["effect"]["ok"] if r["trained"] else None,
            "effect_reason": r.get("effect", {}).get("reason", ""),
            "first_loss": r.get("plain", {}).get("first_loss"), "last_loss": r.get("plain", {}).get("last_loss"),
            "metrics": r.get("plain", {}).get("metrics", {}),
            "doctor_crashed": doctor.get("crashed"), "weights_identical": doctor.get("weights_identical"),
            "step_ratio": paired.get("median_ratio"), "mean_step_ratio": paired.get("mean_ratio"),
            "extra_us": paired.get("extra_us"), "own_step_ratio": _own_step_ratio(r),
            "paired_failed": paired.get("failed"), "rss_ratio": _ratio(r, "doctor"),
            "rss_same_process_ratio": _ratio(r, "doctor", "rss_same_process_mb"),
            "rss_mb": r.get("rss_mb", {}), "rss_failed": r.get("rss_failed"),
            "run_ratio": _run_ratio(r), "run_s": r.get("run_s", {}),
            "internal_errors": [f["message"] for f in r["findings"] if f["code"] == "MSD001"],
            "process_s": r["process_s"],
        })
    valid = [row for row in rows if "failed" not in row]
    trained = [row for row in valid if row["trained"]]
    ratios = [row["step_ratio"] for row in trained if row["step_ratio"]]
    means = [row["mean_step_ratio"] for row in trained if row["mean_step_ratio"]]
    rss = [row["rss_ratio"] for row in trained if row["rss_ratio"]]
    rss_same = [row["rss_same_process_ratio"] for row in trained if row["rss_same_process_ratio"]]
    runs = [row["run_ratio"] for row in trained if row["run_ratio"]]
    own = [row["own_step_ratio"] for row in trained if row.get("own_step_ratio")]
    return {"rows": rows, "totals": {
        "programs": len(rows), "trained": len(trained), "linted_only": len(valid) - len(trained),
        "architectures": len({row["arch"] for row in valid}),
        "failed_to_run": [row["name"] for row in rows if "failed" in row],
        "with_alarms": [row["name"] for row in valid if row["lint_alarms"] or row["doctor_alarms"]],
        "lint_alarms": sum(len(row["lint_alarms"]) for row in valid),
        "doctor_alarms": sum(len(row["doctor_alarms"]) for row in valid),
        "effect_failures": [row["name"] for row in trained if not row["effect_ok"]],
        "crashes": [row["name"] for row in valid if row["doctor_crashed"] or row["lint_crashed"]],
        "internal_errors": [row["name"] for row in valid if row["internal_errors"]],
        "weights_changed": [row["name"] for row in trained if row["weights_identical"] is False],
        "weights_not_reproducible": [row["name"] for row in trained if row["weights_identical"] is None],
        "median_step_ratio": statistics.median(ratios) if ratios else None,
        "max_step_ratio": max(ratios) if ratios else None,
        "median_mean_step_ratio": statistics.median(means) if means else None,
        "max_mean_step_ratio": max(means) if means else None,
        "median_own_step_ratio": statistics.median(own) if own else None,
        "max_own_step_ratio": max(own) if own else None,
        "median_rss_ratio": statistics.median(rss) if rss else None,
        "max_rss_ratio": max(rss) if rss else None,
        "rss_not_measured": [row["name"] for row in trained if not row["rss_ratio"]],
        "median_rss_same_process_ratio": statistics.median(rss_same) if rss_same else None,
        "max_rss_same_process_ratio": max(rss_same) if rss_same else None,
        "median_run_ratio": statistics.median(runs) if runs else None,
        "max_run_ratio": max(runs) if runs else None,
    }}


# --- output ----------------------------------------------------------------------------------


def _weights(value: bool | None) -> str:
    return {True: "identical", False: "CHANGED", None: "n/a"}[value]


def _cell(text: str) -> str:
    """``text`` inside a Markdown table cell: its pipes escaped (``|g|`` stays readable)."""
    return text.replace("|", "\\|")


def markdown(scored: dict[str, Any], meta: dict[str, Any]) -> str:
    t = scored["totals"]
    lines = [
        REALWORLD_SECTION[0],
        "## Real-code corpus",
        "",
        "Generated by `python scripts/bench_realworld.py --write-docs` (this section only); notes in",
        "`docs/benchmark-notes.md`.",
        "",
        f"Run of {meta['date']} on {meta['machine']}: {t['programs']} healthy models ({t['architectures']} "
        f"architectures) from maintained MindSpore model libraries and `mindspore.nn`, in {meta['seconds']:.0f} s "
        f"with {meta['jobs']} parallel job(s). Every model is linted (`lint(net, loss_fn=, optimizer=, "
        f"sample_inputs=)`); {t['trained']} are also trained with their library's recipe, plain and under "
        "`Doctor()` at its defaults (with the eval split where there is one). Only warning and error findings count.",
        "",
        "| measure | value | target |",
        "|---|---|---|",
        f"| models with a warning/error finding | {len(t['with_alarms'])}/{t['programs']} | 0 |",
        f"| warning/error codes from lint / from training | {t['lint_alarms']} / {t['doctor_alarms']} | 0 / 0 |",
        f"| effect checks failed (model did not learn) | {len(t['effect_failures'])} | 0 |",
        f"| lint or Doctor crashed / MSD001 internal errors | {len(t['crashes'])} / {len(t['internal_errors'])} | 0 / 0 |",
        f"| final weights changed by the Doctor | {len(t['weights_changed'])} "
        f"(not reproducible without it: {len(t['weights_not_reproducible'])}) | 0 |",
        f"| Doctor / plain step time, paired, median (max) over trained models | {number(t['median_step_ratio'])} "
        f"({number(t['max_step_ratio'])}) | |",
        f"| the same, mean step (probe steps included), median (max) over trained models | "
        f"{number(t.get('median_mean_step_ratio'))} ({number(t.get('max_mean_step_ratio'))}) | 1.03 (1.05) |",
        f"| the Doctor's extra time per step (the same paired mean) over the program's own plain step, median (max) "
        f"| {number(t.get('median_own_step_ratio'))} ({number(t.get('max_own_step_ratio'))}) | |",
        f"| Doctor / plain whole training call (evaluations, checks, report included), median (max), fresh "
        f"processes | {number(t.get('median_run_ratio'))} ({number(t.get('max_run_ratio'))}) | |",
        f"| Doctor / plain peak RSS, median (max), fresh processes | {number(t['median_rss_ratio'])} "
        f"({number(t['max_rss_ratio'])}) | 1.10 |",
        f"| the same, Doctor run after the plain run in one process (upper bound) | "
        f"{number(t['median_rss_same_process_ratio'])} ({number(t['max_rss_same_process_ratio'])}) | |",
        "",
    ]
    if t["failed_to_run"]:
        lines += [f"Programs that did not produce a result: {', '.join(t['failed_to_run'])}.", ""]
    lines += ["| model | library | covers | steps | lint alarms | training alarms | resolved by the end | effect | "
              "step ratio | mean step ratio | extra us/step | own-step ratio | run ratio | RSS ratio | weights |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in scored["rows"]:
        if "failed" in row:
            lines.append(f"| {row['name']} | did not run: {row['failed']} | | | | | | | | | | | | | |")
            continue
        effect = "-" if row["effect_ok"] is None else "ok" if row["effect_ok"] else "FAILED"
        lines.append(f"| {row['name']}{' ⚡' if row['fast'] else ''} | {row['library'].split(' (')[0]} | "
                     f"{', '.join(row['covers'])} | {row['steps'] or 'lint only'} | {code_list(row['lint_alarms'])} | "
                     f"{code_list(row['doctor_alarms']) if row['trained'] else '-'} | "
                     f"{code_list(row['resolved'])} | {effect} | "
                     f"{number(row['step_ratio'])} | {number(row.get('mean_step_ratio'))} | "
                     f"{'-' if row.get('extra_us') is None else format(row['extra_us'], '.0f')} | "
                     f"{number(row.get('own_step_ratio'))} | "
                     f"{number(row.get('run_ratio'))} | {number(row['rss_ratio'])} | "
                     f"{_weights(row['weights_identical']) if row['trained'] else '-'} |")
    alarms = [(row["name"], a) for row in scored["rows"] if "failed" not in row for a in row["alarm_messages"]]
    if alarms:
        lines += ["", "| model | source | code | message |", "|---|---|---|---|"]
        lines += [f"| {name} | {a['source']} | {a['code']} | {_cell(a['message'])} |" for name, a in alarms]
        lines += ["", "Why each remaining finding is a real problem: `docs/benchmark-notes.md`, \"What remains\"."]
    lines += ["", "⚡ = in the CI subset (`--fast`, `tests/test_realworld.py`). Step ratio: median Doctor step over the",
              "median plain step, both stepped in alternating blocks of 10 in one process (`scripts/bench_overhead.py`'s",
              f"paired timing), over the program's own run or its first {PAIRED_STEPS} steps, the compiling blocks left",
              "out; mean step ratio: the same with mean steps, the probe steps (one in 50) included. Both are the",
              f"median of {PAIRED_ROUNDS} such rounds on fresh copies (fewer where the rounds passed {PAIRED_ROUNDS_S:.0f} s:",
              f"the PyNative LSTM's one round takes ~140 s; up to {PAIRED_ROUNDS_MAX} while they took under "
              f"{PAIRED_MORE_S:.0f} s: the fast",
              "programs); one round moved by 0.05-0.15 between runs. Both copies run the same loop (`Model.train`'s",
              "step bookkeeping, the hooks' timers): only the Doctor's hooks differ. Extra us/step:",
              "the Doctor's mean step less the plain one in those rounds (median), probe steps included; own-step",
              "ratio: that over the program's own plain step (its median step in its plain run, timed between the",
              "step callbacks of its own loop, the data pipeline's threads running beside it: a 0.5 ms MLP step",
              "in the paired blocks is ~2 ms there), the ratio its user meets. Run ratio: the",
              "whole training call (`Model.train` with the Doctor's checks before the first step, its evaluations",
              "on the eval split at each epoch end and its end-of-run report) in the",
              "RSS ratio's two fresh processes, Doctor over plain; one run each, so good to ~10-20 % on this machine.",
              "RSS ratio: peak RSS (`ru_maxrss`) of a fresh process that trains the model once under",
              "`Doctor()` over that of a fresh process that trains it once plain, as a user runs one or the other",
              "(`python -m benchmarks.realworld.runner NAME --rss plain|doctor`; VmHWM is kept beside it in the",
              "`--json` output). RSS is per process, so parallel jobs do not inflate it. The upper-bound row measures",
              "the Doctor run in the process that has already trained plain, whose compiled graph and MindSpore",
              "caches it still holds. Weights: final weights of the plain",
              "and the Doctor run compared bit for bit (n/a: the program does not repeat itself even without the",
              "Doctor, MindSpore's CPU Dropout). Resolved by the end: transient training findings (a warm-up",
              "plateau or spike) that the Doctor logged while training and reported as resolved (info) at the end.",
              REALWORLD_SECTION[1]]
    return "\n".join(lines)


def print_summary(scored: dict[str, Any]) -> None:
    t = scored["totals"]
    width = max((len(r["name"]) for r in scored["rows"]), default=10)
    print(f"{'model':<{width}}  ok  steps  lint-alarms  training-alarms  effect  step-ratio (mean)  rss-ratio  weights"
          "  (rss-ratio: fresh processes; same process in brackets)")
    for row in scored["rows"]:
        if "failed" in row:
            print(f"{row['name']:<{width}}  DID NOT RUN ({row['failed']})", *row["log_tail"][-5:], sep="\n    ")
            continue
        bad = row["lint_alarms"] or row["doctor_alarms"] or row["effect_ok"] is False or row["lint_crashed"]
        effect = "-" if row["effect_ok"] is None else "ok" if row["effect_ok"] else "FAILED"
        print(f"{row['name']:<{width}}  {'!!' if bad else 'ok'}  {row['steps'] or '-':>5}  "
              f"{code_list(row['lint_alarms']):<11}  {code_list(row['doctor_alarms']):<15}  {effect:<6}  "
              f"{number(row['step_ratio']):>10} ({number(row['mean_step_ratio'])})  {number(row['rss_ratio']):>9}  "
              f"{_weights(row['weights_identical']) if row['trained'] else '-'}  ({row['process_s']:.0f} s)"
              + (f"  [same process {number(row['rss_same_process_ratio'])}]" if row["rss_same_process_ratio"] else ""))
        if row["rss_mb"]:
            print("    peak RSS (MB), fresh processes: " + ", ".join(
                f"{key} {value:.0f}" for key, value in row["rss_mb"].items()))
        if row.get("run_s"):
            print("    whole training call (s), fresh processes: " + ", ".join(
                f"{key} {value:.1f}" for key, value in row["run_s"].items()) + f" (ratio {number(row['run_ratio'])})")
        if row["rss_failed"]:
            print(f"    RSS NOT MEASURED: {row['rss_failed']}")
        for a in row["alarm_messages"]:
            print(f"    {a['source']} {a['code']} {a['severity']} @{a['step']} {a['where']}: {a['message'][:200]}")
        if row["effect_ok"] is False:
            print(f"    EFFECT FAILED: {row['effect_reason'][:200]}")
        if row["lint_crashed"] or row["doctor_crashed"]:
            print(f"    CRASHED: {row['lint_crashed'] or row['doctor_crashed']}")
    print(f"\n{t['programs']} models ({t['trained']} trained, {t['linted_only']} linted only, {t['architectures']} "
          f"architectures): did not run {len(t['failed_to_run'])}, with alarms {len(t['with_alarms'])}, "
          f"effect failures {len(t['effect_failures'])}, "
          f"crashes {len(t['crashes'])}, MSD001 {len(t['internal_errors'])}, weights changed "
          f"{len(t['weights_changed'])}, median step ratio {number(t['median_step_ratio'])} (mean steps: median "
          f"{number(t.get('median_mean_step_ratio'))}, max {number(t.get('max_mean_step_ratio'))}), "
          f"median run ratio {number(t.get('median_run_ratio'))} (max {number(t.get('max_run_ratio'))}), "
          f"median RSS ratio {number(t['median_rss_ratio'])} (max {number(t['max_rss_ratio'])}; same process "
          f"{number(t['median_rss_same_process_ratio'])})")
