"""``lint()``: run every static check over a network, its loss and its optimizer.

Checks live in the sibling modules (``parameters``, ``layers``, ``graph``); each
exports ``CHECKS`` (need MindSpore objects) and may export ``SOURCE_CHECKS``
(work on source text only, for ``msdoctor lint --no-import``), run by
``mindspore_doctor.checks.run_checks`` over a ``context.LintContext`` /
``SourceContext``.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.checks import run_checks, selector
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.static import graph, layers, parameters
from mindspore_doctor.static.context import LintContext, SourceContext
from mindspore_doctor.static.source import drop_suppressed, resolve_sources


CHECK_MODULES = (parameters, layers, graph)
"""The modules whose CHECKS / SOURCE_CHECKS make up the static linter."""


def _report(findings: list[Finding], config: DoctorConfig, **meta: Any) -> Report:
    wanted = selector(config)
    report = Report(meta=meta)
    report.extend(f for f in findings if wanted(f.code))
    return report


def lint(network: Any, loss_fn: Any = None, optimizer: Any = None, sample_inputs: Any = None,
         train_network: Any = None, **options: Any) -> Report:
    """Static checks of a network (and its loss and optimizer) without training it.

    ``sample_inputs``: a tuple ``(inputs..., label)`` for the one forward pass the
    shape checks need (no parameter changes). ``train_network``: the train cell
    wrapping ``network`` when it is built elsewhere (``Model`` builds it from
    ``loss_scale_manager``/``amp_level``), for the loss-scale check (MSD112).
    ``options``: fields of ``DoctorConfig``.
    """
    config = DoctorConfig.from_options(options)
    if isinstance(sample_inputs, list):
        sample_inputs = tuple(sample_inputs)
    elif sample_inputs is not None and not isinstance(sample_inputs, tuple):
        sample_inputs = (sample_inputs,)
    ctx = LintContext(network, loss_fn, optimizer, sample_inputs, config, train_network)
    checks = [c for m in CHECK_MODULES for c in getattr(m, "CHECKS", [])]
    findings = resolve_sources(run_checks(checks, ctx, selector(config)), ctx)
    return _report(findings, config, target=type(network).__name__)


def lint_source(path: str | Path, **options: Any) -> Report:
    """Source-only checks of a Python file: nothing is imported or executed."""
    config = DoctorConfig.from_options(options)
    path = Path(path)
    source = path.read_text(encoding="utf-8")
    ctx = SourceContext(path, source, ast.parse(source, filename=str(path)), config)
    wanted = selector(config)
    modules = CHECK_MODULES
    checks = [c for m in modules for c in getattr(m, "SOURCE_CHECKS", [])]
    findings = drop_suppressed(run_checks(checks, ctx, wanted))
    source_codes = {code for check in checks for code in check.codes}
    object_only = sorted(
        code
        for m in modules
        for check in getattr(m, "CHECKS", [])
        for code in check.codes
        if code not in source_codes and wanted(code)
    )
    if object_only:
        findings.append(
            make_finding(
                "MSD002",
                f"source-only lint: {len(object_only)} rule(s) need the built network, loss and optimizer "
                "and were not run: " + ", ".join(object_only),
                location={"check": "no-import"},
                evidence={"codes": object_only},
                suggestion="Lint without --no-import (this executes the file) to run them.",
            )
        )
    return _report(findings, config, target=str(path))
