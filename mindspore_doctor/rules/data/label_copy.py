"""MSD205 from the data: the regression target copied into an input column, certain before the first step.

MSD205 (``LOSS_SUSPICIOUSLY_LOW``) and its ``label_copy_tolerance`` are the training rules' (``rules.training``),
whose judge reads the loss; ``label_in_inputs`` is the data's judge of it, run by ``check_data`` with the MSD3xx
rules (``JUDGES`` in the package).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mindspore_doctor.data.signals import DataSignals
from mindspore_doctor.findings import Finding
from mindspore_doctor.rules.data.common import MIN_ORDER_SAMPLES, _where
from mindspore_doctor.rules.training import LOSS_SUSPICIOUSLY_LOW

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def label_in_inputs(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD205 (before training): an input feature is the regression target itself, or an affine copy of it.

    The loss then collapses as soon as the network learns to read that column; judged on the data it is
    certain before the first step, whatever the network.
    """
    label = s.train.label
    if label is None or label.kind != "regression":
        return []
    found = []
    for f in s.train.features:
        rows = f.per_sample
        if not f.rows_are_values or rows.shape[0] != label.values.size:
            continue
        keep = np.isfinite(label.values) & np.isfinite(rows).all(axis=1)
        if keep.sum() < MIN_ORDER_SAMPLES or np.ptp(label.values[keep]) == 0:
            continue
        target = label.values[keep] - label.values[keep].mean()
        x = rows[keep] - rows[keep].mean(axis=0)
        with np.errstate(all="ignore"):
            r = (x * target[:, None]).sum(axis=0) / np.sqrt((x ** 2).sum(axis=0) * (target ** 2).sum())
        residual = np.sqrt(np.clip(1.0 - np.nan_to_num(r) ** 2, 0.0, None))
        copies = np.flatnonzero(residual <= config.label_copy_tolerance)
        if not copies.size:
            continue
        j = int(copies[0])
        found.append(LOSS_SUSPICIOUSLY_LOW.finding(
            f"Input {f.feature_label(j)} is the target `{label.column}` itself (an affine copy: correlation "
            f"{r[j]:+.6f} over {int(keep.sum())} sampled rows): the network can read the answer, so the loss will "
            "collapse and the model is useless once the target is unknown.",
            location=_where(s.train, f.column),
            evidence={"feature": j, "correlation": float(r[j]), "residual": float(residual[j]),
                      "samples": int(keep.sum()), "features": copies[:20].tolist(), "source": "data"},
            suggestion=f"Drop the target column from the inputs (e.g. features = table[:, :-1]); check every "
            f"feature derived from `{label.column}`.",
        ))
    return found
