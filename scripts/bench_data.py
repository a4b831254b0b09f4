"""Time the data checks on a 60 000-image and a 1 000 000-row dataset; they must stay within budget.

    .venv/bin/python scripts/bench_data.py [--repeat 3]

Prints one line per dataset (best of --repeat runs) and exits 1 when a run
exceeds the configured budget (DoctorConfig.data_max_seconds, default 2 s).
"""
from __future__ import annotations

import argparse
import sys
import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor import check_data


def _images():
    rng = np.random.default_rng(0)
    x = ((rng.random((60_000, 1, 28, 28), dtype=np.float32) - 0.13) / 0.31).astype(np.float32)
    y = rng.integers(0, 10, 60_000).astype(np.int32)
    net = nn.SequentialCell([nn.Conv2d(1, 6, 5, pad_mode="valid"), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(),
                             nn.Dense(6 * 12 * 12, 10)])
    return "images 60000x1x28x28, batch 32", ds.NumpySlicesDataset({"image": x, "label": y}, shuffle=True).batch(32), net


def _table():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1_000_000, 20)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    net = nn.SequentialCell([nn.Dense(20, 64), nn.ReLU(), nn.Dense(64, 2)])
    return "tabular 1000000x20, batch 256", ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=True).batch(256), net


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    budget = DoctorConfig().data_max_seconds
    over = False
    for make in (_images, _table):
        name, dataset, net = make()
        times, report = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            report = check_data(dataset, network=net)
            times.append(time.perf_counter() - start)
        sampled = report.meta["data"]["train"]["samples"]
        print(f"{name}: check_data {min(times):.3f} s best / {max(times):.3f} s worst of {args.repeat} "
              f"(first includes the forward-pass compile), {sampled} samples read, budget {budget:.1f} s, "
              f"findings {sorted(report.codes()) or 'none'}")
        over |= max(times) > budget
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
