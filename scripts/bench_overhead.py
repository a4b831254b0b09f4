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
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("plain", "doctor", "summary")
MODELS = {"lenet": dict(steps=200, batch=32, shape=(1, 32, 32)), "resnet": dict(steps=60, batch=16, shape=(3, 16, 16))}
WARMUP = 12


def _arrays(model_name: str, steps: int) -> tuple:
    import numpy as np

    spec = MODELS[model_name]
    rng = np.random.default_rng(0)
    n = steps * spec["batch"]
    return rng.standard_normal((n, *spec["shape"])).astype(np.float32), rng.integers(0, 10, n).astype(np.int32)


def _dataset(x: Any, y: Any, batch: int) -> Any:
    import mindspore.dataset as ds

    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(batch)


def _model(model_name: str) -> Any:
    """A fresh seeded ``Model`` of the project's reference architecture, as a user builds it."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.train import Model

    sys.path.insert(0, str(ROOT / "tests"))
    from zoo import BasicBlock, LeNet5, ResNet  # the project's reference architectures

    ms.set_seed(0)
    net = LeNet5() if model_name == "lenet" else ResNet(BasicBlock, [1, 1, 1, 1], cifar_stem=True)
    return Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                 nn.Momentum(net.trainable_params(), 0.01, 0.9))


def _worker(model_name: str, variant: str, reports: bool) -> dict:
    import resource

    import mindspore as ms
    import numpy as np
    from mindspore.train import Callback, SummaryCollector

    from mindspore_doctor import Doctor

    ms.set_context(mode=ms.GRAPH_MODE)
    spec = MODELS[model_name]
    model = _model(model_name)
    data = _dataset(*_arrays(model_name, spec["steps"]), spec["batch"])

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
        model.train(1, data, callbacks=[*callbacks, clock], dataset_sink_mode=False)
    steps = np.diff(clock.times[WARMUP:])
    return {"median_ms": float(np.median(steps) * 1e3), "mean_ms": float(np.mean(steps) * 1e3),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _paired(model_name: str, block: int) -> dict:
    """The reference model's plain and Doctor steps, paired (see :func:`paired_timing`)."""
    import mindspore as ms
    from mindspore import Tensor

    ms.set_context(mode=ms.GRAPH_MODE)
    spec = MODELS[model_name]
    x, y = _arrays(model_name, 2 * spec["steps"])
    batches = [(Tensor(x[i:i + spec["batch"]]), Tensor(y[i:i + spec["batch"]]))
               for i in range(0, len(x), spec["batch"])]
    return paired_timing(lambda: _model(model_name), batches, _dataset(x, y, spec["batch"]), block)


def paired_timing(build: Callable[[], Any], batches: list[tuple], dataset: Any, block: int) -> dict:
    """Plain and Doctor steps alternated in blocks of ``block`` steps in ONE process.

    ``build()`` returns a fresh ``Model``; both copies step through ``batches`` (one step each), the Doctor's
    copy with ``dataset`` as its training set. Between processes, the same plain run varies by 10-30 % on this
    machine (thread placement, other jobs), more than the Doctor's cost; two identical models stepped in
    alternation see the same conditions. The Doctor gets exactly the callback calls ``Model.train`` makes
    (``on_train_begin``, then ``on_train_step_begin``/``_end`` around each step), so its whole per-step cost is
    timed: probes, the loss read, the rules on probe steps. Each block ends with a read of its last loss (the
    device work is done).
    """
    from mindspore.train.callback import RunContext, _InternalCallbackParam

    from mindspore_doctor import Doctor

    steps = len(batches)

    def fresh() -> Any:
        model = build()
        model._train_network.set_train()  # pylint: disable=protected-access (what Model.train does)
        return model

    plain, doctored = fresh(), fresh()
    cb = _InternalCallbackParam()
    cb.train_network, cb.network = doctored._train_network, doctored._network  # pylint: disable=protected-access
    cb.loss_fn, cb.optimizer = doctored._loss_fn, doctored._optimizer  # pylint: disable=protected-access
    cb.train_dataset = dataset
    cb.epoch_num, cb.batch_num, cb.cur_epoch_num, cb.cur_step_num = 1, steps, 1, 0
    cb.mode, cb.dataset_sink_mode, cb.parallel_mode, cb.device_number = "train", False, "stand_alone", 1
    context = RunContext(cb)
    doctor = Doctor()
    doctor.on_train_begin(context)

    def plain_block(part: list) -> None:
        for inputs in part:
            out = plain._train_network(*inputs)  # pylint: disable=protected-access
        out.asnumpy()

    def doctor_block(part: list) -> None:
        for inputs in part:
            cb.cur_step_num += 1
            cb.train_dataset_element = inputs
            doctor.on_train_step_begin(context)
            cb.net_outputs = doctored._train_network(*inputs)  # pylint: disable=protected-access
            doctor.on_train_step_end(context)
        cb.net_outputs.asnumpy()

    runners = {"plain": plain_block, "doctor": doctor_block}
    per_step: dict[str, list[float]] = {"plain": [], "doctor": []}
    for number, start in enumerate(range(0, steps, block)):
        part = batches[start:start + block]
        for variant in (("plain", "doctor") if number % 2 == 0 else ("doctor", "plain")):
            began = time.perf_counter()
            runners[variant](part)
            if number >= WARMUP // block + 1:  # the first blocks compile
                per_step[variant].append((time.perf_counter() - began) / len(part))
    doctor.on_train_epoch_end(context)
    doctor.on_train_end(context)
    median = {v: statistics.median(t) for v, t in per_step.items()}
    mean = {v: statistics.fmean(t) for v, t in per_step.items()}
    return {"steps": steps, "block": block, "plain_median_ms": median["plain"] * 1e3,
            "doctor_median_ms": median["doctor"] * 1e3, "median_ratio": median["doctor"] / median["plain"],
            "mean_ratio": mean["doctor"] / mean["plain"], "probe_steps": len(doctor.history.probed())}


def _in_fresh_process(*arguments: str) -> dict:
    """This script's worker in its own process (its own peak RSS); the JSON line it prints last."""
    out = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True, check=True,
                         timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run(model_name: str, variant: str, reports: bool) -> dict:
    return _in_fresh_process("--worker", model_name, variant, *(["--reports"] if reports else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="lenet,resnet")
    parser.add_argument("--reports", action="store_true",
                        help="Doctor(summary_dir=...): also write the JSON/HTML/MindInsight reports")
    parser.add_argument("--paired-block", type=int, default=10,
                        help="steps per block in the paired, one-process step-time run (0: skip it)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--paired-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*args.worker, args.reports)))
        return 0
    if args.paired_worker:
        print(json.dumps(_paired(args.paired_worker, args.paired_block)))
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
    if args.paired_block:
        print("\nPaired, one process per model: plain and Doctor steps alternated in blocks of "
              f"{args.paired_block}, {args.rounds} round(s)")
        print("| model | round | plain median step ms | Doctor median step ms | median x plain | mean x plain |")
        print("|---|---|---|---|---|---|")
        for model_name in models:
            for r in range(args.rounds):
                row = _in_fresh_process("--paired-worker", model_name, "--paired-block", str(args.paired_block))
                print(f"| {model_name} | {r + 1} | {row['plain_median_ms']:.2f} | {row['doctor_median_ms']:.2f} "
                      f"| {row['median_ratio']:.3f} | {row['mean_ratio']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
