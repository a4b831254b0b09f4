"""Hyperparameter search guided by the Doctor: ``tune(build, train_ds, eval_ds)`` and ``msdoctor tune``.

``study`` imports MindSpore; the CLI's parser imports only ``tune.cli``, so this package loads it lazily.
"""
from __future__ import annotations

from typing import Any

__all__ = ["TuneError", "study_summary", "tune"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mindspore_doctor.tuner import study

        return getattr(study, name)
    raise AttributeError(f"module 'mindspore_doctor.tuner' has no attribute {name!r}")
