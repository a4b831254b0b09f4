"""``check_data()``: sample the datasets, measure statistics, let the MSD3xx rules judge.

Every stage is guarded: a dataset that cannot be read becomes MSD002 (check
skipped, with the reason), a bug of ours MSD001; nothing raises to the caller,
so the Doctor can call this at the start of training without risk.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any, Callable, TypeVar

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.data.signals import DataSignals, FeatureStats, NetworkSignals
from mindspore_doctor.data.stats import view_flat_images
from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.checks import Check, CheckSkipped, run_checks, selector
from mindspore_doctor.rules.data import JUDGES, PAIR_RULES

T = TypeVar("T")
DATA_CODES = tuple(rule.code for rule, _ in JUDGES)
"""MSD301-MSD310, MSD312 and MSD313, and MSD205 when the regression target is itself an input column (certain before
any step)."""
PAIR_CODES = tuple(rule.code for rule in PAIR_RULES)
"""The codes the eval set is sampled for (MSD308, MSD309: train against eval; MSD312, MSD313: its pipeline)."""
PIPELINE_CODES = ("MSD312", "MSD313")
"""The codes the pipelines' operations are read for."""


def _guarded(name: str, codes: tuple[str, ...], measure: Callable[[], T], findings: list[Finding]) -> T | None:
    """Run one probe; a known data problem becomes MSD002, anything else MSD001 (via the lint machinery)."""
    from mindspore_doctor.data.roles import RolesUnknown
    from mindspore_doctor.data.sampling import DataUnavailable

    result: list[T] = []

    def run(_: Any) -> list[Finding]:
        try:
            result.append(measure())
        except (DataUnavailable, RolesUnknown) as why:
            raise CheckSkipped(str(why)) from why
        return []

    findings.extend(run_checks([Check(name, codes, run)], None, lambda code: True))
    return result[0] if result else None


def _sample(dataset: Any, name: str, network: Any, config: DoctorConfig, codes: tuple[str, ...], findings: list[Finding]) -> Any:
    from mindspore_doctor.data.roles import assign_roles
    from mindspore_doctor.data.sampling import column_names, read_sample

    def measure() -> Any:
        roles = assign_roles(column_names(dataset, name), network, config)
        return roles, read_sample(dataset, name, roles, config)

    measured = _guarded(f"sample-{name}-dataset", codes, measure, findings)
    if measured is None:
        return None
    roles, sample = measured
    for column, why in sample.signals.skipped_columns.items():
        findings.append(make_finding(
            "MSD002",
            f"data checks skipped column `{column}` of the {name} dataset: {why}",
            location={"check": f"sample-{name}-dataset", "dataset": name, "column": column},
            evidence={"codes": list(codes)},
        ))
    return roles, sample


def check_data(train_ds: Any, eval_ds: Any = None, network: Any = None, loss_fn: Any = None,
               **options: Any) -> Report:
    """Data checks (MSD301-MSD310, MSD312, MSD313) on a bounded sample of ``train_ds`` and ``eval_ds``; never raises.

    ``network``: gives the column roles (``construct`` signature), the class count
    (MSD306: one forward pass in eval mode on a sampled batch, train/eval flags
    restored, no parameter change) and the parameter count (MSD307).
    ``loss_fn``: which label values it ignores (MSD306 does not call them out of range).
    ``options``: fields of ``DoctorConfig`` (or ``config=DoctorConfig(...)``);
    ``eval_dataset`` is used when ``eval_ds`` is not given.
    """
    return _check(train_ds, eval_ds, network, loss_fn, DoctorConfig.from_options(options))[0]


def check_data_for_training(train_ds: Any, eval_ds: Any, network: Any, loss_fn: Any,
                            config: DoctorConfig) -> tuple[Report, Any]:
    """``check_data`` at the start of training: the report without its MSD304 findings, and a
    ``NetworkInputCheck`` holding them (None when there are none) to be judged at the first step on the batch
    the network receives, which a hand-written loop may have transformed."""
    from mindspore_doctor.runners.network_inputs import NetworkInputCheck

    report, signals, sample = _check(train_ds, eval_ds, network, loss_fn, config)
    held = [f for f in report.findings if f.code == "MSD304" and f.location.get("column") is not None]
    if not held or signals is None:
        return report, None
    report.findings = [f for f in report.findings if f not in held]
    inputs = [f.column for f in signals.train.features]
    return report, NetworkInputCheck(held, {f.column: f for f in signals.train.features},
                                     {c: sample.sample_shape(c) for c in inputs}, signals.train.samples, config)


def _check(train_ds: Any, eval_ds: Any, network: Any, loss_fn: Any,
           config: DoctorConfig) -> tuple[Report, DataSignals | None, Any]:
    """The report, and the signals and training sample it was judged on (None when the sample failed)."""
    eval_ds = eval_ds if eval_ds is not None else config.eval_dataset
    wanted = selector(config)
    start = time.perf_counter()
    findings: list[Finding] = []
    meta: dict[str, Any] = {"target": type(train_ds).__name__}
    train = _sample(train_ds, "train", network, config, DATA_CODES, findings)
    evaluated = _sample(eval_ds, "eval", network, config, PAIR_CODES, findings) if eval_ds is not None else None
    if train is not None:
        roles, sample = train
        signals = DataSignals(sample.signals, evaluated[1].signals if evaluated else None)
        view_flat_images(signals.train, signals.eval)
        if network is not None:
            from mindspore_doctor.data.network import network_signals

            measured = _guarded("measure-network", ("MSD306", "MSD307"),
                                lambda: network_signals(network, sample.first_batch, roles, sample.signals.label), findings)
            signals.network = measured or NetworkSignals()
        if loss_fn is not None:
            from mindspore_doctor.static.ast_cells import is_library_object

            ignore_index = getattr(loss_fn, "ignore_index", None)
            signals.network.ignore_index = ignore_index if isinstance(ignore_index, int) else None
            signals.network.custom_loss = not is_library_object(loss_fn)
        if evaluated is not None and (wanted("MSD312") or wanted("MSD313")):
            signals.pipelines = _guarded("read-pipelines", PIPELINE_CODES,
                                         lambda: _pipelines(train_ds, sample, eval_ds, evaluated[1]), findings) or {}
        findings.extend(_run_rules(signals, config, wanted))
        meta["data"] = _summary(signals, roles)
    meta["data_check_seconds"] = round(time.perf_counter() - start, 3)
    report = Report(meta=meta)
    report.extend(f for f in findings if wanted(f.code))
    return report, (signals if train is not None else None), (train[1] if train is not None else None)


def _pipelines(train_ds: Any, train_sample: Any, eval_ds: Any, eval_sample: Any) -> dict[str, Any]:
    """The train and eval pipelines' operations (MSD312, MSD313), the eval pipeline's random stages replayed."""
    from mindspore_doctor.data.pipeline import measure_pipeline

    return {
        "train": measure_pipeline(train_ds, "train", train_sample.first_batch, train_sample.batched, replay=False),
        "eval": measure_pipeline(eval_ds, "eval", eval_sample.first_batch, eval_sample.batched, replay=True),
    }


def _run_rules(signals: DataSignals, config: DoctorConfig, wanted: Callable[[str], bool]) -> list[Finding]:
    checks = [Check(judge.__name__, (rule.code,), partial(judge, config=config)) for rule, judge in JUDGES]
    return run_checks(checks, signals, wanted)


def _column_kind(f: FeatureStats) -> str:
    """"image CHW", "tabular F", or "image CHW (flattened 1x8x8)" for an image that arrived as a vector."""
    flattened = f" (flattened {'x'.join(map(str, f.grid))})" if f.grid else ""
    return f"{f.kind} {f.layout}".strip() + flattened


def _summary(signals: DataSignals, roles: Any) -> dict[str, Any]:
    """What was looked at, for the report: sample sizes, column roles and kinds."""
    out: dict[str, Any] = {"inputs": list(roles.inputs), "label": roles.label}
    for ds in (signals.train, signals.eval):
        if ds is None:
            continue
        out[ds.name] = {
            "samples": ds.samples,
            "total_samples": ds.total_samples,
            "truncated_by_time": ds.truncated_by_time,
            "columns": {f.column: _column_kind(f) for f in ds.features},
            "label_kind": ds.label.kind if ds.label else None,
        }
    return out
