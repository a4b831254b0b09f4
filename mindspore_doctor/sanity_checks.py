"""``sanity(build, dataset)``: the "start simple" checks of the troubleshooting workflow, before a long run.

    report = mindspore_doctor.sanity(build, dataset)   # build() -> (net, loss_fn, optimizer), fresh each call
    msdoctor sanity mymodel:build --data mymodel:make_dataset

Phases, each on a fresh ``build()`` (the user's own objects are never touched):
initial loss (MSD215, ≈ ln C), overfit one small batch (MSD403), beat a trivial
baseline on held-out batches (MSD404), and a learning-rate range test whose
curve lands in ``report.meta["lr_range_test"]`` (suggested lr = the lr at the
lowest smoothed loss / 10). A phase that cannot run becomes MSD002, a bug of
ours MSD001; ``sanity`` never raises for a bad model.
"""
from __future__ import annotations

import argparse
import math
import sys
from typing import Any, Callable, Sequence

import numpy as np

from mindspore_doctor.cells import is_classification_loss
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding, Report, Severity
from mindspore_doctor.loading import load_attr
from mindspore_doctor.progress import Progress

LR_SUGGESTION_DIVISOR = 10.0
"""Suggested lr = lr at the minimum of the smoothed range-test loss / this (fast.ai's rule of thumb)."""
LR_SMOOTHING = 0.7
"""Exponential smoothing of the range-test loss (weight of the previous smoothed value)."""
LR_EXPLODE_FACTOR = 4.0
"""The range test stops once the smoothed loss exceeds this multiple of its minimum."""
Build = Callable[[], tuple[Any, Any, Any]]


def _train_step(net: Any, loss_fn: Any, optimizer: Any) -> Any:
    """A TrainOneStepCell over (inputs..., label) batches: label = last column."""
    from mindspore import nn

    class WithLoss(nn.Cell):
        def __init__(self, network: Any, loss: Any) -> None:
            super().__init__(auto_prefix=False)
            self.network = network
            self.loss = loss

        def construct(self, *batch):
            return self.loss(self.network(*batch[:-1]), batch[-1])

    step = nn.TrainOneStepCell(WithLoss(net, loss_fn), optimizer)
    step.set_train(True)
    return step


def _run(step: Any, batch: Sequence[np.ndarray]) -> float:
    from mindspore import Tensor

    out = step(*(Tensor(x) for x in batch))
    out = out[0] if isinstance(out, (tuple, list)) else out
    return float(np.asarray(out.asnumpy(), dtype=np.float64).mean())


def _built(build: Build) -> tuple[Any, Any, Any]:
    from mindspore_doctor.checks import CheckSkipped

    made = build()
    if not isinstance(made, (tuple, list)) or len(made) < 3:
        raise CheckSkipped(f"build() must return (net, loss_fn, optimizer); it returned {type(made).__name__}")
    return made[0], made[1], made[2]


# --- phases: each takes the shared state and returns findings ------------------------------------------


class _Session:
    def __init__(self, build: Build, batches: list, config: DoctorConfig, progress: bool) -> None:
        self.build, self.batches, self.config, self.progress = build, batches, config, progress
        self.meta: dict[str, Any] = {}
        holdout = max(1, len(batches) // 4) if len(batches) >= 2 else 0
        self.train_batches = batches[: len(batches) - holdout]
        self.heldout_batches = batches[len(batches) - holdout:] or batches

    def lint(self, _: Any) -> list[Finding]:
        """The static checks on a fresh build: their findings are evidence for the diagnosis."""
        from mindspore_doctor.runners.lint import lint

        net, loss_fn, optimizer = _built(self.build)
        return lint(net, loss_fn=loss_fn, optimizer=optimizer, config=self.config).findings

    def initial_loss(self, _: Any) -> list[Finding]:
        from mindspore_doctor.checks import CheckSkipped
        from mindspore_doctor.probes.evaluation import Probe, infer_task
        from mindspore_doctor.rules.training import unexpected_initial_loss
        from mindspore_doctor.signals import StartState, StepSignals, TrainingHistory

        net, loss_fn, _opt = _built(self.build)
        measured = Probe(net, loss_fn).measure(self.batches[:1])
        classes = None
        try:
            task = infer_task(measured.outputs, measured.labels, loss_fn)
        except CheckSkipped:
            task = None  # no class count to expect a loss from; the baseline phase says why
        cross_entropy = task is not None and (
            task.family == "classes" or is_classification_loss(loss_fn, by_name=True))
        if cross_entropy and task.kind == "multiclass":
            classes = int(measured.outputs.shape[task.class_axis])
        self.meta["initial_loss"] = {"loss": measured.loss, "num_classes": classes,
                                     "expected": math.log(classes) if classes else None}
        fresh = StartState(True, "sanity() measures a network build() has just made, for this phase alone")
        history = TrainingHistory(steps=[StepSignals(step=0, loss=measured.loss)], num_classes=classes, start=fresh)
        return unexpected_initial_loss(history, self.config)

    def overfit_batch(self, _: Any) -> list[Finding]:
        from mindspore_doctor.probes.learning_rate import fixed_learning_rate
        from mindspore_doctor.rules.evaluation import batch_not_fitted

        cfg = self.config
        batch = tuple(column[: cfg.overfit_batch_size] for column in self.batches[0])
        net, loss_fn, optimizer = _built(self.build)
        step = _train_step(net, loss_fn, optimizer)
        lr = fixed_learning_rate(optimizer)
        bar = Progress("overfit one batch", cfg.overfit_steps, self.progress)
        losses = [_run(step, batch)]
        target = max(cfg.overfit_loss_ratio * losses[0], 1e-3) if math.isfinite(losses[0]) else 1e-3
        while len(losses) < cfg.overfit_steps and math.isfinite(losses[-1]) and losses[-1] > target:
            losses.append(_run(step, batch))
            bar.update(len(losses), f"loss {losses[-1]:.4g}")
        finite = [v for v in losses if math.isfinite(v)]
        best = min(finite) if finite else math.nan
        fitted = math.isfinite(losses[-1]) and losses[-1] <= target
        bar.close(f"loss {losses[0]:.4g} -> {losses[-1]:.4g} ({'fitted' if fitted else 'NOT fitted'})")
        self.meta["overfit_batch"] = {"samples": int(len(batch[0])), "steps": len(losses), "initial_loss": losses[0],
                                      "final_loss": losses[-1], "best_loss": best, "target": target,
                                      "fitted": fitted, "losses": losses}
        return batch_not_fitted(self.meta["overfit_batch"], lr=lr, suggested_lr=self.meta.get("suggested_lr"))

    def baseline(self, _: Any) -> list[Finding]:
        from mindspore_doctor.probes.evaluation import Probe, infer_task
        from mindspore_doctor.rules.evaluation import worse_than_baseline

        net, loss_fn, optimizer = _built(self.build)
        step = _train_step(net, loss_fn, optimizer)
        epochs = self.config.sanity_train_epochs
        bar = Progress("trivial baseline", epochs * len(self.train_batches), self.progress)
        done = 0
        for _epoch in range(epochs):
            for batch in self.train_batches:
                loss = _run(step, batch)
                done += 1
                bar.update(done, f"loss {loss:.4g}")
        measured = Probe(net, loss_fn).measure(self.heldout_batches)
        task = infer_task(measured.outputs, measured.labels, loss_fn)  # CheckSkipped (MSD002) when none fits
        reference = np.concatenate([b[-1] for b in self.train_batches])
        baseline = task.baseline(measured.outputs.shape, measured.labels, reference)
        model = task.metric(measured.outputs, measured.labels)
        self.meta["baseline"] = {"task": task.kind, "metric": model.name, "model": model.value,
                                 "baseline": baseline.value, "heldout_batches": len(self.heldout_batches),
                                 "epochs": epochs}
        bar.close(f"{model.name}: model {model.value:.4g} vs trivial {baseline.value:.4g}")
        data = "held-out" if self.heldout_batches is not self.batches else "sampled"
        return worse_than_baseline(model, baseline, self.config, data=data, samples=len(measured.labels))

    def lr_range(self, _: Any) -> list[Finding]:
        from mindspore import Tensor, ops

        from mindspore_doctor.checks import CheckSkipped
        from mindspore_doctor.probes.learning_rate import fixed_learning_rate

        net, loss_fn, optimizer = _built(self.build)
        lr_param = getattr(optimizer, "learning_rate", None)
        if fixed_learning_rate(optimizer) is None:
            raise CheckSkipped("the optimizer's learning rate is a schedule or per-group; the range test needs a "
                               "single float learning rate")
        step = _train_step(net, loss_fn, optimizer)
        lo, hi = self.config.lr_range
        n = max(2, self.config.lr_range_steps)
        lrs = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
        bar = Progress("lr range test", n, self.progress)
        losses: list[float] = []
        smoothed: list[float] = []
        for i, lr in enumerate(lrs):
            # assign, not set_data: in PyNative set_data on a Parameter the optimizer already used is ignored
            ops.assign(lr_param, Tensor(np.array(lr, dtype=np.float32).reshape(lr_param.shape)))
            loss = _run(step, self.train_batches[i % len(self.train_batches)])
            losses.append(loss)
            if not math.isfinite(loss):
                break
            smoothed.append(loss if not smoothed else LR_SMOOTHING * smoothed[-1] + (1 - LR_SMOOTHING) * loss)
            bar.update(i + 1, f"lr {lr:.2g} loss {loss:.4g}")
            if smoothed[-1] > LR_EXPLODE_FACTOR * min(smoothed):
                break
        best = int(np.argmin(smoothed)) if smoothed else None
        suggested = lrs[best] / LR_SUGGESTION_DIVISOR if best is not None else None
        self.meta["suggested_lr"] = suggested
        self.meta["lr_range_test"] = {
            "lrs": lrs[: len(losses)], "losses": losses, "smoothed": smoothed,
            "min_loss_lr": lrs[best] if best is not None else None, "suggested_lr": suggested,
            "method": f"lr at the minimum of the smoothed loss / {LR_SUGGESTION_DIVISOR:g}",
        }
        bar.close(f"suggested lr {suggested:.3g}" if suggested else "no finite loss")
        return []


def _batches(dataset: Any, count: int) -> list:
    from mindspore_doctor.probes.evaluation import read_batches
    from mindspore_doctor.checks import CheckSkipped

    if callable(dataset) and not hasattr(dataset, "create_tuple_iterator"):
        dataset = dataset()
    if not hasattr(dataset, "create_tuple_iterator"):
        raise CheckSkipped(f"expected a MindSpore dataset (or a factory returning one), got {type(dataset).__name__}")
    try:
        batches = read_batches(dataset, count)
    except Exception as exc:  # noqa: BLE001 - the user's pipeline: say why in one line
        raise CheckSkipped(f"reading the dataset raised {type(exc).__name__}: {exc}") from exc
    if not batches:
        raise CheckSkipped("the dataset is empty")
    if len(batches[0]) < 2:
        raise CheckSkipped("each batch needs inputs and a label column (label = last column)")
    return batches


def sanity(build: Build, dataset: Any, progress: bool = True, **options: Any) -> Report:
    """Run the sanity phases (MSD215, MSD403, MSD404, lr range test) on fresh builds; returns a Report.

    ``build()`` returns a fresh ``(net, loss_fn, optimizer)``; ``dataset`` is a
    batched MindSpore dataset whose last column is the label (or a factory
    returning one). ``options``: ``DoctorConfig`` fields (``overfit_steps``,
    ``lr_range``, ...). The report's meta holds each phase's numbers
    (``meta["sanity"]``), the range-test curve (``meta["lr_range_test"]``) and
    the diagnosis (``meta["diagnosis"]``).
    """
    from mindspore_doctor.diagnosis import diagnose
    from mindspore_doctor.checks import Check, run_checks, selector

    config = DoctorConfig.from_options(options)
    wanted = selector(config)
    report = Report(meta={"target": getattr(build, "__name__", "build"), "sanity": {}})
    loaded: list = []

    def load(_: Any) -> list[Finding]:
        loaded.append(_batches(dataset, max(1, config.sanity_batches)))
        return []

    findings = run_checks([Check("sanity-read-dataset", ("MSD215", "MSD403", "MSD404"), load)], None,
                           lambda code: True)
    if loaded:
        session = _Session(build, loaded[0], config, progress)
        phases = [
            Check("sanity-lint", ("MSD1",), session.lint),
            Check("sanity-initial-loss", ("MSD215",), session.initial_loss),
            Check("sanity-lr-range-test", ("MSD403",), session.lr_range),  # its suggestion is MSD403 evidence
            Check("sanity-overfit-batch", ("MSD403",), session.overfit_batch),
            Check("sanity-baseline", ("MSD404",), session.baseline),
        ]
        findings += run_checks(phases, None, wanted)
        lr_test = session.meta.pop("lr_range_test", None)
        report.meta["sanity"] = session.meta
        if lr_test is not None:
            report.meta["lr_range_test"] = lr_test
    report.extend(f for f in findings if wanted(f.code))
    report.meta["diagnosis"] = diagnose(report).to_dict()
    return report


# --- command line -----------------------------------------------------------------------------------------


def format_sanity_text(report: Report) -> str:
    """Phase summary, then the report: its diagnosis first, then the findings."""

    phases = report.meta.get("sanity", {})
    lines = ["msdoctor sanity:"]
    if "initial_loss" in phases:
        p = phases["initial_loss"]
        expected = f" (expected ln {p['num_classes']} = {p['expected']:.3g})" if p.get("expected") else ""
        lines.append(f"  initial loss      {p['loss']:.4g}{expected}")
    if "overfit_batch" in phases:
        p = phases["overfit_batch"]
        lines.append(f"  overfit 1 batch   {'ok' if p['fitted'] else 'FAILED'}: loss {p['initial_loss']:.4g} -> "
                     f"{p['final_loss']:.4g} in {p['steps']} steps on {p['samples']} samples")
    if "baseline" in phases:
        p = phases["baseline"]
        lines.append(f"  trivial baseline  {p['metric']} model {p['model']:.4g} vs trivial {p['baseline']:.4g}")
    lr_test = report.meta.get("lr_range_test")
    if lr_test and lr_test.get("suggested_lr"):
        lines.append(f"  lr range test     suggested lr {lr_test['suggested_lr']:.3g} "
                     f"(loss lowest at lr {lr_test['min_loss_lr']:.3g})")
    lines.append(report.to_text())
    return "\n".join(lines)


def add_sanity_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``msdoctor sanity`` (the CLI owns the parser, this module its options)."""
    parser.add_argument("build", metavar="BUILD", help="pkg.module:attr of a zero-argument factory returning "
                        "(net, loss_fn, optimizer)")
    parser.add_argument("--data", required=True, metavar="DATASET", help="pkg.module:attr of a dataset or a "
                        "zero-argument factory returning a batched dataset (last column = label)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--fail-on", choices=[s.value for s in Severity], default="warning")
    parser.add_argument("--html", metavar="OUT", help="also write an HTML report (diagnosis, findings and the "
                        "learning-rate range test plot) to OUT")


def run_sanity_command(args: argparse.Namespace) -> int:
    """``msdoctor sanity module:build --data module:dataset_factory [--format text|json] [--fail-on LEVEL] [--html OUT]``.

    Exit codes as ``msdoctor lint``: 0 clean, 1 findings at or above ``--fail-on``
    (default warning), 2 usage error or a target that cannot be loaded.
    """
    from mindspore_doctor.static.loader import LoadError

    try:
        build = load_attr(args.build, "BUILD")
        dataset = load_attr(args.data, "--data")
    except LoadError as exc:
        print(f"msdoctor: {exc}", file=sys.stderr)
        return 2
    if not callable(build):
        print(f"msdoctor: {args.build} is not callable; give a factory returning (net, loss_fn, optimizer)",
              file=sys.stderr)
        return 2
    report = sanity(build, dataset, progress=True)
    print(report.to_json() if args.format == "json" else format_sanity_text(report))
    if args.html:
        from mindspore_doctor.export.html import write_html

        try:
            write_html(report, None, args.html, title=f"msdoctor sanity: {args.build}")
        except OSError as exc:
            print(f"msdoctor: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"HTML report: {args.html}", file=sys.stderr)
    return 1 if report.at_least(args.fail_on) else 0
