"""Shared fixtures: real MindSpore on CPU, a fixed seed, and the execution mode restored after each test."""
from __future__ import annotations

import os

import mindspore as ms
import pytest

# MindSpore 2.10's CPU convolutions on AVX-512 fall to oneDNN's reference kernel (read lazily, at the first
# kernel): capped at AVX2 they take the gemm path, 15 ms instead of 1.3 s for a small conv step (README, "CPU").
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")


@pytest.fixture(autouse=True)
def _fresh_mindspore_state():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    yield
    ms.set_context(mode=ms.GRAPH_MODE)


@pytest.fixture(params=[ms.GRAPH_MODE, ms.PYNATIVE_MODE], ids=["graph", "pynative"])
def exec_mode(request):
    """Run the test once in GRAPH_MODE and once in PYNATIVE_MODE."""
    ms.set_context(mode=request.param)
    return request.param
