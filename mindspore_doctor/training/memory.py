"""Freed host memory handed back to the system after the Doctor's own bursts of allocations."""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; None elsewhere (macOS, musl, Windows)
    except (AttributeError, OSError, TypeError):  # TypeError: Windows takes no CDLL(None)
        return None


def resident_mb() -> float | None:
    """This process's resident memory now, in MB; None where ``/proc`` does not say (not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def give_back_freed_memory() -> None:
    """glibc keeps the heap pages an evaluation's arrays and compiled passes freed until ``malloc_trim``: RegNet's
    process held 60 MB of them after each evaluation (818 -> 758 MB), and the end-of-run analyses then peaked on
    top of them; after the first step, the pages the train graph's compile freed (RegNet: 915 -> 862 MB, which the
    first evaluation peaked on top of). Nothing to do without glibc."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
