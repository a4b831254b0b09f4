"""What the data checks need from the network: its size and how many classes it predicts."""
from __future__ import annotations

from typing import Any

import numpy as np

from mindspore_doctor.cells import unwrap
from mindspore_doctor.data.roles import ColumnRoles
from mindspore_doctor.data.sampling import error_summary
from mindspore_doctor.data.signals import LabelStats, NetworkSignals
from mindspore_doctor.forward import forward_in_eval_mode


def _class_axis(out_shape: tuple[int, ...], label_shape: tuple[int, ...]) -> int:
    """Where the class scores are: last axis, or axis 1 for dense (N, C, H, W) outputs against (N, H, W) labels."""
    if len(out_shape) > 2 and out_shape[:1] + out_shape[2:] == label_shape:
        return 1
    return -1


def count_outputs(network: Any, batch: dict[str, np.ndarray], roles: ColumnRoles) -> tuple[int | None, str]:
    """Classes the network predicts, from ONE forward pass in eval mode (no parameter changes)."""
    import mindspore as ms

    cell = unwrap(network).backbone  # the model that maps inputs to predictions
    inputs = [ms.Tensor(batch[c]) for c in roles.inputs]
    try:
        out = forward_in_eval_mode(cell, *inputs)  # train mode would update BatchNorm's moving statistics
    except Exception as exc:  # noqa: BLE001 - a net that cannot take the sampled batch is reported, not raised
        return None, f"one forward pass on a sampled batch raised {error_summary(exc)}"
    while isinstance(out, (tuple, list)) and out:
        out = out[0]
    shape = tuple(out.shape)
    label_shape = tuple(batch[roles.label].shape) if roles.label else ()
    one_sample = len(shape) == 1 and roles.label is not None and label_shape == ()
    if len(shape) < 2 and not one_sample:  # (N,) against (N,) labels: one output; an unbatched row's (C,): C
        return 1, ""
    return int(shape[_class_axis(shape, label_shape)]), ""


SHARED_CLASSES = frozenset({"_Conv", "_RNNBase", "_RNNCellBase", "Embedding"})
"""Cells (or their MindSpore base classes) that apply the same weights at every position of a sample: convolutions
(and transposed ones), LSTM/GRU/RNN and their cells, embedding tables."""


def _shared_params(network: Any, trainable: dict[int, int]) -> int:
    """Trainable parameters (``trainable``: id -> size) owned by a weight-sharing cell (``SHARED_CLASSES``)."""
    shared: set[int] = set()
    for _, cell in network.cells_and_names():
        if SHARED_CLASSES.intersection(c.__name__ for c in type(cell).__mro__):
            shared.update(id(p) for p in cell.get_parameters(expand=False) if id(p) in trainable)
    return sum(trainable[i] for i in shared)


def _embeddings(network: Any) -> tuple[int, tuple[int, ...]]:
    """(embedding tables, their ``padding_idx`` values): any cell with "Embedding" in its class hierarchy
    (``nn.Embedding``, ``mint.nn.Embedding``, ``nn.EmbeddingLookup``, users' own subclasses)."""
    tables, padding = 0, set()
    for _, cell in network.cells_and_names():
        if any("Embedding" in c.__name__ for c in type(cell).__mro__):
            tables += 1
            index = getattr(cell, "padding_idx", None)
            if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
                padding.add(int(index))
    return tables, tuple(sorted(padding))


def network_signals(network: Any, batch: dict[str, np.ndarray], roles: ColumnRoles, label: LabelStats | None) -> NetworkSignals:
    trainable = {id(p): int(np.prod(p.shape)) for p in network.trainable_params()}
    signals = NetworkSignals(trainable_params=sum(trainable.values()), shared_params=_shared_params(network, trainable))
    signals.embeddings, signals.padding_ids = _embeddings(network)
    if label is not None and label.kind in ("class", "onehot", "dense"):
        signals.num_outputs, signals.outputs_unknown_why = count_outputs(network, batch, roles)
    return signals
