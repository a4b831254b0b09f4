"""Hyperparameter search guided by the Doctor: ``tune(build, train_ds, eval_ds)`` and ``msdoctor tune``.

``study`` runs the search (``tune``) over ``storage`` (where a study lives), ``trainer`` (one configuration trained
with the Doctor), ``pruning`` (stopping a trial early) and ``failures`` (a trial that fails, a study that goes on);
``summary`` turns a study into plain data. They import MindSpore or Optuna; the CLI's parser imports only
``tuner.cli``, so this package loads them lazily.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TuneError", "study_summary", "tune"]
_HOMES = {"TuneError": "failures", "study_summary": "summary", "tune": "study"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"mindspore_doctor.tuner.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'mindspore_doctor.tuner' has no attribute {name!r}")
