"""The CPU kernels the benchmarks run on, the same for plain and Doctor runs."""
from __future__ import annotations

import os

CPU_ISA = "AVX2"
"""On AVX-512 CPUs MindSpore 2.10's CPU convolutions fall to oneDNN's reference kernel; capping oneDNN at AVX2
picks its gemm path (a small conv net: 2088 -> 55 ms per step). The README says so for CPU users."""


def pin_cpu_isa() -> None:
    """``ONEDNN_MAX_CPU_ISA=AVX2`` for this process and the ones it starts, unless the caller set it already."""
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", CPU_ISA)
