#!/usr/bin/env python
"""Time ``mindspore_doctor.lint()`` on ResNet-50 (≈160 cells), excluding ``import mindspore``.

Prints the first (cold: AST parsing, graph compile of the shape check) and the
median of the following runs, with and without ``sample_inputs``. Target: under
2 s on a 2-core CPU machine. A benchmark, not a test: it always exits 0.

    .venv/bin/python scripts/bench_lint.py [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # ResNet-50 lives in tests/zoo.py with the other clean architectures

TARGET_SECONDS = 2.0


def _timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per setting (first + the rest for the median)")
    args = parser.parse_args()

    start = time.perf_counter()
    import mindspore as ms

    ms.set_context(mode=ms.GRAPH_MODE)
    from mindspore_doctor import lint
    from mindspore_doctor.runners import lint  # noqa: F401 - imports the checks outside the timing
    from zoo import build_resnet50

    print(f"import mindspore + mindspore_doctor: {time.perf_counter() - start:.2f} s (not counted)")
    start = time.perf_counter()
    net, loss_fn, optimizer, sample_inputs = build_resnet50()
    cells = sum(1 for _ in net.cells_and_names())
    print(f"build ResNet-50 ({cells} cells, {len(net.trainable_params())} trainable parameters): "
          f"{time.perf_counter() - start:.2f} s (not counted)")

    settings = {  # the complete lint first, so that its first run is the cold one
        "lint(net, loss, optimizer, sample_inputs)": lambda: lint(net, loss_fn, optimizer, sample_inputs),
        "lint(net, loss, optimizer)": lambda: lint(net, loss_fn, optimizer),
    }
    for label, call in settings.items():
        times = [_timed(call) for _ in range(max(2, args.runs))]
        median = statistics.median(times[1:])
        verdict = "OK" if max(times[0], median) < TARGET_SECONDS else f"OVER the {TARGET_SECONDS:.0f} s target"
        print(f"{label}: first {times[0]:.2f} s, median of next {len(times) - 1}: {median:.2f} s  [{verdict}]")
    findings = lint(net, loss_fn, optimizer, sample_inputs)
    print(f"findings on ResNet-50: {len(findings)} ({findings.counts()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
