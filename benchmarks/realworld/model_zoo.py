"""Lint a model of a model library (mindcv) under its recipes, and sum up the results of a whole library
(``scripts/lint_model_zoo.py`` is the command line: one process per model)."""
from __future__ import annotations

import json
import time
from pathlib import Path

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
