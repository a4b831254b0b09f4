"""mindspore_doctor: tells a MindSpore practitioner what is wrong with a training run.

    report = lint(net, loss_fn=loss, optimizer=opt)          # static checks
    model.train(10, ds, callbacks=[Doctor()])                # checks while training

MindSpore is imported lazily, so ``msdoctor lint --no-import`` and the report
tooling start fast and work where MindSpore is not importable.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mindspore_doctor.findings import Finding, Report, Severity

__version__ = "0.1.0"
__all__ = ["Doctor", "Finding", "Report", "Severity", "check_data", "find_label_errors", "lint", "sanity", "tune",
           "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from mindspore_doctor.training.callback import Doctor
    from mindspore_doctor.runners.check_data import check_data
    from mindspore_doctor.runners.labels import find_label_errors
    from mindspore_doctor.sanity_checks import sanity
    from mindspore_doctor.runners.lint import lint
    from mindspore_doctor.tuner import tune

_LAZY = {
    "lint": ("mindspore_doctor.runners.lint", "lint"),
    "Doctor": ("mindspore_doctor.training.callback", "Doctor"),
    "check_data": ("mindspore_doctor.runners.check_data", "check_data"),
    "sanity": ("mindspore_doctor.sanity_checks", "sanity"),
    "find_label_errors": ("mindspore_doctor.runners.labels", "find_label_errors"),
    "tune": ("mindspore_doctor.tuner", "tune"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'mindspore_doctor' has no attribute {name!r}")
