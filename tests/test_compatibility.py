"""Every cell of the compatibility matrix (docs/compatibility.md): each optimizer and train-cell shape users write,
GRAPH and PyNative, ``Model.train`` and ``doctor.watch``. Under ``Doctor()`` at its defaults each trains, ends
with the very weights of the plain run, warns of nothing, and carries the gradient and activation probes."""
from __future__ import annotations

import pytest

from benchmarks.compat import LOOPS, MODES, SHAPES, run_cell

CELLS = [(shape, mode, loop) for shape in SHAPES for mode in MODES for loop in LOOPS]


@pytest.mark.parametrize(("shape", "mode", "loop"), CELLS,
                         ids=[f"{s.name}-{m}-{loop}" for s, m, loop in CELLS])
def test_matrix_cell(shape, mode, loop):
    if mode == "PyNative" and shape.pynative:
        pytest.skip(shape.pynative)
    result = run_cell(shape, mode, loop)
    assert result.error is None, result.error
    assert result.trains_plainly and result.trains_with_doctor
    assert result.identical, "final weights differ from the plain run's"
    assert result.warnings == []
    assert result.probed == "gradients and updates + activations"
