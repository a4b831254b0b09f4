"""``Doctor``: a MindSpore training Callback that diagnoses the run while it trains.

    model.train(10, ds, callbacks=[Doctor(summary_dir="runs/exp1")])

Wiring only: ``probes/`` measures inside the compiled step, ``rules/training.py``
judges the signals, ``export/`` formats. Nothing here may break the user's
training: a check that raises becomes MSD001 and is switched off.
"""
from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from mindspore import Tensor, nn
from mindspore.train import Callback

from mindspore_doctor import _io
from mindspore_doctor.catalog import make_finding
from mindspore_doctor.checks import CheckSkipped, internal_error, selector
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.distributed import RankMonitor
from mindspore_doctor.findings import Finding, Report, Severity
from mindspore_doctor.lifecycle import Lifecycle
from mindspore_doctor.rules import training as training_rules
from mindspore_doctor.signals import StepSignals, TrainingHistory

logger = logging.getLogger("mindspore_doctor")

REPORT_FILE = "doctor_report.json"
HISTORY_FILE = "doctor_history.json"
_CLASSIFICATION_LOSSES = ("SoftmaxCrossEntropyWithLogits", "CrossEntropyLoss", "NLLLoss")


def _unwrap(cell: Any) -> Any:
    """The user's backbone inside TrainOneStepCell / WithLossCell-style wrappers."""
    seen = set()
    while id(cell) not in seen:
        seen.add(id(cell))
        inner = getattr(cell, "network", None) or getattr(cell, "_backbone", None)
        if not isinstance(inner, nn.Cell):
            break
        cell = inner
    return cell


def _find(cell: Any, kind: type) -> Any:
    return next((c for _, c in cell.cells_and_names() if isinstance(c, kind)), None) if isinstance(cell, nn.Cell) else None


def _num_classes(backbone: Any, loss_fn: Any) -> int | None:
    """Output width of the last Dense layer, when the loss is a classification loss."""
    if type(loss_fn).__name__ not in _CLASSIFICATION_LOSSES:
        return None
    dense = [c for _, c in backbone.cells_and_names() if isinstance(c, nn.Dense)]
    return int(dense[-1].out_channels) if dense else None


def _sample_inputs(dataset: Any, backbone: Any, config: DoctorConfig) -> tuple:
    """``(inputs..., label)`` of the first training batch for MSD114's forward pass.

    Read as the data checks read it (same column roles, a fresh iterator stopped after
    one batch), so the iterator training uses, its order and its seed are untouched.
    """
    from mindspore_doctor.data.roles import RolesUnknown, assign_roles
    from mindspore_doctor.data.sampling import (
        DataUnavailable,
        column_names,
        read_sample,
    )

    if dataset is None:
        raise CheckSkipped("no training dataset to take a sample batch from")
    try:
        columns = column_names(dataset, "train")
        roles = assign_roles(columns, backbone, config)
        if roles.label is None or not roles.inputs:
            raise CheckSkipped(f"cannot tell the inputs from the label among the train dataset's columns {columns} "
                               "(set the `label_column` / `input_columns` options)")
        batch = read_sample(dataset, "train", roles, dataclasses.replace(config, data_max_samples=1)).first_batch
    except (DataUnavailable, RolesUnknown) as why:
        raise CheckSkipped(f"no sample batch from the train dataset: {why}") from why
    return (*(batch[c] for c in roles.inputs), batch[roles.label])


def _scalar(value: Any) -> float:
    return float(np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value, dtype=np.float64).mean())


def _learning_rates(optimizer: Any) -> tuple[list[float], list[float | None], list[int]] | None:
    """Per learning-rate group: (its rate at the step just run, its schedule's peak when known up front), and each
    optimizer parameter's group (MindSpore holds one rate object per parameter, shared within a group).

    Read on the host, never through ``optimizer.get_lr()``, which advances ``global_step``. A fixed rate is a
    Parameter; a per-step list is an array (MindSpore's ``_IteratorLearningRate``) indexed by the step the
    optimizer ran; another schedule cell is called on that step (it only computes; no peak up front). None when a
    rate cannot be read.
    """
    from mindspore.nn.learning_rate_schedule import LearningRateSchedule
    from mindspore.nn.optim import optimizer as optim_module

    per_step_list = getattr(optim_module, "_IteratorLearningRate", ())
    counter = getattr(optimizer, "global_step", None)
    if counter is None:
        return None
    step = max(int(np.asarray(counter.asnumpy()).reshape(-1)[0]) - 1, 0)  # get_lr advanced it during the step
    rates = (list(optimizer.learning_rate) if getattr(optimizer, "is_group_lr", False)
             else [optimizer.learning_rate] * len(optimizer.parameters))
    index: dict[int, int] = {}  # id(rate object) -> group
    now: list[float] = []
    peaks: list[float | None] = []
    for rate in rates:
        if id(rate) in index:
            continue
        index[id(rate)] = len(now)
        table = rate.learning_rate if isinstance(rate, per_step_list) else rate
        if isinstance(table, Tensor):  # a Parameter: one fixed rate, or one per step
            values = np.asarray(table.asnumpy(), dtype=np.float64).reshape(-1)
            now.append(float(values[min(step, values.size - 1)]))
            peaks.append(float(values.max()))
        elif isinstance(rate, LearningRateSchedule):
            now.append(_scalar(rate(Tensor(np.array(step, np.int32)))))
            peaks.append(None)
        else:
            return None
    return (now, peaks, [index[id(rate)] for rate in rates]) if now else None


def _final_probe_step(cb: Any, config: DoctorConfig, needed: int) -> int | None:
    """The run's last step when its regular probes (step 1 and every ``probe_every``) would be fewer than
    ``needed``: probing it as well lets a run too short for any multi-probe rule be judged at all (a probe step
    trains exactly as any other). None when the run is long enough, or its length is not known up front."""
    first, epochs, batches = (getattr(cb, name, None) for name in ("cur_step_num", "epoch_num", "batch_num"))
    if not all(isinstance(v, int) for v in (first, epochs, batches)) or epochs < 1 or batches < 1:
        return None
    last, every = first + epochs * batches, config.probe_every
    regular = last // every - first // every + (1 if first < 1 and every > 1 else 0)
    return last if regular < needed and last % every else None


class Doctor(Callback):
    """Diagnoses a training run: static lint at start, in-graph probes and MSD2xx rules while training.

    ``summary_dir``: where ``doctor_report.json`` / ``doctor_history.json`` (and a
    repro bundle at the first non-finite loss) are written; None writes nothing.
    ``options``: any ``DoctorConfig`` field, e.g. ``probe_every=10``,
    ``stop_on="error"`` (default None: never stop training), ``ignore=("MSD203",)``.
    After training, ``doctor.report`` holds every finding and ``doctor.history``
    the signals.
    """

    def __init__(self, summary_dir: str | Path | None = None, **options: Any) -> None:
        super().__init__()
        if summary_dir is not None:
            options["summary_dir"] = str(summary_dir)
        self.config = DoctorConfig.from_options(options)
        self.ranks = RankMonitor(self.config)  # under msrun: this rank's id, cross-rank checks MSD501-503
        self._report_dir = self.config.summary_dir  # rank 0 writes the merged report here
        self.config.summary_dir = self.ranks.rank_dir(self.config.summary_dir)  # summary_dir/rank_{id}
        self._stop_rank = Severity.parse(self.config.stop_on).rank if self.config.stop_on else None
        if self.config.probe_every < 1:
            raise ValueError(f"probe_every must be >= 1, got {self.config.probe_every}")
        self.report = Report(meta={"target": "training", "doctor": {"probe_every": self.config.probe_every},
                                   "config": self.config.values()})
        self.history = TrainingHistory()
        self._lifecycle = Lifecycle(training_rules.CURRENT_RULES)
        self._wanted = selector(self.config)
        self._disabled: set[str] = set()
        self._instrumentation: Any = None
        self._optimizer: Any = None
        self._probing = False
        self._force_probe = False
        self._final_probe: int | None = None  # a short run's last step, probed too (_final_probe_step)
        self._repro_saved = False
        self._run_context: Any = None
        self._summary: Any = None  # MindInsightWriter when summary_dir is set
        self._run_info: dict[str, Any] = {}
        self._backbone: Any = None
        self._evaluator: Any = None  # probes.evaluation.Evaluator when eval_dataset is given
        self._eval_target: tuple[Any, Any] = (None, None)  # (backbone, loss_fn) it evaluates

    # --- plumbing -----------------------------------------------------------------------

    def _guard(self, name: str, codes: Iterable[str], fn: Callable[[], Any]) -> Any:
        """Run one check; if it raises, record MSD001, switch it off, and let training go on."""
        if name in self._disabled:
            return None
        try:
            return fn()
        except CheckSkipped as why:  # cannot run with this input (e.g. an empty eval dataset): MSD002, not a bug
            self._disabled.add(name)
            self._emit([make_finding("MSD002", f"check `{name}` ({', '.join(codes)}) skipped: {why}",
                                     location={"check": name}, evidence={"codes": list(codes)})])
            return None
        except Exception as exc:  # noqa: BLE001 - the user's training must never die of the doctor
            self._disabled.add(name)
            self._emit([internal_error(name, codes, exc, "; it is disabled for the rest of the run.")])
            return None

    def _emit(self, findings: Iterable[Finding], count: bool = True) -> None:
        """Log a finding once when first seen; afterwards only count it."""
        known = {f.key: f for f in self.report.findings}
        for finding in findings:
            if not self._wanted(finding.code):
                continue
            seen = known.get(finding.key)
            if seen is not None:
                if count:
                    seen.evidence["occurrences"] = seen.evidence.get("occurrences", 1) + 1
                continue
            self.report.add(finding)
            known[finding.key] = finding
            at = f" @step {finding.step}" if finding.step is not None else ""
            logger.warning("mindspore_doctor %s [%s] %s%s: %s", finding.code, finding.rule, finding.where, at,
                           finding.message)
            if self._stop_rank is not None and finding.severity.rank >= self._stop_rank and self._run_context:
                self._run_context.request_stop()
                self._lifecycle.acted_on(finding)

    def _skipped(self, codes: Iterable[str], why: str) -> None:
        codes = [c for c in codes if self._wanted(c)]
        if codes:
            self._emit([make_finding("MSD002", f"{', '.join(codes)} skipped: {why}",
                                     location={"check": "training-probes"}, evidence={"codes": codes})])

    # --- train begin ------------------------------------------------------------------------

    def on_train_begin(self, run_context: Any) -> None:
        self._run_context = run_context
        cb = run_context.original_args()
        train_network = cb.train_network
        optimizer = cb.optimizer or _find(train_network, nn.Optimizer)
        backbone = _unwrap(cb.network)
        loss_fn = cb.loss_fn or getattr(_find(train_network, nn.WithLossCell), "_loss_fn", None)
        sink = bool(getattr(cb, "dataset_sink_mode", False))
        self.report.meta["target"] = type(backbone).__name__
        self.report.meta["dataset_sink_mode"] = sink

        self._guard("static-lint", ("MSD1",),
                    lambda: self._lint(backbone, loss_fn, optimizer, train_network, cb.train_dataset))
        self._guard("data-checks", ("MSD3",), lambda: self._check_data(cb.train_dataset, backbone, loss_fn))
        self._guard("num-classes", ("MSD215",), lambda: setattr(self.history, "num_classes",
                                                                 _num_classes(backbone, loss_fn)))
        if sink:
            self._skipped(training_rules.PROBE_CODES, "dataset_sink_mode=True runs many steps per call; per-step "
                          "probes are off and the loss is read once per sink.")
        elif optimizer is None:
            self._skipped(training_rules.PROBE_CODES, "no optimizer found in the train network.")
        else:
            self._guard("training-probes", training_rules.PROBE_CODES,
                        lambda: self._install(train_network, backbone, optimizer))
            # Only where no multi-probe rule could judge: an extra probe near the last regular one would judge
            # "persistent" conditions over a few steps, and a longer run hears which rules it missed (MSD002).
            needed = [n for code, n in training_rules.probes_needed(self.config).items() if self._wanted(code)]
            self._final_probe = _final_probe_step(cb, self.config, min(needed, default=0))
        self._guard("train-mode", ("MSD105",), lambda: self._check_train_mode(backbone, None))
        if self.config.eval_dataset is not None and self.config.eval_every:
            from mindspore_doctor.probes.evaluation import Evaluator

            self._evaluator = Evaluator(self.config.eval_dataset, self.config)
            self._eval_target = (backbone, loss_fn)
        self._emit(self.ranks.on_train_begin(cb))  # a collective: every rank, never skipped
        self._guard("mindinsight", (), lambda: self._open_summary(cb, backbone, optimizer, loss_fn))

    def _open_summary(self, cb: Any, backbone: Any, optimizer: Any, loss_fn: Any) -> None:
        """The Doctor's own summary file (MindSpore allows one SummaryRecord, SummaryCollector may hold it)."""
        if not (self.config.summary_dir and self.config.mindinsight):
            return
        from mindspore_doctor.export.mindinsight import MindInsightWriter

        self._backbone = backbone
        self._summary = MindInsightWriter(self.config.summary_dir, max_layers=self.config.mindinsight_max_layers,
                                          histogram_layers=self.config.histogram_layers,
                                          flush_seconds=self.config.summary_flush_seconds)
        dataset = cb.train_dataset
        lr = getattr(optimizer, "learning_rate", None)
        self._run_info = {
            "optimizer": type(optimizer).__name__ if optimizer is not None else None,
            "learning_rate": _scalar(lr) if lr is not None and getattr(lr, "size", 0) == 1 else None,
            "loss_function": type(loss_fn).__name__ if loss_fn is not None else None,
            "epoch": getattr(cb, "epoch_num", None),
            "batch_size": dataset.get_batch_size() if dataset is not None else None,
            "train_dataset_size": dataset.get_dataset_size() if dataset is not None else None,
            "network": type(backbone).__name__,
            "parallel_mode": getattr(cb, "parallel_mode", None),
            "device_num": getattr(cb, "device_number", None),
        }

    def _write_summary_epoch(self) -> None:
        """Weight histograms of the layers that matter, then append the buffered steps to disk."""
        if self._summary is None:
            return
        params = {p.name: p for p in self._backbone.trainable_params()}
        names = self._summary.histogram_targets(self.report, self.history.parameter_order or list(params))
        step = self.history.steps[-1].step if self.history.steps else 0
        self._summary.write_histograms(step, weights={n: params[n].asnumpy() for n in names if n in params})
        self._summary.flush()

    def _close_summary(self) -> None:
        if self._summary is not None:
            summary, self._summary = self._summary, None
            summary.close(self.report, self._run_info, episodes=self._lifecycle.episodes(self.report))

    def _lint(self, backbone: Any, loss_fn: Any, optimizer: Any, train_network: Any, dataset: Any) -> None:
        """Static lint with what only training has: the train cell Model built (MSD112), a real batch (MSD114)."""
        from mindspore_doctor.static.graph import is_elementwise_loss
        from mindspore_doctor.static.inspector import lint

        config, sample = self.config, None
        if self._wanted("MSD114") and loss_fn is not None and is_elementwise_loss(loss_fn):
            sample = self._guard("silent-broadcast", ("MSD114",), lambda: _sample_inputs(dataset, backbone, config))
            if sample is None:  # MSD002 already says why; lint's generic "needs sample_inputs" would only repeat it
                config = dataclasses.replace(config, ignore=(*config.ignore, "MSD114"))
        self._emit(lint(backbone, loss_fn=loss_fn, optimizer=optimizer, sample_inputs=sample,
                        train_network=train_network, config=config).findings)

    def _check_data(self, train_dataset: Any, backbone: Any, loss_fn: Any) -> None:
        from mindspore_doctor.data import check_data

        if train_dataset is not None:
            report = check_data(train_dataset, self.config.eval_dataset, network=backbone, loss_fn=loss_fn,
                                config=self.config)
            self._emit(report.findings)

    def _install(self, train_network: Any, backbone: Any, optimizer: Any) -> None:
        from mindspore_doctor.probes.instrument import Instrumentation

        self._instrumentation = Instrumentation(train_network, backbone, optimizer)
        self._optimizer = optimizer
        self.history.parameter_order = list(self._instrumentation.parameter_names)
        self.history.parameter_shapes = dict(self._instrumentation.parameter_shapes)

    def _check_train_mode(self, backbone: Any, step: int | None) -> None:
        cells = [path or "<network>" for path, cell in backbone.cells_and_names() if not cell.training]
        self._emit(training_rules.train_mode_off(cells, step), count=False)

    # --- steps --------------------------------------------------------------------------------

    def on_train_step_begin(self, run_context: Any) -> None:
        if self._instrumentation is None:
            return
        step = run_context.original_args().cur_step_num
        self._probing = (self._force_probe or step == 1 or step % self.config.probe_every == 0
                         or step == self._final_probe)
        self._force_probe = False
        self._guard("training-probes", training_rules.PROBE_CODES,
                    lambda: self._instrumentation.set_probing(self._probing))

    def on_train_step_end(self, run_context: Any) -> None:
        cb = run_context.original_args()
        self._emit(self.ranks.on_step_end(cb))  # before any early return: a collective every N steps
        signals = self._guard("read-loss", ("MSD201", "MSD214"), lambda: self._read_outputs(cb))
        if signals is None:
            return
        if self._probing and self._instrumentation is not None:
            self._guard("training-probes", training_rules.PROBE_CODES, lambda: self._instrumentation.read_into(signals))
            self._guard("learning-rate", ("MSD210",), lambda: self._read_learning_rate(signals))
        self.history.append(signals)
        if signals.loss is not None and not math.isfinite(signals.loss):
            self._evaluate(TrainingHistory(steps=[signals]), codes=("MSD201",))
            if not self._repro_saved:
                self._repro_saved = True
                self._force_probe = True
                self._guard("repro-bundle", ("MSD201",), lambda: self._save_repro(cb, signals))
        if self._probing or cb.dataset_sink_mode:
            self._evaluate(self._recent_history())
            if self._instrumentation is not None:
                self._guard("train-mode", ("MSD105",), lambda: self._check_train_mode(
                    self._instrumentation.network, signals.step))
        if self._summary is not None:
            self._guard("mindinsight", (), lambda: self._summary.write_step(
                signals, self.report, episodes=self._lifecycle.episodes(self.report)))

    def _read_learning_rate(self, signals: StepSignals) -> None:
        """The step's learning rate, and the schedule's peak so far, for the optimizer and for each of its groups:
        MSD210 judges updates as at the peak rate of the parameter's own group."""
        read = _learning_rates(self._optimizer)
        if read is None:
            return
        now, peaks, groups = read
        history = self.history
        signals.learning_rate = max(now)
        history.peak_learning_rate = max(v for v in (history.peak_learning_rate, *peaks, *now) if v is not None)
        if len(now) > 1:
            signals.group_learning_rates = now
            before = history.group_peak_learning_rates or [0.0] * len(now)
            history.group_peak_learning_rates = [max(v for v in values if v is not None)
                                                 for values in zip(before, peaks, now)]
            history.lr_groups = history.lr_groups or dict(zip(history.parameter_order, groups))

    def _read_outputs(self, cb: Any) -> StepSignals:
        outputs = cb.net_outputs
        signals = StepSignals(step=int(cb.cur_step_num), epoch=int(cb.cur_epoch_num))
        if isinstance(outputs, (tuple, list)):
            if len(outputs) >= 3 and hasattr(outputs[1], "dtype") and "bool" in str(outputs[1].dtype).lower():
                signals.overflow = bool(np.asarray(outputs[1].asnumpy()).any())
                signals.loss_scale = _scalar(outputs[2])
            outputs = outputs[0] if outputs else None
        if outputs is not None and hasattr(outputs, "asnumpy"):
            signals.loss = _scalar(outputs)
        return signals

    def _recent_history(self) -> TrainingHistory:
        """Head and tail of the history: rules re-run often, so each run stays cheap on long trainings.

        The tail holds every loss window a rule reads (MSD203's ``plateau_windows`` + 1, MSD202's rolling median)
        and, measured in steps, the probes the probe rules read (4 for MSD210) plus the steps since the last
        evaluation, at any ``probe_every``.
        """
        config = self.config
        head = config.loss_window
        tail = ((config.plateau_windows + 1) * config.loss_window + config.diverge_smoothing
                + config.probe_every * (max(training_rules.probes_needed(config).values()) + 1))
        steps = self.history.steps
        view = steps if len(steps) <= head + tail else steps[:head] + steps[-tail:]
        return dataclasses.replace(self.history, steps=view)

    def _evaluate(self, history: TrainingHistory, codes: Iterable[str] | None = None, count: bool = True) -> None:
        """Run the rules on ``history``; log what is new, and tell the lifecycle which findings still hold."""
        holding: dict[str, list[Finding]] = {}
        for rule_codes, rule in training_rules.TRAINING_RULES:
            if codes is not None and not set(rule_codes) & set(codes):
                continue
            if codes is None and "MSD201" in rule_codes and count:
                continue  # checked on every step already
            if not any(self._wanted(c) for c in rule_codes):
                continue
            name = f"rule {rule_codes[0]}"
            found = self._guard(name, rule_codes, lambda: rule(history, self.config))
            self._emit(found or [], count=count)
            current = training_rules.CURRENT_RULES.get(rule_codes[0])
            if current is None or found is None:
                continue
            now = found if current is rule else self._guard(name, rule_codes, lambda: current(history, self.config))
            if now is not None:
                holding[rule_codes[0]] = now
        if holding and history.steps:
            self._lifecycle.observe(history.steps[-1].step, self.report.findings, holding)

    # --- epochs and the end -------------------------------------------------------------------

    def on_train_epoch_end(self, run_context: Any) -> None:
        cb = run_context.original_args()
        if self._evaluator is not None and cb.cur_epoch_num % self.config.eval_every == 0:
            self._guard("evaluation", ("MSD401", "MSD402", "MSD404", "MSD405"), lambda: self._run_evaluation(cb))
        self._evaluate(self._recent_history())
        self._guard("mindinsight", (), self._write_summary_epoch)
        self._guard("write-report", (), self._write_files)

    def _run_evaluation(self, cb: Any) -> None:
        self._evaluator.run(*self._eval_target, cb.cur_epoch_num, train_dataset=cb.train_dataset)
        self.report.meta["evaluation"] = self._evaluator.to_dict()  # in every report written from now on

    def on_train_end(self, run_context: Any) -> None:
        self._evaluate(self.history, count=False)
        self._lifecycle.close(self.report)  # transient findings that no longer hold end as resolved (info)
        if self._optimizer is not None and "training-probes" not in self._disabled:  # the probes were installed
            codes = [c for c in training_rules.PROBE_CODES if self._wanted(c) and f"rule {c}" not in self._disabled]
            self._guard("probe-count", ("MSD002",), lambda: self._emit(
                training_rules.too_few_probes(self.history, self.config, codes), count=False))
        self._emit(self.ranks.on_train_end(run_context.original_args()), count=False)
        if self._evaluator is not None:
            self._guard("evaluation", ("MSD401", "MSD402", "MSD404", "MSD405"),
                        lambda: self._emit(self._evaluator.findings(), count=False))
        self._restore()
        self._guard("diagnosis", (), self._diagnose)
        print(f"mindspore_doctor summary ({len(self.history.steps)} steps):\n{self.report}")
        self._guard("mindinsight", (), self._close_summary)
        self._guard("write-report", (), self._write_files)
        self._guard("html-report", (), self._write_html)
        self._guard("merge-ranks", (), self._merge_ranks)  # last: a collective every rank enters

    def _diagnose(self) -> None:
        from mindspore_doctor.diagnosis import diagnose

        self.report.meta["diagnosis"] = diagnose(self.report, history=self.history).to_dict()

    def _write_html(self) -> None:
        if self.config.summary_dir and self.config.html_report:
            from mindspore_doctor.export.html import HTML_FILE, write_html

            write_html(self.report, self.history, Path(self.config.summary_dir) / HTML_FILE, config=self.config)

    def _merge_ranks(self) -> None:
        """Rank 0 writes every rank's findings to summary_dir/doctor_report.json (``location["ranks"]``)."""
        self.merged_report = self.ranks.merge_reports(self.report)
        if self.merged_report is not None and self.ranks.active and self._report_dir:
            _io.atomic_write_text(Path(self._report_dir) / REPORT_FILE, self.merged_report.to_json())

    def __exit__(self, *err: Any) -> None:
        self._restore()  # also when training raised: never leave the user's cells swapped

    def _restore(self) -> None:
        if self._instrumentation is not None:
            instrumentation, self._instrumentation = self._instrumentation, None
            self._guard("restore", (), instrumentation.restore)

    def _write_files(self) -> None:
        if not self.config.summary_dir:
            return
        folder = Path(self.config.summary_dir)
        _io.atomic_write_text(folder / REPORT_FILE, self.report.to_json())
        _io.atomic_write_text(folder / HISTORY_FILE, json.dumps(self.history.to_dict()))

    def _save_repro(self, cb: Any, signals: StepSignals) -> None:
        """The batch that gave the first non-finite loss, with the last probed statistics."""
        if not self.config.summary_dir:
            return
        folder = Path(self.config.summary_dir)
        batch = cb.train_dataset_element or ()
        arrays = {f"input_{i}": t.asnumpy() for i, t in enumerate(batch) if hasattr(t, "asnumpy")}
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        _io.atomic_write_bytes(folder / f"repro_step{signals.step}.npz", buffer.getvalue())
        probed = self.history.probed()
        meta = {
            "step": signals.step,
            "epoch": signals.epoch,
            "loss": str(signals.loss),
            "inputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in arrays.items()},
            "last_probed_step": probed[-1].to_dict() if probed else None,
            "parameter_order": self.history.parameter_order,
        }
        _io.atomic_write_text(folder / f"repro_step{signals.step}.json",
                              json.dumps(meta, indent=2, default=str))
