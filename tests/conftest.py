"""Shared fixtures: real MindSpore on CPU, a fixed seed, and the execution mode restored after each test."""
from __future__ import annotations

import mindspore as ms
import pytest


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
