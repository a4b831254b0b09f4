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
RECIPES = {"momentum": {"opt": "momentum", "lr": 0.1, "weight_decay": 1e-4},
           "adamw": {"opt": "adamw", "lr": 1e-3, "weight_decay": 0.05}}
SUMMARY = "summary.json"


def lint_one(name: str) -> dict:
    """Build ``name`` and lint it under each recipe (runs in the child process)."""
    import mindcv
    import mindspore as ms

    from benchmarks.realworld import corpus
    from mindspore_doctor import lint

    ms.set_seed(0)
    started = time.perf_counter()
    net = mindcv.create_model(name, num_classes=10, pretrained=False)
    result = {"model": name, "build_s": time.perf_counter() - started,
              "parameters": int(sum(p.size for p in net.get_parameters())), "runs": {}}
    for recipe_name, options in RECIPES.items():
        recipe = corpus.mindcv_recipe(net, 100, 10, **options)
        started = time.perf_counter()
        report = lint(net, loss_fn=recipe.loss_fn, optimizer=recipe.optimizer)
        result["runs"][recipe_name] = {
            "lint_s": time.perf_counter() - started,
            "findings": [{"code": f.code, "severity": f.severity.value, "where": f.where, "message": f.message}
                         for f in report.findings]}
    return result


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


def summarize(out: Path) -> dict:
    """Models linted, those that did not build, and every distinct warning/error with the recipes it came under."""
    results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json")) if p.name != SUMMARY]
    failed = {r["model"]: r["failed"] for r in results if "failed" in r}
    alarms: dict[tuple, list[str]] = {}
    for r in results:
        for recipe_name, run in r.get("runs", {}).items():
            for f in run["findings"]:
                if f["severity"] in ("warning", "error"):
                    alarms.setdefault((r["model"], f["code"], f["where"], f["message"]), []).append(recipe_name)
    return {"models": len(results), "failed": failed,
            "with_alarms": sorted({model for model, *_ in alarms}),
            "alarms": [{"model": m, "code": c, "where": w, "message": msg, "recipes": recipes}
                       for (m, c, w, msg), recipes in alarms.items()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="model names (default: every model mindcv lists)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the per-model results")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per model")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        path = args.out / f"{args.child}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(lint_one(args.child), indent=1))
        tmp.replace(path)
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
