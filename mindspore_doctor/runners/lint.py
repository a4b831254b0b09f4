"""``lint()``: run every static check over a network, its loss and its optimizer.

Each rule of ``rules/`` (``parameters``, ``layers``, ``graph``) is paired with what ``static/`` measures for it:
``MEASURED`` on MindSpore objects, ``SOURCE_MEASURED`` on source text only (``msdoctor lint --no-import``), both
keyed by the Rule; the rule's own judging function (``Rule.judged_by``) judges the measurement. ``CHECK_RULES``
groups the rules into the named checks; ``CHECKS`` and ``SOURCE_CHECKS`` are derived from these tables (a check's
codes are its rules'), and ``mindspore_doctor.checks.run_checks`` runs them over a ``static.context.LintContext`` /
``SourceContext``.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable

from mindspore_doctor.checks import Check, run_checks, selector
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.rule import CHECK_SKIPPED, Rule
from mindspore_doctor.rules.graph import (
    DISCONNECTED_CELL,
    LOSS_ACTIVATION_MISMATCH,
    SILENT_BROADCAST,
    UNSAFE_DIVISION,
)
from mindspore_doctor.rules.layers import DROPOUT_RATE_SUSPICIOUS, SOFTMAX_WRONG_AXIS, TRAIN_MODE_MISUSE
from mindspore_doctor.rules.parameters import (
    FOREIGN_OPTIMIZER_PARAMETER,
    FROZEN_PARAMETER,
    LEARNING_RATE_OUT_OF_RANGE,
    LOSS_SCALE_MISCONFIGURED,
    MOMENTUM_OUT_OF_RANGE,
    POOR_INITIALIZATION,
    SHARED_PARAMETER,
    WEIGHT_DECAY_OUT_OF_RANGE,
    ZERO_INITIALIZED_WEIGHT,
)
from mindspore_doctor.static import graph, layers, optimizer_settings, parameters
from mindspore_doctor.static.context import LintContext, SourceContext
from mindspore_doctor.static.source import drop_suppressed, resolve_sources


Measure = Callable[[Any], tuple[Any, list[Finding]]]
"""What a check reads for one rule: ``(signal, MSD002 findings for what it could not read)``; a signal of None
means nothing to judge."""


def _alone(measure: Callable[[Any], Any]) -> Measure:
    """A measurement that returns its signal alone (None: nothing to judge), nothing it could not read."""
    return lambda ctx: (measure(ctx), [])


MEASURED: dict[Rule, Measure] = {
    SHARED_PARAMETER: _alone(parameters.param_signals),
    FROZEN_PARAMETER: _alone(parameters.param_signals),
    FOREIGN_OPTIMIZER_PARAMETER: _alone(optimizer_settings.optimizer_signal),
    ZERO_INITIALIZED_WEIGHT: _alone(parameters.param_signals),
    POOR_INITIALIZATION: _alone(parameters.param_signals),
    LEARNING_RATE_OUT_OF_RANGE: _alone(optimizer_settings.learning_rate_signal),
    WEIGHT_DECAY_OUT_OF_RANGE: _alone(optimizer_settings.weight_decay_signal),
    MOMENTUM_OUT_OF_RANGE: _alone(optimizer_settings.momentum_signal),
    LOSS_SCALE_MISCONFIGURED: _alone(optimizer_settings.loss_scale_signal),
    DROPOUT_RATE_SUSPICIOUS: layers.dropout_signals,
    TRAIN_MODE_MISUSE: _alone(layers.batchnorm_signals),
    SOFTMAX_WRONG_AXIS: layers.softmax_axis_signals,
    UNSAFE_DIVISION: graph.division_signals,
    LOSS_ACTIVATION_MISMATCH: _alone(graph.output_activation_signals),
    DISCONNECTED_CELL: graph.unused_member_signals,
    SILENT_BROADCAST: _alone(graph.broadcast_signal),
}
"""What each rule judges on the network, loss and optimizer (``parameters.param_signals`` is measured once per lint
and shared)."""

SOURCE_MEASURED: dict[Rule, Measure] = {
    DROPOUT_RATE_SUSPICIOUS: _alone(layers.dropout_source_signals),
    TRAIN_MODE_MISUSE: _alone(layers.batchnorm_source_signals),
    SOFTMAX_WRONG_AXIS: _alone(layers.softmax_axis_source_signals),
    UNSAFE_DIVISION: _alone(graph.division_source_signals),
    DISCONNECTED_CELL: graph.unused_member_source_signals,
}
"""What each rule that can judge source text alone judges there."""

CHECK_RULES: dict[str, tuple[Rule, ...]] = {
    "parameter-ownership": (SHARED_PARAMETER, FROZEN_PARAMETER, FOREIGN_OPTIMIZER_PARAMETER),
    "initialization": (ZERO_INITIALIZED_WEIGHT, POOR_INITIALIZATION),
    "learning-rate": (LEARNING_RATE_OUT_OF_RANGE,),
    "weight-decay": (WEIGHT_DECAY_OUT_OF_RANGE,),
    "momentum": (MOMENTUM_OUT_OF_RANGE,),
    "loss-scale": (LOSS_SCALE_MISCONFIGURED,),
    "dropout-rate": (DROPOUT_RATE_SUSPICIOUS,),
    "batchnorm-statistics": (TRAIN_MODE_MISUSE,),
    "softmax-axis": (SOFTMAX_WRONG_AXIS,),
    "unsafe-division": (UNSAFE_DIVISION,),
    "loss-activation": (LOSS_ACTIVATION_MISMATCH,),
    "disconnected-cell": (DISCONNECTED_CELL,),
    "silent-broadcast": (SILENT_BROADCAST,),
}
"""The named checks (MSD001/MSD002 name them) and the rules each judges, in the order they run: one check's
findings come rule by rule, each rule's MSD002 findings after its own."""


def _check(name: str, judged: tuple[Rule, ...], measured: dict[Rule, Measure]) -> Check:
    """The check ``name``: each of its rules judges what ``measured`` reads for it."""
    def run(ctx: Any) -> list[Finding]:
        found: list[Finding] = []
        for rule in judged:
            signal, skipped = measured[rule](ctx)
            found += ([] if signal is None else rule.judged_by(signal, ctx.config)) + skipped
        return found
    return Check(name, tuple(rule.code for rule in judged), run)


CHECKS = [_check(name, judged, MEASURED) for name, judged in CHECK_RULES.items()]
SOURCE_CHECKS = [_check(name, judged, SOURCE_MEASURED) for name, judged in CHECK_RULES.items()
                 if all(rule in SOURCE_MEASURED for rule in judged)]


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
    findings = resolve_sources(run_checks(CHECKS, ctx, selector(config)), ctx)
    return _report(findings, config, target=type(network).__name__)


def lint_source(path: str | Path, **options: Any) -> Report:
    """Source-only checks of a Python file: nothing is imported or executed."""
    config = DoctorConfig.from_options(options)
    path = Path(path)
    source = path.read_text(encoding="utf-8")
    ctx = SourceContext(path, source, ast.parse(source, filename=str(path)), config)
    wanted = selector(config)
    findings = drop_suppressed(run_checks(SOURCE_CHECKS, ctx, wanted))
    source_codes = {code for check in SOURCE_CHECKS for code in check.codes}
    object_only = sorted(code for check in CHECKS for code in check.codes if code not in source_codes and wanted(code))
    if object_only:
        findings.append(
            CHECK_SKIPPED.finding(
                f"source-only lint: {len(object_only)} rule(s) need the built network, loss and optimizer "
                "and were not run: " + ", ".join(object_only),
                location={"check": "no-import"},
                evidence={"codes": object_only},
                suggestion="Lint without --no-import (this executes the file) to run them.",
            )
        )
    return _report(findings, config, target=str(path))
