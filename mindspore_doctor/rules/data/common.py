"""What the data rules share: the sample size their statistics need, the finding's location, class ids."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from mindspore_doctor.data.signals import DatasetSignals, DataSignals, LabelStats
from mindspore_doctor.findings import Finding

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


MIN_ORDER_SAMPLES = 32
"""Fewer labels than this say nothing reliable about their order or their outliers."""

DataRule = Callable[[DataSignals, "DoctorConfig"], list[Finding]]


def _g(x: float) -> str:
    return f"{float(x):.4g}"


def _where(ds: DatasetSignals, column: str) -> dict[str, str]:
    return {"dataset": ds.name, "column": column}


def _datasets(s: DataSignals) -> list[DatasetSignals]:
    return [d for d in (s.train, s.eval) if d is not None]


def _class_ids(label: LabelStats | None) -> np.ndarray | None:
    """Finite, non-negative class ids of a class or one-hot label, else None.

    A negative id is never a class: it is an "unlabelled"/ignore marker or a bug, which MSD306 reports;
    counting it as a class would also report it as a rare or dominant class (MSD302/MSD307).
    """
    if label is None or label.kind not in ("class", "onehot"):
        return None
    ids = label.values[np.isfinite(label.values)].astype(np.int64)
    return ids[ids >= 0]
