"""The cost of the Doctor's per-sample label scoring at the default budget, as a fraction of the training time.

One process, GRAPH mode, ``Model.train`` of a 64-128-64-10 MLP on 10-class Gaussian clusters (10 % of the training
labels shifted to the next class), batch 32, with an eval set of 1024 samples. Three runs alternate (order reversed
every other round): plain, ``Doctor(eval_dataset=..., label_sample_size=1024)`` (the default) and the same Doctor
with ``label_sample_size=0`` (no training sample: the train loss/metric read fresh batches as before issue 25).
The label work's own code is timed inside the Doctor run: along training (reading and hashing the sample, the eval
batches' digests, feeding the trajectories: a fraction of the training time) and at the end of the run (the label
reports, cleanlab in a child process: seconds, once per run); the train sample's forward pass is part of the
evaluation either way.

    python scripts/bench_label_scoring.py --samples 16384 --epochs 4 --rounds 5
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cpu import pin_cpu_isa  # noqa: E402
from mindspore_doctor import Doctor  # noqa: E402
from mindspore_doctor.probes import evaluation  # noqa: E402
from mindspore_doctor.training.session import DoctorSession  # noqa: E402

TIMED = ("read_sample", "row_hashes", "batches_digest")
METHODS = ("score_labels", "label_reports")
DURING = TIMED + ("score_labels",)
"""The label work along training (its cost grows with the evaluations); ``label_reports`` is the end of the run's
(confident learning in a child process: a fixed cost per run)."""
HOOKS = ("_run_evaluation", "_judge_run")
"""The session's evaluation at each epoch end and its end-of-run judging (the label analyses included)."""


def _timed(timing: dict[str, float], name: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timing[name] += time.perf_counter() - started
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pin_cpu_isa()
    ms.set_context(mode=ms.GRAPH_MODE)

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 64)).astype(np.float32)
    y = (np.arange(args.samples) % 10).astype(np.int32)
    rng.shuffle(y)
    x = (centers[y] + 1.5 * rng.standard_normal((args.samples, 64))).astype(np.float32)
    flipped = rng.random(args.samples) < 0.1
    y[flipped] = (y[flipped] + 1) % 10
    y_eval = (np.arange(1024) % 10).astype(np.int32)
    x_eval = (centers[y_eval] + 1.5 * rng.standard_normal((1024, 64))).astype(np.float32)

    timing = dict.fromkeys(TIMED + METHODS, 0.0)
    hooks = dict.fromkeys(HOOKS, 0.0)
    for name in HOOKS:
        setattr(DoctorSession, name, _timed(hooks, name, getattr(DoctorSession, name)))
    for name in TIMED:
        setattr(evaluation, name, _timed(timing, name, getattr(evaluation, name)))
    for name in METHODS:
        setattr(evaluation.Evaluator, name, _timed(timing, name, getattr(evaluation.Evaluator, name)))

    def run(size: int | None) -> tuple[float, float, float, float]:
        ms.set_seed(0)
        net = nn.SequentialCell(nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 64), nn.ReLU(), nn.Dense(64, 10))
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net.trainable_params(), 0.02, 0.9))
        callbacks = [] if size is None else [Doctor(
            eval_dataset=ds.NumpySlicesDataset({"x": x_eval, "label": y_eval}, shuffle=False).batch(32),
            label_sample_size=size, print_summary=False, mindinsight=False)]
        for key in timing:
            timing[key] = 0.0
        for key in hooks:
            hooks[key] = 0.0
        started = time.perf_counter()
        model.train(args.epochs, ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=True).batch(32),
                    callbacks=callbacks, dataset_sink_mode=False)
        return (time.perf_counter() - started, sum(timing[k] for k in DURING), timing["label_reports"],
                sum(hooks.values()))

    for size in (None, 1024, 0):  # warm-up: compiled graphs and caches
        run(size)
    walls: dict[Any, list[float]] = {None: [], 1024: [], 0: []}
    evaluating: dict[Any, list[float]] = {1024: [], 0: []}
    own: list[float] = []
    ends: list[float] = []
    for index in range(args.rounds):
        for size in ((None, 1024, 0) if index % 2 == 0 else (0, 1024, None)):
            wall, scoring, end, hooked = run(size)
            walls[size].append(wall)
            if size is not None:
                evaluating[size].append(hooked)
            if size == 1024:
                own.append(scoring)
                ends.append(end)
            print(f"round {index} {'plain' if size is None else f'label_sample_size={size}'}: {wall:.3f} s"
                  + (f", evaluations + end {hooked * 1000:.0f} ms" if size is not None else "")
                  + (f" (label work along training {scoring * 1000:.1f} ms, end of run {end * 1000:.0f} ms)"
                     if size == 1024 else ""), flush=True)
    plain, full, none = (statistics.median(walls[k]) for k in (None, 1024, 0))
    hook_full, hook_none = (statistics.median(evaluating[k]) for k in (1024, 0))
    scoring, end = statistics.median(own), statistics.median(ends)
    print(f"medians: plain {plain:.3f} s, Doctor label_sample_size=1024 {full:.3f} s, =0 {none:.3f} s")
    print(f"Doctor(1024) - Doctor(0), whole run: {full - none:+.3f} s = {100 * (full - none) / plain:+.1f} % of plain "
          "training (noisy: the rounds' spread)")
    print(f"evaluations + end of run: {hook_full * 1000:.0f} ms (1024) vs {hook_none * 1000:.0f} ms (0): "
          f"{(hook_full - hook_none) * 1000:+.0f} ms = {100 * (hook_full - hook_none) / plain:+.2f} % of plain training")
    print(f"label work along training (sample, hashes, digests, trajectories): {scoring * 1000:.1f} ms = "
          f"{100 * scoring / plain:.2f} % of plain training")
    print(f"label analysis at the end of the run (cleanlab in a child process): {end * 1000:.0f} ms, once per run")


if __name__ == "__main__":
    main()
