"""``lint()``: run every static check over a network, its loss and its optimizer.

Each check pairs what ``static/`` measures (``parameters``, ``layers``, ``graph``) with the rule of ``rules/``
that judges it. ``CHECKS`` need MindSpore objects, ``SOURCE_CHECKS`` work on source text only (``msdoctor lint
--no-import``); ``mindspore_doctor.checks.run_checks`` runs them over a ``static.context.LintContext`` /
``SourceContext``.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.checks import Check, run_checks, selector
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.rules import graph as graph_rules
from mindspore_doctor.rules import layers as layer_rules
from mindspore_doctor.rules import parameters as rules
from mindspore_doctor.static import graph, layers, parameters
from mindspore_doctor.static.context import LintContext, SourceContext
from mindspore_doctor.static.source import drop_suppressed, resolve_sources


Judge = Callable[[Any, DoctorConfig], list[Finding]]


def _judged(measure: Callable[[Any], Any], judge: Judge) -> Callable[[Any], list[Finding]]:
    """A check that judges what ``measure`` returns (nothing to judge: None)."""
    def run(ctx: Any) -> list[Finding]:
        signal = measure(ctx)
        return [] if signal is None else judge(signal, ctx.config)
    return run


def _judged_with_skips(measure: Callable[[Any], Any], judge: Judge) -> Callable[[Any], list[Finding]]:
    """A check whose ``measure`` returns ``(signals, MSD002 findings for what it could not read)``."""
    def run(ctx: Any) -> list[Finding]:
        signals, skipped = measure(ctx)
        return judge(signals, ctx.config) + skipped
    return run


def _ownership(ctx: LintContext) -> list[Finding]:
    params = parameters.param_signals(ctx)
    found = rules.shared_parameter(params, ctx.config) + rules.frozen_parameter(params, ctx.config)
    optimizer = parameters.optimizer_signal(ctx)
    if optimizer is not None:
        found += rules.foreign_optimizer_parameter(optimizer, ctx.config)
    return found


def _initialization(ctx: LintContext) -> list[Finding]:
    params = parameters.param_signals(ctx)
    return rules.zero_initialized_weight(params, ctx.config) + rules.poor_initialization(params, ctx.config)


CHECKS = [
    Check("parameter-ownership", ("MSD101", "MSD102", "MSD103"), _ownership),
    Check("initialization", ("MSD108", "MSD109"), _initialization),
    Check("learning-rate", ("MSD111",), _judged(parameters.learning_rate_signal, rules.learning_rate_out_of_range)),
    Check("weight-decay", ("MSD116",), _judged(parameters.weight_decay_signal, rules.weight_decay_out_of_range)),
    Check("loss-scale", ("MSD112",), _judged(parameters.loss_scale_signal, rules.loss_scale_misconfigured)),
    Check("dropout-rate", ("MSD104",), _judged_with_skips(layers.dropout_signals, layer_rules.dropout_findings)),
    Check("batchnorm-statistics", ("MSD105",), _judged(layers.batchnorm_signals, layer_rules.batchnorm_findings)),
    Check("softmax-axis", ("MSD113",),
          _judged_with_skips(layers.softmax_axis_signals, layer_rules.softmax_axis_findings)),
    Check("unsafe-division", ("MSD106",), _judged_with_skips(graph.division_signals, graph_rules.division_findings)),
    Check("loss-activation", ("MSD107",), _judged(graph.output_activation_signals, graph_rules.loss_input_findings)),
    Check("disconnected-cell", ("MSD110",),
          _judged_with_skips(graph.unused_member_signals, graph_rules.disconnected_findings)),
    Check("silent-broadcast", ("MSD114",), _judged(graph.broadcast_signal, graph_rules.broadcast_findings)),
]
SOURCE_CHECKS = [
    Check("dropout-rate", ("MSD104",), _judged(layers.dropout_source_signals, layer_rules.dropout_findings)),
    Check("batchnorm-statistics", ("MSD105",),
          _judged(layers.batchnorm_source_signals, layer_rules.batchnorm_findings)),
    Check("softmax-axis", ("MSD113",), _judged(layers.softmax_axis_source_signals, layer_rules.softmax_axis_findings)),
    Check("unsafe-division", ("MSD106",), _judged(graph.division_source_signals, graph_rules.division_findings)),
    Check("disconnected-cell", ("MSD110",),
          _judged_with_skips(graph.unused_member_source_signals, graph_rules.disconnected_findings)),
]


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
