#!/usr/bin/env python
"""The real-code corpus: lint and train healthy library models with and without the Doctor; the bar is 0 alarms.

    python scripts/bench_realworld.py --jobs 1           # everything (about 45-80 min on 2 busy cores; each
                                                         # trained program also runs twice more for the RSS)
    python scripts/bench_realworld.py --fast             # the CI subset (FAULT(fast=True)), no paired timing
    python scripts/bench_realworld.py --only nn_mlp_wine mindcv_convnext_digits --json out.json
    python scripts/bench_realworld.py --write-docs       # also rewrite the corpus section of docs/benchmark.md

How each program runs and is scored: benchmarks/realworld/bench.py, which this command line drives.
"""
from __future__ import annotations

import argparse
import json
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
from benchmarks.realworld.bench import PAIRED_STEPS, discover, markdown, print_summary, run_one, score  # noqa: E402
from benchmarks.report import DOC, run_meta, write_doc, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    pin_cpu_isa()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="only the CI subset (and no paired timing)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these programs")
    parser.add_argument("--jobs", type=int, default=1, help="parallel programs (default 1: they are heavy)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per program (YOLOv8-n took 1991 s "
                        "alone on a slow 2-core machine)")
    parser.add_argument("--paired-steps", type=int, help="steps per variant in the paired timing, at most the "
                        f"program's own run (default {PAIRED_STEPS}; 0 with --fast)")
    parser.add_argument("--json", type=Path, help="write the scored results here")
    parser.add_argument("--write-docs", action="store_true", help=f"rewrite the corpus section of {DOC.relative_to(ROOT)}")
    parser.add_argument("--keep", type=Path, help="keep each program's raw result and log in this folder")
    parser.add_argument("--doctor-from", type=Path, metavar="CHECKOUT",
                        help="import mindspore_doctor from this checkout instead (e.g. the original main, to compare)")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="run nothing: rewrite the docs section from a --json file of an earlier run")
    args = parser.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        write_doc(realworld=markdown(saved, saved["meta"]))
        return 0

    names = discover(args.only, args.fast)
    paired_steps = args.paired_steps if args.paired_steps is not None else (0 if args.fast else PAIRED_STEPS)
    workdir = Path(tempfile.mkdtemp(prefix="bench_realworld_")) if args.keep is None else args.keep
    workdir.mkdir(parents=True, exist_ok=True)
    doctor_path = None
    if args.doctor_from:  # a folder holding only that checkout's package, ahead of this tree on the path
        doctor_path = workdir / "doctor_from"
        doctor_path.mkdir(exist_ok=True)
        link = doctor_path / "mindspore_doctor"
        if not link.exists():
            link.symlink_to(args.doctor_from.resolve() / "mindspore_doctor")
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda n: run_one(n, workdir, args.timeout, paired_steps, doctor_path), names))
    seconds = time.perf_counter() - started
    scored = score(results)
    print_summary(scored)
    meta = run_meta(seconds, args.jobs, doctor_from=str(args.doctor_from) if args.doctor_from else None)
    if args.json:
        write_json(args.json, meta, scored)
    if args.write_docs:
        write_doc(realworld=markdown(scored, meta))
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{len(names)} programs in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
