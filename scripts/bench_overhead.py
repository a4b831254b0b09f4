#!/usr/bin/env python
"""Overhead of the Doctor: plain training vs ``Doctor()`` vs ``SummaryCollector``, CPU, GRAPH mode.

Each (model, variant) run is a fresh subprocess, so its peak RSS
(``ru_maxrss``) is its own; the variants are interleaved and their order
rotates every round, so background load hits all three alike. Step time is
measured between consecutive ``on_train_step_end`` calls of a timing callback
placed last (so it includes every other callback's work), after a warm-up that
covers graph compilation. "median" is the median step; "mean" amortises the
Doctor's probe steps (one in ``probe_every``) and is the honest overhead.
The Doctor runs at its defaults, ``Doctor()`` (no ``summary_dir``: no report
files); ``--reports`` gives it a ``summary_dir`` so it also writes the
JSON/HTML/MindInsight reports.

    .venv/bin/python scripts/bench_overhead.py            # about 3-6 minutes on 2 busy cores
    .venv/bin/python scripts/bench_overhead.py --rounds 1 --models lenet
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("plain", "doctor", "summary")
MODELS = {"lenet": dict(steps=200, batch=32, shape=(1, 32, 32)), "resnet": dict(steps=60, batch=16, shape=(3, 16, 16))}
WARMUP = 12


def _worker(model_name: str, variant: str, reports: bool) -> dict:
    import resource

    import mindspore as ms
    import mindspore.dataset as ds
    import numpy as np
    from mindspore import nn
    from mindspore.train import Callback, Model, SummaryCollector

    sys.path.insert(0, str(ROOT / "tests"))
    from zoo import BasicBlock, LeNet5, ResNet  # the project's reference architectures

    from mindspore_doctor import Doctor

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    spec = MODELS[model_name]
    net = LeNet5() if model_name == "lenet" else ResNet(BasicBlock, [1, 1, 1, 1], cifar_stem=True)
    rng = np.random.default_rng(0)
    n = spec["steps"] * spec["batch"]
    data = ds.NumpySlicesDataset(
        {"x": rng.standard_normal((n, *spec["shape"])).astype(np.float32),
         "y": rng.integers(0, 10, n).astype(np.int32)}, shuffle=False).batch(spec["batch"])

    class StepClock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_step_end(self, run_context) -> None:
            self.times.append(time.perf_counter())

    clock = StepClock()
    callbacks = []
    with tempfile.TemporaryDirectory() as tmp:
        if variant == "doctor":
            callbacks.append(Doctor(summary_dir=tmp) if reports else Doctor())
        elif variant == "summary":
            callbacks.append(SummaryCollector(tmp))
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net.trainable_params(), 0.01, 0.9))
        model.train(1, data, callbacks=[*callbacks, clock], dataset_sink_mode=False)
    steps = np.diff(clock.times[WARMUP:])
    return {"median_ms": float(np.median(steps) * 1e3), "mean_ms": float(np.mean(steps) * 1e3),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _run(model_name: str, variant: str, reports: bool) -> dict:
    command = [sys.executable, __file__, "--worker", model_name, variant] + (["--reports"] if reports else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="lenet,resnet")
    parser.add_argument("--reports", action="store_true",
                        help="Doctor(summary_dir=...): also write the JSON/HTML/MindInsight reports")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*args.worker, args.reports)))
        return 0
    models = [m for m in args.models.split(",") if m]
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for model_name in models:
            order = VARIANTS[r % 3:] + VARIANTS[: r % 3]  # rotate who runs first
            for variant in order:
                results.setdefault((model_name, variant), []).append(_run(model_name, variant, args.reports))
                print(f"round {r + 1}/{args.rounds} {model_name:6} {variant:7} {results[(model_name, variant)][-1]}",
                      file=sys.stderr)
    print("| model | variant | median step ms | x plain | mean step ms | x plain | peak RSS MB | x plain |")
    print("|---|---|---|---|---|---|---|---|")
    for model_name in models:
        base = {k: statistics.median(r[k] for r in results[(model_name, "plain")])
                for k in ("median_ms", "mean_ms", "peak_rss_mb")}
        for variant in VARIANTS:
            row = {k: statistics.median(r[k] for r in results[(model_name, variant)]) for k in base}
            print(f"| {model_name} | {variant} | {row['median_ms']:.2f} | {row['median_ms'] / base['median_ms']:.3f} "
                  f"| {row['mean_ms']:.2f} | {row['mean_ms'] / base['mean_ms']:.3f} "
                  f"| {row['peak_rss_mb']:.0f} | {row['peak_rss_mb'] / base['peak_rss_mb']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
