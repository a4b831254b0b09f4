#!/usr/bin/env python
"""The fault benchmark: run every program in benchmarks/faults/programs with and without the Doctor, score it.

    python scripts/bench_faults.py                 # everything, prints the tables
    python scripts/bench_faults.py --fast          # the CI subset (Fault(fast=True))
    python scripts/bench_faults.py --write-docs    # also rewrite docs/benchmark.md from this run

How each program runs and is scored: benchmarks/faults/bench.py, which this command line drives.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ (nothing heavy is imported at module level)

from benchmarks.cpu import pin_cpu_isa  # noqa: E402
from benchmarks.faults.bench import discover, markdown, print_summary, run_one, score  # noqa: E402
from benchmarks.report import DOC, run_meta, write_doc, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    pin_cpu_isa()
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
    meta = run_meta(seconds, args.jobs)
    if args.json:
        write_json(args.json, meta, scored)
    if args.write_docs:
        write_doc(fault_tables=markdown(scored, meta))
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{len(programs)} programs in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
