"""Forward passes of the user's network that leave no trace: train/eval switches undone exactly.

Shared by the static checks (MSD114's sample pass), the data checks and the evaluation probes.

``set_train`` flattens a network with mixed train/eval sub-cells, and in GRAPH_MODE a
cell's ``training`` flag, ``phase`` and graph flags key its compiled graph: all three are
restored, so the user's next step runs exactly the graph it would have run.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator

_STATE_KEYS = ("training", "_phase")


class ModeSnapshot:
    """Every cell's train/eval state, restored on ``restore()`` or when the ``with`` block ends."""

    def __init__(self, network: Any) -> None:
        self._cells = []
        for _, cell in network.cells_and_names():
            state = cell.__dict__
            flags = state.get("_func_graph_flags")
            saved = {k: state[k] for k in _STATE_KEYS if k in state}
            self._cells.append((cell, saved, None if flags is None else dict(flags)))

    def restore(self) -> None:
        for cell, saved, flags in self._cells:
            cell.__dict__.update(saved)
            if flags is None:
                cell.__dict__.pop("_func_graph_flags", None)
            else:
                cell._func_graph_flags = flags

    def __enter__(self) -> "ModeSnapshot":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


class CellStateSnapshot:
    """Every attribute of every cell, restored when the ``with`` block ends.

    A construct run eagerly may set attributes on its cells (``nn.MultiheadAttention`` records
    ``q_is_k``, cells flag themselves initialised); a later GRAPH compile reads them and picks
    another kernel path, which changed a Transformer's weights by one ulp. Shallow: no tensor is copied.
    """

    def __init__(self, network: Any) -> None:
        self._cells = [(cell, dict(cell.__dict__), dict(cell.__dict__.get("_func_graph_flags") or {}))
                       for _, cell in network.cells_and_names()]

    def __enter__(self) -> "CellStateSnapshot":
        return self

    def __exit__(self, *exc: Any) -> None:
        for cell, state, flags in self._cells:
            cell.__dict__.clear()
            cell.__dict__.update(state)
            if "_func_graph_flags" in state:
                cell._func_graph_flags = flags


class BufferSnapshot:
    """The values of a network's untrainable parameters (BatchNorm moving statistics), put back bit for bit
    when the ``with`` block ends: a train-mode pass updates them, and so does an eval-mode one when a
    BatchNorm has ``use_batch_statistics=True``."""

    def __init__(self, network: Any) -> None:
        self._saved = [(p, p.asnumpy().copy()) for p in network.untrainable_params()]

    def __enter__(self) -> "BufferSnapshot":
        return self

    def __exit__(self, *exc: Any) -> None:
        import numpy as np
        from mindspore import Tensor

        for param, value in self._saved:
            if not np.array_equal(param.asnumpy(), value, equal_nan=True):
                param.set_data(Tensor(value))


@contextmanager
def gc_frozen() -> Iterator[None]:
    """Around a compile of the Doctor's own: MindSpore 2.10 starts every graph compile with a full ``gc.collect()``
    that walks every object of the process (a small loss graph next to a loaded MindSpore: 0.10 s to compile, 0.09 s
    of it that walk). The objects that exist are frozen for it (``gc.freeze``), so it walks only the new ones;
    unfrozen, they are old objects, judged by the next full collection. A process that froze objects of its own is
    left as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def eager() -> Iterator[None]:
    """Run the block in PYNATIVE_MODE whatever the context says; the caller's mode is restored.

    A forward pass run eagerly compiles no graph: ResNet-50 ~0.3 s instead of ~2 s, and no compiled graph held
    for the rest of the run (an eval-mode forward of a small attention model: 44 MB; its train-mode twin: 25 MB).
    The eager runtime costs host memory once per process (~30 MB), whoever runs first.
    """
    import mindspore as ms

    mode = ms.get_context("mode")
    try:
        if mode != ms.PYNATIVE_MODE:
            ms.set_context(mode=ms.PYNATIVE_MODE)
        yield
    except BaseException:
        _drop_pending_errors()
        raise
    finally:
        if mode != ms.PYNATIVE_MODE:
            ms.set_context(mode=mode)


def _drop_pending_errors() -> None:
    """When an eager op fails, the ops queued after it in MindSpore's PyNative pipeline may fail too, and their
    errors wait for the next op that syncs: the user's, later (MindSpore 2.10 CPU: a loss that reshapes to a whole
    batch, called on a part of one, raised again 1-4 times in 40 at the user's next ops). Wait them out here."""
    from mindspore.common.api import _pynative_executor  # pylint: disable=import-outside-toplevel

    for _ in range(16):
        try:
            _pynative_executor.sync()
            return
        except Exception:  # noqa: BLE001 - an error of the failed pass; the one it raised first is the one that leaves
            continue


SAMPLING_SWITCH = "_msd_sampling"
"""The attribute that makes one of the Doctor's probed activation cells copy a sample of its output
(``probes/instrument.py``)."""


@contextmanager
def traceless(network: Any, run_eagerly: bool = True) -> Iterator[None]:
    """Forward passes of ``network`` that leave no trace: run ``eager()`` (unless ``run_eagerly=False``: the
    caller's mode, for a graph of the Doctor's own), every cell attribute and the BatchNorm statistics put back
    when the block ends. The Doctor's activation probes do not sample in them: eagerly, each sample is a gather and
    a copy of its own, and no probe step reads it (a ShuffleNetV2 with 37 activation cells and an eval split, 6
    epochs: 113 s under the Doctor with them, 41 s without; 22 s plain); a graph compiled in the block has none."""
    with CellStateSnapshot(network), BufferSnapshot(network), eager() if run_eagerly else nullcontext():
        for _, cell in network.cells_and_names():
            if cell.__dict__.get(SAMPLING_SWITCH):
                cell.__dict__[SAMPLING_SWITCH] = False
        yield


def forward_in_eval_mode(network: Any, *inputs: Any) -> Any:
    """One forward pass in eval mode (no BatchNorm statistics update, no dropout), ``traceless``."""
    with traceless(network):
        network.set_train(False)
        return network(*inputs)
