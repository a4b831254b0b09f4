#!/usr/bin/env python
"""Lint every model of a model library (mindcv) with its recipes: the widest test of the static rules' precision.

Each model is built (`num_classes=10`, no pretrained weights) and linted twice, with mindcv's SGD recipe
(Momentum, lr 0.1, weight decay 1e-4) and its transformer recipe (AdamW, lr 1e-3, weight decay 0.05), both
with label-smoothed cross-entropy, warm-up + cosine schedule and decay filtered off norm/bias parameters
(`benchmarks/realworld/corpus.py: mindcv_recipe`). One process per model, so a model MindSpore cannot build
fails alone; results are kept per model in --out, and a rerun skips those already done.

    python scripts/lint_model_zoo.py --out /tmp/zoo            # all of mindcv: about an hour on 2 cores
    python scripts/lint_model_zoo.py --out /tmp/zoo resnet18 volo_d1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ (nothing heavy is imported at module level)

from benchmarks.realworld.model_zoo import SUMMARY, lint_one, summarize  # noqa: E402

from mindspore_doctor._io import atomic_write_text  # noqa: E402


def run_all(names: list[str], out: Path, timeout: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", GLOG_v="3")
    for name in names:
        path = out / f"{name}.json"
        if path.exists():
            continue
        started = time.perf_counter()
        try:
            child = subprocess.run([sys.executable, __file__, "--child", name, "--out", str(out)], env=env,
                                   capture_output=True, text=True, timeout=timeout)
            if child.returncode:
                failure = (child.stderr.strip().splitlines() or [f"exit {child.returncode}"])[-1]
                path.write_text(json.dumps({"model": name, "failed": failure[:500]}))
        except subprocess.TimeoutExpired:
            path.write_text(json.dumps({"model": name, "failed": f"timed out after {timeout:.0f} s"}))
        print(f"{name} {time.perf_counter() - started:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: every model mindcv lists)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the per-model results")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per model")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        atomic_write_text(args.out / f"{args.child}.json", json.dumps(lint_one(args.child), indent=1))
        return 0
    if args.models:
        names = args.models
    else:
        import mindcv

        names = list(mindcv.models.list_models())
    run_all(names, args.out, args.timeout)
    summary = summarize(args.out)
    print(f"{summary['models']} models linted, {len(summary['failed'])} failed (build or lint), "
          f"{len(summary['with_alarms'])} with a warning/error")
    for model, why in summary["failed"].items():
        print(f"  failed: {model}: {why}")
    for alarm in summary["alarms"]:
        print(f"  {alarm['model']} {alarm['code']} `{alarm['where']}` ({', '.join(alarm['recipes'])}): "
              f"{alarm['message']}")
    (args.out / SUMMARY).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
