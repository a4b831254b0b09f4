"""The loop-agnostic core of the training Doctor: probes, history, rules, evaluation and reports of one run.

Adapters drive it: ``training/callback.py`` from ``Model.train``'s callback hooks, ``training/loop.py`` from a
hand-written loop (``with doctor.watch(...) as run: ... run.step(loss)``). Each hook receives the run's state
as an object with the attribute names of MindSpore's ``RunContext.original_args()`` (``cur_step_num``,
``net_outputs``, ``train_dataset_element``...), so the rank monitor and every check read one shape.

What the run writes (reports, event files, the repro bundle) is ``training/outputs.py``'s: the session hands it
the findings and signals. Nothing here may break the user's training: a check that raises becomes MSD001 and is
switched off.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

import mindspore as ms
from mindspore import Tensor

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.cells import num_classes
from mindspore_doctor.checks import attempt, selector
from mindspore_doctor.config import DEFAULT_PROBE_EVERY, DoctorConfig
from mindspore_doctor.distributed import RankMonitor
from mindspore_doctor.findings import Finding, Report, Severity
from mindspore_doctor.lifecycle import Lifecycle
from mindspore_doctor.probes.learning_rate import learning_rates
from mindspore_doctor.probes.loss import DeferredLossReader, LossRead, StepLossReader
from mindspore_doctor.rules import training as training_rules
from mindspore_doctor.signals import StepSignals, TrainingHistory
from mindspore_doctor.static.start_state import mark_trained, start_state
from mindspore_doctor.training.evaluation_schedule import EvaluationSchedule
from mindspore_doctor.training.memory import give_back_freed_memory, resident_mb
from mindspore_doctor.training.outputs import RunOutputs
from mindspore_doctor.training.probe_budget import ProbeBudget
from mindspore_doctor.training.sigterm import SigtermReport, TrainingTerminated

logger = logging.getLogger("mindspore_doctor")

_EVALUATION_CODES = ("MSD401", "MSD402", "MSD404", "MSD405")
_LABEL_CODES = ("MSD311",)
_OTHER_SET_CODES = {"target_eval": ("MSD407",), "holdout": ()}


def final_probe_step(args: Any, config: DoctorConfig, needed: int) -> int | None:
    """The run's last step when its regular probes (step 1 and every ``probe_every``) would be fewer than
    ``needed``: probing it as well lets a run too short for any multi-probe rule be judged at all (a probe step
    trains exactly as any other). None when the run is long enough, or its length is not known up front."""
    first, epochs, batches = (getattr(args, name, None) for name in ("cur_step_num", "epoch_num", "batch_num"))
    if not all(isinstance(v, int) for v in (first, epochs, batches)) or epochs < 1 or batches < 1:
        return None
    last, every = first + epochs * batches, config.probe_every
    regular = last // every - first // every + (1 if first < 1 and every > 1 else 0)
    return last if regular < needed and last % every else None


def _run_state(args: Any, name: str) -> Any:
    """``args.<name>``, or None where the run has not set it yet: MindSpore's ``cb_params`` raises KeyError, not
    AttributeError, for a name it has not set (``cur_epoch_num`` until the first epoch begins)."""
    try:
        return getattr(args, name, None)
    except KeyError:
        return None


def _loss_reader(config: DoctorConfig) -> StepLossReader | DeferredLossReader:
    how = config.loss_read
    if how == "auto":
        how = "step" if ms.get_context("device_target") == "CPU" else "deferred"
    if how == "step":
        return StepLossReader()
    if how == "deferred":
        return DeferredLossReader(config.probe_every)
    raise ValueError(f"loss_read must be 'auto', 'step' or 'deferred', got {config.loss_read!r}")


class DoctorSession:
    """One training run under the Doctor. ``report`` holds every finding, ``history`` the signals."""

    def __init__(self, config: DoctorConfig) -> None:
        if config.probe_every < 1:
            raise ValueError(f"probe_every must be >= 1, got {config.probe_every}")
        for name in ("eval_budget", "probe_budget"):
            if getattr(config, name) is not None and not getattr(config, name) >= 0:
                raise ValueError(f"{name} must be None or >= 0, got {getattr(config, name)}")
        self.config = config
        self.ranks = RankMonitor(config)  # under msrun: this rank's id, cross-rank checks MSD501-503
        report_dir = config.summary_dir  # rank 0 writes the merged report here
        config.summary_dir = self.ranks.rank_dir(config.summary_dir)  # summary_dir/rank_{id}
        self._stop_rank = Severity.parse(config.stop_on).rank if config.stop_on else None
        self.report = Report(meta={"target": "training", "doctor": {"probe_every": config.probe_every},
                                   "config": config.values()})
        self._history = TrainingHistory()
        self._quick_losses: list[tuple[Any, float, Any]] = []
        """(step, loss, epoch) of the steps ``_quick_step`` read, not yet in the history (``history`` adds them)."""
        self.merged_report: Report | None = None
        self._disabled: set[str] = set()
        self._outputs = RunOutputs(config, self.report, lambda: self.history, self._guard, self._disabled, report_dir)
        self._loss_reader = _loss_reader(config)
        self._lifecycle = Lifecycle(training_rules.CURRENT_RULES)
        self._wanted = selector(config)
        self._request_stop: Callable[[], None] | None = None
        self._instrumentation: Any = None
        self._optimizer: Any = None
        self._probing = False
        self._probe_steps: list[int] = []  # the steps probed so far
        self._probe_budget = (ProbeBudget(config.probe_budget, dense=max(training_rules.probes_needed(config).values()))
                              if config.probe_budget is not None
                              and config.probe_every == DEFAULT_PROBE_EVERY and not self.ranks.active else None)
        self._sink = False  # dataset_sink_mode: many steps a call
        self._quick_steps = False  # a step that is not probed only reads its loss (_quick_step)
        self._force_probe = False
        self._final_probe: int | None = None  # a short run's last step, probed too (final_probe_step)
        self._probes_needed = 0  # the fewest probes a multi-probe rule wanted needs (final_probe_step)
        self._unread: list[StepSignals] = []  # steps whose loss the (deferred) reader has not handed back yet
        self._repro_saved = False
        self._backbone: Any = None
        self._evaluator: Any = None  # probes.evaluation.Evaluator when eval_dataset is given
        self._eval_schedule: EvaluationSchedule | None = None  # the epochs it evaluates at
        self._input_check: Any = None  # runners.network_inputs.NetworkInputCheck: MSD304 held until the first step
        self._data_check: tuple[Any, Any, Any] | None = None  # (train_dataset, backbone, loss_fn): after the first step
        self._resident_before_first_step: float | None = None  # MB, where the probe steps have a graph of their own
        self._eval_target: tuple[Any, Any] = (None, None)  # (backbone, loss_fn) it evaluates
        self._args: Any = None  # the run's state object, for ending it from a signal handler
        self._ending = False
        self._sigterm = SigtermReport(lambda error: self.end(self._args, error))

    # --- plumbing -----------------------------------------------------------------------

    def _guard(self, name: str, codes: Iterable[str], fn: Callable[[], Any]) -> Any:
        """Run one check; if it cannot run (MSD002) or raises (MSD001), switch it off and let training go on."""
        if name in self._disabled:
            return None
        result, failure = attempt(name, codes, fn, "; it is disabled for the rest of the run.")
        if failure is not None:
            self._disabled.add(name)
            self._emit([failure])
        return result

    def _emit(self, findings: Iterable[Finding], count: bool = True) -> None:
        """Log a finding once when first seen; afterwards only count it."""
        findings = list(findings)
        if not findings:  # every step hands its (usually empty) findings here: no index of the report then
            return
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
            if self._stop_rank is not None and finding.severity.rank >= self._stop_rank and self._request_stop:
                self._request_stop()
                self._lifecycle.acted_on(finding)

    def _skipped(self, codes: Iterable[str], why: str) -> None:
        codes = [c for c in codes if self._wanted(c)]
        if codes:
            self._emit([make_finding("MSD002", f"{', '.join(codes)} skipped: {why}",
                                     location={"check": "training-probes"}, evidence={"codes": codes})])

    # --- begin ------------------------------------------------------------------------------

    def begin(self, args: Any, backbone: Any, *, loss_fn: Any, optimizer: Any, request_stop: Callable[[], None],
              check_mode: bool = True, inputs_every_step: bool = True) -> None:
        """Static lint and probes before the first step; the data checks as it ends (``_run_data_checks``).
        ``check_mode``: the network is already in the mode it trains in (``Model.train`` sets it; a hand-written
        loop may call ``set_train()`` later). ``inputs_every_step``: every step hands its inputs to ``step_begin``
        (``Model.train``'s ``train_dataset_element``), so the probe steps can sample the activations in a forward
        pass of their own."""
        self._request_stop = request_stop
        self._args = args
        self._guard("sigterm-report", (), self._sigterm.catch)
        sink = self._sink = bool(getattr(args, "dataset_sink_mode", False))
        self.report.meta["target"] = type(backbone).__name__
        self.report.meta["dataset_sink_mode"] = sink

        self._guard("static-lint", ("MSD1",),
                    lambda: self._lint(backbone, loss_fn, optimizer, args.train_network, args.train_dataset))
        self._data_check = (args.train_dataset, backbone, loss_fn)
        self._guard("num-classes", ("MSD215",), lambda: setattr(self.history, "num_classes",
                                                                 num_classes(backbone, loss_fn)))
        self._guard("start-state", ("MSD205", "MSD215"), lambda: setattr(self.history, "start",
                                                                          start_state(backbone, optimizer)))
        if sink:
            self._skipped(training_rules.PROBE_CODES, "dataset_sink_mode=True runs many steps per call; per-step "
                          "probes are off and the loss is read once per sink.")
        elif optimizer is None:
            self._skipped(training_rules.PROBE_CODES, "no optimizer found in the train network.")
        else:
            self._guard("training-probes", training_rules.PROBE_CODES,
                        lambda: self._install(backbone, optimizer, args.train_network, inputs_every_step))
            # Only where no multi-probe rule could judge: an extra probe near the last regular one would judge
            # "persistent" conditions over a few steps, and a longer run hears which rules it missed (MSD002).
            needed = [n for code, n in training_rules.probes_needed(self.config).items() if self._wanted(code)]
            self._probes_needed = min(needed, default=0)
            self._final_probe = final_probe_step(args, self.config, self._probes_needed)
        if check_mode:
            self._guard("train-mode", ("MSD105",), lambda: self._check_train_mode(backbone, None))
        if self.config.eval_dataset is not None and self.config.eval_every:
            self._guard("evaluation", _EVALUATION_CODES, lambda: self._open_evaluator(backbone, loss_fn, args))
        self._emit(self.ranks.on_train_begin(args))  # a collective: every rank, never skipped
        self._backbone = backbone
        self._outputs.open(args, backbone, optimizer, loss_fn)
        self._quick_steps = not (sink or self.ranks.active or self._loss_reader.deferred or self._outputs.has_writers)

    def _open_evaluator(self, backbone: Any, loss_fn: Any, args: Any) -> None:
        from mindspore_doctor.probes.evaluation import Evaluator

        self._evaluator = Evaluator(self.config.eval_dataset, self.config)
        self._eval_target = (backbone, loss_fn)
        # Under msrun every rank evaluates at the same epochs: a budget timed on each rank could pick different ones.
        budget = None if self.ranks.active else self.config.eval_budget
        last = _run_state(args, "epoch_num")
        self._eval_schedule = EvaluationSchedule(self.config.eval_every, budget,
                                                 last_epoch=last if isinstance(last, int) else None)

    def _lint(self, backbone: Any, loss_fn: Any, optimizer: Any, train_network: Any, dataset: Any) -> None:
        """Static lint with what only training has: the train cell (MSD112), a real batch (MSD114)."""
        from mindspore_doctor.data.sampling import first_batch_inputs
        from mindspore_doctor.static.graph import is_elementwise_loss
        from mindspore_doctor.runners.lint import lint

        config, sample = self.config, None
        if self._wanted("MSD114") and loss_fn is not None and is_elementwise_loss(loss_fn):
            sample = self._guard("silent-broadcast", ("MSD114",),
                                 lambda: first_batch_inputs(dataset, backbone, config))
            if sample is None:  # MSD002 already says why; lint's generic "needs sample_inputs" would only repeat it
                config = dataclasses.replace(config, ignore=(*config.ignore, "MSD114"))
        self._emit(lint(backbone, loss_fn=loss_fn, optimizer=optimizer, sample_inputs=sample,
                        train_network=train_network, config=config).findings)

    def _check_data(self, train_dataset: Any, backbone: Any, loss_fn: Any) -> None:
        from mindspore_doctor.runners.check_data import check_data_for_training

        if train_dataset is not None:
            report, self._input_check = check_data_for_training(train_dataset, self.config.eval_dataset, backbone,
                                                                loss_fn, self.config)
            self._emit(report.findings)

    def _run_data_checks(self, batch: Any) -> None:
        """The data checks held since ``begin``, then MSD304 judged on ``batch`` (the first step's inputs, when the
        step hands them over; None: judged on the data).

        In GRAPH_MODE the first step compiles the train graph: the run's peak of host memory. What the data checks
        leave (their read of the pipeline, their eager forward pass) sat under that peak when they ran before the
        step (RegNet, corpus recipe: +24 MB of the peak); now they run as that step ends, after the compile's
        scratch went back to the system. A run that ends before its first step ends gets them in ``end``."""
        train_dataset, backbone, loss_fn = self._data_check
        self._data_check = None
        self._guard("data-checks", ("MSD3",), lambda: self._check_data(train_dataset, backbone, loss_fn))
        self._judge_network_inputs(batch)

    def _judge_network_inputs(self, batch: Any) -> None:
        """MSD304, held back by the data checks, judged once on the first batch a step hands over: a loop may
        scale the batch between the dataset and the network (None: the step did not say; judged on the data)."""
        check, self._input_check = self._input_check, None
        if check is not None:
            judged = self._guard("network-inputs", ("MSD304",), lambda: check.judge(batch))
            self._emit(check.held if judged is None else judged)

    def _install(self, backbone: Any, optimizer: Any, train_cell: Any, inputs_every_step: bool) -> None:
        from mindspore_doctor.probes.instrument import Instrumentation, called_loss_network

        # Under msrun a graph of the Doctor's own would compile in the parallel context (collectives, sharding).
        loss_network = called_loss_network(train_cell) if inputs_every_step and not self.ranks.active else None
        self._instrumentation = instrumentation = Instrumentation(backbone, optimizer, train_cell,
                                                                  self.config.sampled_activations, loss_network)
        self._optimizer = optimizer
        self.history.parameter_order = list(instrumentation.parameter_names)
        self.history.parameter_shapes = dict(instrumentation.parameter_shapes)
        unprobed = dict(instrumentation.unprobed)
        why = unprobed.pop("optimizer", None)
        if why is not None:
            self._skipped(training_rules.PARAMETER_PROBE_CODES,
                          f"the optimizer `{type(optimizer).__name__}` cannot carry the gradient probe: {why}. The "
                          "activation probes still run.")
        if instrumentation.unread_gradients and why is None:
            names = instrumentation.unread_gradients
            shown = ", ".join(f"`{n}`" for n in names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            self._skipped(("MSD207", "MSD208"), f"the gradients of {shown} are not read: a gradient summed from "
                          "several uses of its weight (a recurrent layer's, a shared one's) trains differently in the "
                          "last bit when a probe reads it before a weight decay other than `nn.Optimizer."
                          "decay_weight` (MindSpore 2.10). Their updates and weights are still measured.")
        if unprobed:
            cells = ", ".join(f"`{path}` ({reason})" for path, reason in unprobed.items())
            self._skipped(training_rules.ACTIVATION_PROBE_CODES, f"activation cells not probed: {cells}.")
        if instrumentation.unsampled:
            sampled, left = len(instrumentation.activations), instrumentation.unsampled
            shown = ", ".join(f"`{p}`" for p in left[:4]) + (f" and {len(left) - 4} more" if len(left) > 4 else "")
            self._skipped(training_rules.ACTIVATION_PROBE_CODES,
                          f"{len(left)} of the network's {sampled + len(left)} activation cells are not sampled "
                          f"({shown}): the compiled step samples {sampled}, spread evenly through the network, each "
                          "at the cost of a gather and a copy on every step. `Doctor(sampled_activations=None)` "
                          "samples every one.")

    def _check_train_mode(self, backbone: Any, step: int | None) -> None:
        from mindspore_doctor.static.layers import mode_dependent_cells

        cells = [path or "<network>" for path, cell in backbone.cells_and_names() if not cell.training]
        if not cells:  # every cell trains: no need to walk the network for what eval mode changes (RegNet: 8 ms)
            return
        effects = {path or "<network>": effect for path, effect in mode_dependent_cells(backbone).items()}
        self._emit(training_rules.train_mode_off(cells, step, effects), count=False)

    # --- steps --------------------------------------------------------------------------------

    def plan_final_probe(self, args: Any) -> None:
        """The run's length became known after it started (a hand-written loop over batches that are no sized
        dataset, after its first epoch): probe its last step when the run is too short, as ``begin`` does."""
        if self._final_probe is None and self._instrumentation is not None:
            self._final_probe = final_probe_step(args, self.config, self._probes_needed)

    def step_begin(self, step: int, inputs: Any = None) -> None:
        """Before step ``step`` runs: switch the probes on when it is a probe step. ``inputs``: the step's batch,
        when known (``Model.train``): a probe step samples the activations in a forward pass over it, before the
        step, so with the weights the step's own forward pass sees."""
        if self._instrumentation is None:
            return
        due = step == 1 or step % self.config.probe_every == 0
        self._probing = (self._force_probe or step == self._final_probe
                         or (due and (self._probe_budget is None or self._probe_budget.allows(step))))
        self._force_probe = False
        if self._probing and self._probe_budget is not None:
            self._probe_budget.began(step)
        if self._data_check is not None and self._instrumentation.train_cell is not None:  # the first step
            self._resident_before_first_step = resident_mb()
        if self._probing or self._instrumentation.probing:  # a step that neither probes nor ends probing: nothing
            self._guard("training-probes", training_rules.PROBE_CODES,
                        lambda: self._instrumentation.set_probing(self._probing))
        if self._probing:
            self._guard("activation-samples", training_rules.ACTIVATION_PROBE_CODES,
                        lambda: self._instrumentation.sample_activations(inputs))

    def _settle_probe_phase(self) -> None:
        before, self._resident_before_first_step = self._resident_before_first_step, None
        after = resident_mb() if before is not None else None
        if after is not None:
            self._guard("training-probes", training_rules.PROBE_CODES,
                        lambda: self._instrumentation.settle_probe_phase(before, after))

    def step_end(self, args: Any) -> None:
        if self._quick_steps and not self._probing and self._data_check is None and self._quick_step(args):
            return
        if self.ranks.active:  # before any early return: a collective every N steps
            self._emit(self.ranks.on_step_end(args))
        signals = StepSignals(step=int(args.cur_step_num), epoch=int(args.cur_epoch_num))
        reads = self._guard("read-loss", ("MSD201", "MSD214"), lambda: self._loss_reader.record(args.net_outputs))
        if self._data_check is not None:  # the first step, finished (its loss read): its compile's scratch goes back
            self._settle_probe_phase()
            give_back_freed_memory()
            self._run_data_checks(getattr(args, "train_dataset_element", None))
        if reads is None:
            return
        self.history.append(signals)
        self._unread.append(signals)
        if self._probing and self._instrumentation is not None:
            watched = self._outputs.watched_parameters()
            updates = self._guard("training-probes", training_rules.PROBE_CODES,
                                  lambda: self._instrumentation.read_into(signals, watched))
            if updates:
                self._outputs.write_updates(signals.step, updates)
            self._guard("learning-rate", ("MSD210",), lambda: self._read_learning_rate(signals))
        self._take(reads, args)  # after the probes: the summary writes the step's signals as they are now
        if self._probing or self._sink:
            self._catch_up(args)
            self._evaluate(self._recent_history())
            if self._instrumentation is not None:
                self._guard("train-mode", ("MSD105",), lambda: self._check_train_mode(
                    self._instrumentation.network, signals.step))
        if self._probing:
            self._probe_steps.append(signals.step)
            if self._probe_budget is not None:
                self._probe_budget.ended()

    def _quick_step(self, args: Any) -> bool:
        """The common step (no probe, the loss read now, no event file, one rank): its loss kept, and nothing else,
        in as few Python operations as it takes. Right after a step every Python line is slow (measured on CPU: a
        dict lookup ~20 us after a Transformer step: the step leaves the caches cold), so the step's signals are
        made later, all at once (``history``). False: not such a step, or its loss is no single float; the full
        path reads it."""
        outputs = args.net_outputs
        if not isinstance(outputs, Tensor):
            return False
        try:
            loss = outputs.item()
        except Exception:  # noqa: BLE001 - several values, or a failed read: the full path's guarded read says
            return False
        if type(loss) is not float:  # an integer or bool loss: the full path reads it as a float
            return False
        self._quick_losses.append((args.cur_step_num, loss, args.cur_epoch_num))
        if not math.isfinite(loss):
            self._nonfinite(self.history.steps[-1], args)
        return True

    @property
    def history(self) -> TrainingHistory:
        """Every step's signals so far: the quick steps' too, made now (``_quick_step``)."""
        if self._quick_losses:
            quick, self._quick_losses = self._quick_losses, []
            self._history.steps.extend(StepSignals(int(step), loss, None if epoch is None else int(epoch))
                                       for step, loss, epoch in quick)
        return self._history

    def _catch_up(self, args: Any) -> None:
        """Hand the steps the deferred reader holds to the history (a host read: probe steps and epoch ends)."""
        if self._unread and self._loss_reader.deferred:
            self._take(self._guard("read-loss", ("MSD201", "MSD214"), self._loss_reader.read) or [], args)

    def _take(self, reads: list[LossRead], args: Any) -> None:
        """The unread steps, oldest first, get their loss; the first non-finite one is judged at its step."""
        if not reads:
            return
        taken, self._unread = self._unread[:len(reads)], self._unread[len(reads):]
        for signals, read in zip(taken, reads):
            signals.loss, signals.overflow, signals.loss_scale = read.loss, read.overflow, read.loss_scale
            if signals.loss is not None and not math.isfinite(signals.loss):
                self._nonfinite(signals, args)
            if self._outputs.has_writers:
                self._outputs.write_step(signals, self._lifecycle.episodes(self.report))

    def _nonfinite(self, signals: StepSignals, args: Any) -> None:
        self._evaluate(TrainingHistory(steps=[signals]), codes=("MSD201",))
        if not self._repro_saved:
            self._repro_saved = True
            self._force_probe = True
            batch = args.train_dataset_element if signals.step == args.cur_step_num else None
            self._guard("repro-bundle", ("MSD201",), lambda: self._outputs.save_repro(batch, signals))

    def _read_learning_rate(self, signals: StepSignals) -> None:
        """The step's learning rate, and the schedule's peak so far, for the optimizer and for each of its groups:
        MSD210 judges updates as at the peak rate of the parameter's own group."""
        read = learning_rates(self._optimizer)
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

    def _recent_history(self) -> TrainingHistory:
        """Head and tail of the history: rules re-run often, so each run stays cheap on long trainings.

        The tail holds every loss window a rule reads (MSD203's ``plateau_windows`` + 1, MSD202's rolling median)
        and the probes the probe rules read (4 for MSD210) plus the steps since the last evaluation, however far
        apart ``probe_every`` and ``probe_budget`` put them.
        """
        config = self.config
        head = config.loss_window
        probes = max(training_rules.probes_needed(config).values()) + 1
        steps = self.history.steps
        span = steps[-1].step - self._probe_steps[-probes] + 1 if len(self._probe_steps) >= probes and steps else 0
        tail = ((config.plateau_windows + 1) * config.loss_window + config.diverge_smoothing
                + max(config.probe_every * probes, span))
        if len(steps) <= head + tail:
            return self.history
        view = copy.copy(self.history)  # dataclasses.replace re-runs __init__: half of this method's time
        view.steps = steps[:head] + steps[-tail:]
        return view

    def _evaluate(self, history: TrainingHistory, codes: Iterable[str] | None = None, count: bool = True) -> None:
        """Run the rules on ``history``; log what is new, and tell the lifecycle which findings still hold.

        The rules share what they derive from ``history`` (its finite losses, recent probes, ...: ``shared_work``),
        so a probe step pays for each once."""
        holding: dict[str, list[Finding]] = {}
        wanted = None if codes is None else set(codes)
        with training_rules.shared_work():
            for rule_codes, rule in training_rules.TRAINING_RULES:
                if wanted is not None and wanted.isdisjoint(rule_codes):
                    continue
                if wanted is None and "MSD201" in rule_codes and count:
                    continue  # checked on every step already
                if not any(self._wanted(c) for c in rule_codes):
                    continue
                name = f"rule {rule_codes[0]}"
                found = self._guard(name, rule_codes, lambda: rule(history, self.config))
                if found:
                    self._emit(found, count=count)
                current = training_rules.CURRENT_RULES.get(rule_codes[0])
                if current is None or found is None:
                    continue
                if current is not rule and not any(f.code == rule_codes[0] for f in self.report.findings):
                    continue  # the lifecycle reads a code's current form only for that code's findings
                now = (found if current is rule else
                       self._guard(name, rule_codes, lambda: current(history, self.config)))
                if now is not None:
                    holding[rule_codes[0]] = now
        if holding and history.steps:
            self._lifecycle.observe(history.steps[-1].step, self.report.findings, holding)

    # --- epochs and the end -------------------------------------------------------------------

    def epoch_end(self, args: Any) -> None:
        self._catch_up(args)
        if self._evaluator is not None and self._eval_schedule.due(args.cur_epoch_num):
            began = time.perf_counter()
            self._guard("evaluation", _EVALUATION_CODES, lambda: self._run_evaluation(args))
            self._eval_schedule.record(args.cur_epoch_num, time.perf_counter() - began)
        if self._eval_schedule is not None:
            self.report.meta["evaluation_schedule"] = self._eval_schedule.to_dict()
        if self._probe_budget is not None:
            self.report.meta["probe_schedule"] = {**self._probe_budget.to_dict(), "probed_steps": len(self._probe_steps)}
        self._evaluate(self._recent_history())
        if self._outputs.has_writers:
            self._outputs.write_epoch(int(args.cur_step_num))
        self._guard("write-report", (), self._outputs.write_report)

    def _judge_evaluations(self) -> None:
        from mindspore_doctor.rules.evaluation import evaluation_findings

        evaluator = self._evaluator
        self._emit(evaluation_findings(evaluator.records, self.config, evaluator.mode_change,
                                       evaluator.metric_skipped), count=False)

    def _run_evaluation(self, args: Any) -> None:
        from mindspore_doctor.probes.evaluation import OTHER_SETS

        evaluator = self._evaluator
        record = evaluator.run(*self._eval_target, args.cur_epoch_num, train_dataset=args.train_dataset)
        for name, option in OTHER_SETS.items():
            if getattr(self.config, option) is not None:
                self._guard(f"{name}-evaluation", _OTHER_SET_CODES[name], lambda: evaluator.run_other(record, name))
        self._guard("label-scoring", _LABEL_CODES, evaluator.score_labels)  # on that forward pass's outputs
        self.report.meta["evaluation"] = evaluator.to_dict()  # in every report written from now on
        self._outputs.write_evaluation(int(args.cur_step_num), record)
        give_back_freed_memory()

    def _final_mode_switch(self) -> None:
        self._evaluator.final_mode_switch()
        self.report.meta["evaluation"] = self._evaluator.to_dict()

    def _analyse_labels(self) -> None:
        """Confident learning on the eval set's and the training sample's probabilities (``meta["label_issues"]``,
        MSD311), and the label files of the suspects in ``summary_dir``."""
        from mindspore_doctor.rules.data.label_errors import label_error_findings

        reports, inputs, skipped = self._evaluator.label_reports()
        self.report.meta["label_issues"] = [report.to_dict() for report in reports]
        if self._evaluator.labels_skipped:  # why the training sample has no report (a regression, ...)
            self.report.meta["label_sample_skipped"] = self._evaluator.labels_skipped
        self._emit(label_error_findings(reports, self.config), count=False)
        if self._wanted("MSD311"):
            self._emit([make_finding("MSD002", f"MSD311 skipped on the {source} labels: {why}",
                                     location={"check": "label-analysis", "dataset": source},
                                     evidence={"codes": ["MSD311"]}) for source, why in skipped.items()])
        if reports:
            self._guard("label-files", (), lambda: self._outputs.write_label_files(reports, inputs))

    def _error_budget(self) -> None:
        """The bias-variance budget of the last evaluation (``meta["error_budget"]``)."""
        from mindspore_doctor.analysis.budget import error_budget

        budget = error_budget(self._evaluator.records, target_error=self.config.target_error)
        if budget is not None:
            self.report.meta["error_budget"] = budget

    def _analyse_errors(self) -> None:
        """The last evaluation's error analysis (``meta["error_analysis"]``)."""
        from mindspore_doctor.analysis.errors import analyse_errors

        evaluated, task = self._evaluator.last_eval, self._evaluator.task
        if evaluated is None or task is None:
            return
        self.report.meta["error_analysis"] = analyse_errors(
            task.kind, evaluated.outputs, evaluated.labels, family=task.family, class_axis=task.class_axis,
            threshold=task.threshold, ignore_index=task.ignore_index, top=self.config.analysis_top)

    def end(self, args: Any, error: BaseException | None = None) -> None:
        """After the last step, or when training raised ``error``: judge the run, put the user's cells back, write
        every report. Never raises; runs once (a second call, e.g. from ``__exit__`` after ``on_train_end``, is a
        no-op)."""
        if self._ending:
            return
        self._ending = True
        give_back_freed_memory()  # before the end-of-run analyses allocate on top of it
        self._guard("start-state", ("MSD205", "MSD215"), lambda: mark_trained(self._backbone, len(self.history.steps)))
        if self._data_check is not None:  # no step ended: the data checks, MSD304 as the dataset showed it
            self._run_data_checks(None)
        try:
            try:
                if error is not None:
                    self._guard("training-interrupted", ("MSD003",),
                                lambda: self._emit([self._interrupted(args, error)], count=False))
                self._guard("end-of-run", (), lambda: self._judge_run(args, finished=error is None))
            finally:
                self.restore()
            self._guard("diagnosis", (), self._diagnose)
            self._outputs.print_summary()
            self._outputs.close_writers(self._lifecycle.episodes(self.report))
            self._guard("html-report", (), self._outputs.write_html)
            self._guard("write-report", (), self._outputs.write_report)  # last: with what went wrong writing the others
            if error is None:
                self._guard("merge-ranks", (), self._merge_ranks)  # last: a collective every rank enters
        finally:
            if self._evaluator is not None:
                self._evaluator.release()
                give_back_freed_memory()  # the evaluation's compiled passes
            self._sigterm.release()

    def _judge_run(self, args: Any, finished: bool) -> None:
        self._catch_up(args)
        self._evaluate(self.history, count=False)
        self._lifecycle.close(self.report)  # transient findings that no longer hold end as resolved (info)
        if finished and self._optimizer is not None and "training-probes" not in self._disabled:
            codes = [c for c in training_rules.PROBE_CODES if self._wanted(c) and f"rule {c}" not in self._disabled]
            self._guard("probe-count", ("MSD002",), lambda: self._emit(
                training_rules.too_few_probes(self.history, self.config, codes), count=False))
        if finished:  # a collective: a rank that raised may be alone in it
            self._emit(self.ranks.on_train_end(args), count=False)
        if self._evaluator is not None:
            if finished and self._evaluator.records:
                self._guard("evaluation", _EVALUATION_CODES, self._final_mode_switch)
            self._guard("evaluation", _EVALUATION_CODES, self._judge_evaluations)
            if self._evaluator.records:
                if finished:  # seconds to minutes (a child process, the eval set read again): not on the way out
                    self._guard("label-analysis", _LABEL_CODES, self._analyse_labels)
                self._guard("error-analysis", (), self._analyse_errors)
                self._guard("error-budget", (), self._error_budget)

    def _interrupted(self, args: Any, error: BaseException) -> Finding:
        """MSD003: what ended training, where in the user's code, at which step."""
        # Model.train counts the step in progress; a hand-written loop the last one it passed to run.step.
        step, epoch = _run_state(args, "cur_step_num"), _run_state(args, "cur_epoch_num")
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if not any(part in f.filename for part in (f"{os.sep}mindspore{os.sep}",
                                                             f"{os.sep}mindspore_doctor{os.sep}"))]
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} (in {frames[-1].name})" if frames else None
        stopped = isinstance(error, (KeyboardInterrupt, SystemExit, TrainingTerminated))
        text = str(error) if str(error) else ""
        what = type(error).__name__ + (f": {text}" if text else "")
        holds = "what the Doctor saw up to that step"
        if step is None:
            at = ""
        elif step == 0:  # no step began: a callback's on_train_begin, or the loop's code before its first step
            at, holds = " before the first step", "the checks the Doctor ran before training"
        else:
            at = f" at step {step}" + (f" (epoch {epoch})" if epoch is not None else "")
        raised = f", raised at {where}" if where else ""
        return make_finding(
            "MSD003",
            f"Training ended{at} by {what}{raised}. This report holds {holds}.",
            step=step if isinstance(step, int) else None,
            severity="warning" if stopped else None,
            location={"file": frames[-1].filename, "line": frames[-1].lineno} if frames else None,
            evidence={"exception": type(error).__name__, "message": text[:2000], "epoch": epoch,
                      "steps_seen": len(self.history.steps), "where": where},
            suggestion="The run was stopped from outside; its results are partial." if stopped else
            "Fix the error above and rerun; the findings before it were judged on the steps before it and still apply.")

    @property
    def began(self) -> bool:
        """Whether a run started on this session (a Doctor used again starts a new one)."""
        return self._args is not None

    @property
    def run_state(self) -> Any:
        """The run's state object (``cb_params`` or the loop's), as ``begin`` received it."""
        return self._args

    def restore(self) -> None:
        """Put the user's cells back (also when training raised: never leave them swapped)."""
        if self._instrumentation is not None:
            instrumentation, self._instrumentation = self._instrumentation, None
            self._guard("restore", (), instrumentation.restore)

    def _diagnose(self) -> None:
        from mindspore_doctor.diagnosis import diagnose

        self.report.meta["diagnosis"] = diagnose(self.report, history=self.history).to_dict()

    def _merge_ranks(self) -> None:
        """Rank 0 writes every rank's findings to summary_dir/doctor_report.json (``location["ranks"]``)."""
        self.merged_report = self.ranks.merge_reports(self.report)
        if self.merged_report is not None and self.ranks.active:
            self._outputs.write_merged_report(self.merged_report)
