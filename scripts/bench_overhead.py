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
JSON/HTML/MindInsight reports. ``--loop custom`` measures MindSpore's
quick-start loop (``value_and_grad`` + ``@ms.jit``) instead of ``Model.train``,
with ``doctor.watch`` (``SummaryCollector`` needs ``Model.train``: no third
variant there); ``--loss-read step|deferred`` sets ``DoctorConfig.loss_read``.
``--exports`` adds Doctors with a ``summary_dir`` to the paired run (the JSON
reports alone; with the MindInsight files; with the TensorBoard files) and prints
each one's cost in us per step: the time spent in its callback hooks, epoch end
included, minus that of the variant without it (the step itself varies by more
than the exports cost). The paired run also splits the Doctor's extra cost per step, in us, on probe and on
non-probe steps, into host (the time inside its step hooks, or ``run.step``, each timed) and graph (the rest:
Doctor block minus plain block minus host, see ``benchmarks.overhead.step_split``); ``--models mlp`` is issue
26's fast step (a 64-128-64-10 MLP, batch 32), where that fixed cost shows. ``--long-run NAME:EPOCHS`` times
a real-code corpus program (``benchmarks/realworld/programs``) trained that many epochs with its eval split given
to the Doctor, the whole training call in a fresh process per variant: plain, ``Doctor()``, ``Doctor(eval_budget=
None)`` (an evaluation every epoch) and ``SummaryCollector``, where the evaluations' share of a long run shows.

    .venv/bin/python scripts/bench_overhead.py            # about 3-6 minutes on 2 busy cores
    .venv/bin/python scripts/bench_overhead.py --rounds 1 --models lenet
    .venv/bin/python scripts/bench_overhead.py --loop custom --loss-read deferred
    .venv/bin/python scripts/bench_overhead.py --rounds 3 --exports --paired-only
    .venv/bin/python scripts/bench_overhead.py --models mlp --rounds 1 --paired-only [--loop custom]
    .venv/bin/python scripts/bench_overhead.py --long-run nn_mlp_wine:200 --rounds 2
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # benchmarks/ (nothing heavy is imported at module level)

from benchmarks.cpu import pin_cpu_isa  # noqa: E402
from benchmarks.overhead import EXPORTS, WARMUP, paired_custom_timing, paired_timing  # noqa: E402

VARIANTS = ("plain", "doctor", "summary")
MODELS = {"lenet": dict(steps=200, batch=32, shape=(1, 32, 32)), "resnet": dict(steps=60, batch=16, shape=(3, 16, 16)),
          "mlp": dict(steps=1000, batch=32, shape=(64,))}
"""``mlp``: issue 26's fast step (a few ms on CPU), a 64-128-64-10 ReLU MLP, where the Doctor's fixed per-step
cost is not hidden by the step."""


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
    if model_name == "mlp":
        net = nn.SequentialCell(nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 64), nn.ReLU(), nn.Dense(64, 10))
    else:
        net = LeNet5() if model_name == "lenet" else ResNet(BasicBlock, [1, 1, 1, 1], cifar_stem=True)
    return Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                 nn.Momentum(net.trainable_params(), 0.01, 0.9))


def _functional(model_name: str) -> tuple[Any, Any, Any, Callable[[Any, Any], Any]]:
    """The same seeded network, loss and optimizer, with the quick-start loop's ``@ms.jit`` step."""
    from benchmarks.faults.kit import quick_start_step

    model = _model(model_name)
    net, loss_fn, optimizer = model._network, model._loss_fn, model._optimizer  # pylint: disable=protected-access
    net.set_train()
    return net, loss_fn, optimizer, quick_start_step(net, loss_fn, optimizer)


def _worker(model_name: str, variant: str, reports: bool, loop: str, loss_read: str) -> dict:
    import resource

    import mindspore as ms
    import numpy as np
    from mindspore.train import Callback, SummaryCollector

    from mindspore_doctor import Doctor

    ms.set_context(mode=ms.GRAPH_MODE)
    spec = MODELS[model_name]
    data = _dataset(*_arrays(model_name, spec["steps"]), spec["batch"])

    class StepClock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_step_end(self, run_context) -> None:
            self.times.append(time.perf_counter())

    clock = StepClock()
    callbacks = []
    with tempfile.TemporaryDirectory() as tmp:
        doctor = Doctor(summary_dir=tmp if reports else None, loss_read=loss_read)
        if loop == "custom":
            net, loss_fn, optimizer, step = _functional(model_name)
            watching = (doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=data, epochs=1)
                        if variant == "doctor" else contextlib.nullcontext())
            with watching as run:
                for x, y in data.create_tuple_iterator():
                    loss = step(x, y)
                    if run is not None:
                        run.step(loss, x, y)
                    clock.on_train_step_end(None)
        else:
            if variant == "doctor":
                callbacks.append(doctor)
            elif variant == "summary":
                callbacks.append(SummaryCollector(tmp))
            _model(model_name).train(1, data, callbacks=[*callbacks, clock], dataset_sink_mode=False)
    steps = np.diff(clock.times[WARMUP:])
    return {"median_ms": float(np.median(steps) * 1e3), "mean_ms": float(np.mean(steps) * 1e3),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _paired(model_name: str, block: int, loop: str, loss_read: str, exports: bool = False) -> dict:
    """The reference model's plain and Doctor steps, paired (see :func:`paired_timing`)."""
    import mindspore as ms
    from mindspore import Tensor

    ms.set_context(mode=ms.GRAPH_MODE)
    spec = MODELS[model_name]
    x, y = _arrays(model_name, 2 * spec["steps"])
    batches = [(Tensor(x[i:i + spec["batch"]]), Tensor(y[i:i + spec["batch"]]))
               for i in range(0, len(x), spec["batch"])]
    dataset = _dataset(x, y, spec["batch"])
    if loop == "custom":
        return paired_custom_timing(lambda: _functional(model_name), batches, dataset, block, loss_read)
    return paired_timing(lambda: _model(model_name), batches, dataset, block, loss_read,
                         exports=tuple(EXPORTS) if exports else ())


LONG_VARIANTS = {"plain": None, "doctor": {}, "doctor_every_epoch": {"eval_budget": None}, "summary": None}
"""``--long-run``'s variants: the Doctor's options of each Doctor variant."""


def _long_worker(spec: str, variant: str) -> dict:
    """One corpus program trained ``EPOCHS`` epochs (``NAME:EPOCHS``), plain, under a Doctor or SummaryCollector."""
    import dataclasses

    from mindspore.train import SummaryCollector

    from benchmarks.faults import runner as fault_runner
    from benchmarks.realworld import runner

    name, epochs = spec.split(":")
    module = runner.load(name)
    module.DATA = dataclasses.replace(module.DATA, epochs=int(epochs))
    fault_runner.seed_all(module.FAULT.mode)
    with tempfile.TemporaryDirectory() as tmp:
        callbacks: list[Any] = []
        doctor = None
        if variant == "summary":
            callbacks.append(SummaryCollector(tmp))
        elif LONG_VARIANTS[variant] is not None:
            from mindspore_doctor import Doctor

            options = runner._doctor_options(module)  # pylint: disable=protected-access (its eval split)
            doctor = Doctor(**{**options, **LONG_VARIANTS[variant]})
            callbacks.append(doctor)
        _, timing = fault_runner.run_timed(module, callbacks)
    evaluations = len(doctor.report.meta.get("evaluation", {}).get("records", [])) if doctor else None
    return {"wall_s": timing["wall_s"], "steps": timing["steps"], "evaluations": evaluations}


def _long_table(specs: list[str], rounds: int) -> None:
    """``--long-run``: the whole training call of each variant, fresh processes, order rotating per round."""
    variants = list(LONG_VARIANTS)
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(rounds):
        for spec in specs:
            for variant in variants[r % len(variants):] + variants[: r % len(variants)]:
                results.setdefault((spec, variant), []).append(_in_fresh_process("--long-worker", spec, variant))
                print(f"round {r + 1}/{rounds} {spec} {variant} {results[(spec, variant)][-1]}", file=sys.stderr)
    print("| program:epochs | steps | plain s | Doctor() s | x plain | evaluations | Doctor(eval_budget=None) s "
          "| x plain | evaluations | SummaryCollector s | x plain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in specs:
        wall = {v: statistics.median(x["wall_s"] for x in results[(spec, v)]) for v in variants}
        counts = {v: sorted({x["evaluations"] or 0 for x in results[(spec, v)]}) for v in variants}
        evals = {v: "-".join(str(n) for n in dict.fromkeys((c[0], c[-1]))) for v, c in counts.items()}
        print(f"| {spec} | {results[(spec, 'plain')][0]['steps']} | {wall['plain']:.2f} | {wall['doctor']:.2f} "
              f"| {wall['doctor'] / wall['plain']:.2f} | {evals['doctor']} | {wall['doctor_every_epoch']:.2f} "
              f"| {wall['doctor_every_epoch'] / wall['plain']:.2f} | {evals['doctor_every_epoch']} "
              f"| {wall['summary']:.2f} | {wall['summary'] / wall['plain']:.2f} |", flush=True)


def _in_fresh_process(*arguments: str) -> dict:
    """This script's worker in its own process (its own peak RSS); the JSON line it prints last."""
    out = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True, check=True,
                         timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run(model_name: str, variant: str, args: argparse.Namespace) -> dict:
    return _in_fresh_process("--worker", model_name, variant, *(["--reports"] if args.reports else []),
                             "--loop", args.loop, "--loss-read", args.loss_read)


def main(argv: list[str] | None = None) -> int:
    pin_cpu_isa()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="lenet,resnet")
    parser.add_argument("--reports", action="store_true",
                        help="Doctor(summary_dir=...): also write the JSON/HTML/MindInsight reports")
    parser.add_argument("--paired-block", type=int, default=10,
                        help="steps per block in the paired, one-process step-time run (0: skip it)")
    parser.add_argument("--loop", choices=("model", "custom"), default="model",
                        help="Model.train with the callback, or the quick-start loop with doctor.watch")
    parser.add_argument("--loss-read", choices=("auto", "step", "deferred"), default="auto",
                        help="DoctorConfig.loss_read for the Doctor's runs")
    parser.add_argument("--exports", action="store_true",
                        help="paired run: also Doctors writing the MindInsight / TensorBoard files; their us per step")
    parser.add_argument("--paired-only", action="store_true", help="skip the process-per-variant table")
    parser.add_argument("--long-run", default="",
                        help="NAME:EPOCHS[,NAME:EPOCHS]: corpus programs trained that long, whole-run times only")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--long-worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--paired-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(_worker(*args.worker, args.reports, args.loop, args.loss_read)))
        return 0
    if args.long_worker:
        print(json.dumps(_long_worker(*args.long_worker)))
        return 0
    if args.long_run:
        _long_table([spec for spec in args.long_run.split(",") if spec], args.rounds)
        return 0
    if args.paired_worker:
        print(json.dumps(_paired(args.paired_worker, args.paired_block, args.loop, args.loss_read, args.exports)))
        return 0
    if args.exports and args.loop != "model":
        parser.error("--exports times Model.train's callback (--loop model)")
    models = [m for m in args.models.split(",") if m]
    if not args.paired_only:
        _process_table(models, args)
    if args.paired_block:
        _paired_table(models, args)
    return 0


def _process_table(models: list[str], args: argparse.Namespace) -> None:
    """Each (model, variant) in its own process: step times and peak RSS."""
    variants = VARIANTS if args.loop == "model" else VARIANTS[:2]
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for model_name in models:
            order = variants[r % len(variants):] + variants[: r % len(variants)]  # rotate who runs first
            for variant in order:
                results.setdefault((model_name, variant), []).append(_run(model_name, variant, args))
                print(f"round {r + 1}/{args.rounds} {model_name:6} {variant:7} {results[(model_name, variant)][-1]}",
                      file=sys.stderr)
    print("| model | variant | median step ms | x plain | mean step ms | x plain | peak RSS MB | x plain |")
    print("|---|---|---|---|---|---|---|---|")
    for model_name in models:
        base = {k: statistics.median(r[k] for r in results[(model_name, "plain")])
                for k in ("median_ms", "mean_ms", "peak_rss_mb")}
        for variant in variants:
            row = {k: statistics.median(r[k] for r in results[(model_name, variant)]) for k in base}
            print(f"| {model_name} | {variant} | {row['median_ms']:.2f} | {row['median_ms'] / base['median_ms']:.3f} "
                  f"| {row['mean_ms']:.2f} | {row['mean_ms'] / base['mean_ms']:.3f} "
                  f"| {row['peak_rss_mb']:.0f} | {row['peak_rss_mb'] / base['peak_rss_mb']:.3f} |")


def _paired_table(models: list[str], args: argparse.Namespace) -> None:
    """Plain and Doctor steps alternated in one process per model and round (and each export's cost)."""
    print(f"\nPaired ({args.loop} loop, loss_read={args.loss_read}), one process per model: plain and Doctor "
          f"steps alternated in blocks of {args.paired_block}, {args.rounds} round(s)")
    reading, exports = args.loop == "custom", list(EXPORTS) if args.exports else []
    print("| model | round | plain median step ms | Doctor median step ms | median x plain | mean x plain |"
          + (" reading median step ms | Doctor median x reading | mean x reading |" if reading else "")
          + "".join(f" +{e} us/step | +{e} mean x plain |" for e in exports))
    print("|---|---|---|---|---|---|" + ("---|---|---|" if reading else "") + "---|---|" * len(exports))
    rows: list[tuple[str, int, dict]] = []
    for model_name in models:
        for r in range(args.rounds):
            row = _in_fresh_process("--paired-worker", model_name, "--paired-block", str(args.paired_block),
                                    "--loop", args.loop, "--loss-read", args.loss_read,
                                    *(["--exports"] if args.exports else []))
            extra = (f" {row['reading_median_ms']:.2f} | {row['median_ratio_reading']:.3f} | "
                     f"{row['mean_ratio_reading']:.3f} |" if reading else "")
            for export in exports:
                variant = f"doctor+{export}"
                extra += f" {row[f'{variant}_step_us']:.0f} | {row[f'{variant}_mean_ratio']:.3f} |"
            print(f"| {model_name} | {r + 1} | {row['plain_median_ms']:.2f} | {row['doctor_median_ms']:.2f} "
                  f"| {row['median_ratio']:.3f} | {row['mean_ratio']:.3f} |{extra}", flush=True)
            rows.append((model_name, r + 1, row))
    _split_table(rows, args.loop)


def _split_table(rows: list[tuple[str, int, dict]], loop: str) -> None:
    """The Doctor's extra us per step, host and graph, on probe and non-probe steps (``step_split``)."""
    print(f"\nDoctor's extra cost per step, us ({loop} loop): host = inside its hooks, graph = the rest of the "
          "step's extra time (mean over blocks; median over non-probe blocks in brackets)")
    print("| model | round | vs | plain step us | probe / non-probe steps | non-probe host | non-probe graph "
          "| non-probe total | probe host | probe graph | mean x |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model_name, number, row in rows:
        for reference, split in row["split"].items():
            ratio = row["mean_ratio"] if reference == "plain" else row[f"mean_ratio_{reference}"]
            plain_us = row[f"{reference}_median_ms"] * 1e3
            print(f"| {model_name} | {number} | {reference} | {plain_us:.0f} "
                  f"| {split['timed_probe_steps']} / {split['timed_nonprobe_steps']} "
                  f"| {split['nonprobe_host_us']:.0f} | {split['nonprobe_graph_us']:.0f} "
                  f"({split['nonprobe_graph_median_us']:.0f}) "
                  f"| {split['nonprobe_host_us'] + split['nonprobe_graph_us']:.0f} "
                  f"| {split['probe_host_us']:.0f} | {split['probe_graph_us']:.0f} | {ratio:.3f} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
