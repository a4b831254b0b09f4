"""Data doctor: checks a bounded sample of the training (and eval) dataset (MSD301-MSD310).

    report = check_data(train_ds, eval_ds=None, network=net)

MindSpore is imported only when ``check_data`` runs.
"""
from __future__ import annotations

from mindspore_doctor.data.check import check_data

__all__ = ["check_data"]
