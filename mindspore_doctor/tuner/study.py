"""``tune(build, train_ds, eval_ds)``: a hyperparameter search that starts from the Doctor's diagnosis.

    study = tune(build, train_ds, eval_ds, space="auto", trials=30, storage="sqlite:///runs/tune.db")
    print(study.best_params, study.best_value)

The troubleshooting workflow's last step, on Optuna (study, samplers, pruner, RDB storage, importance):

1. The user's default configuration (``build({})``) is trained once with the Doctor (the *baseline*) and the
   sanity checks' learning-rate range test runs on it; ``space="auto"`` turns their findings into the search space
   (``rules/tuning.py``).
2. Coarse to fine: the first ``random_trials`` sample the space at random, then TPE (Bayesian) concentrates on
   the region where the good trials are.
3. The Doctor runs inside every trial: a trial whose loss goes non-finite or diverges (MSD201/202/206) is pruned
   at that step, its findings kept as the trial's attributes; a learning-curve pruner stops trials whose score is
   clearly (beyond the validation set's noise) in the worst quarter of the others' at the same epoch.

The study lives in its storage (a database URL): a killed study resumes where it stopped (a trial left running is
failed after its heartbeat stops and retried once), and several processes share one study through one URL.
A trial whose ``build(params)``, data factory or training raises is failed with the error as its attribute, and the
study goes on; only the baseline's failure (nothing to tune from) or a study whose every trial failed stops it.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import math
import re
import textwrap
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import optuna
from mindspore.train import Callback
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from mindspore_doctor.findings import Finding, Report
from mindspore_doctor.rules import tuning

Build = Callable[[dict[str, Any]], tuple[Any, Any, Any]]
STORAGE_SCHEMES = ("sqlite", "postgresql", "mysql")
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
HEARTBEAT_S = 2
"""Seconds between a running trial's heartbeats in the storage."""
SQLITE_LOCK_WAIT_S = 10
"""SQLite's busy timeout: how long a write waits for another process's lock before it fails ("database is
locked"). Optuna's transactions hold the lock for milliseconds: 10 s absorbs a burst of every worker's writes on a
slow disk many times over (pysqlite's default is 5 s)."""
GRACE_S = 30
"""A trial whose heartbeat is this old belonged to a dead process: it is failed (and retried once) by the next
trial start of any process. A live process records a beat at least every ``HEARTBEAT_S + SQLITE_LOCK_WAIT_S`` =
12 s (a beat waits at most the busy timeout for the lock); one beat lost to a timed-out wait (``HeartbeatStorage``
goes on beating) makes that 24 s. 30 s is above both, so a trial is never failed while its process waits on a lock,
and a killed worker's trial is retried about 30 s after its last beat."""
MAX_ERROR_CHARS = 200
"""A failed trial's error as stored and shown: the exception's first line, shortened (MindSpore's run long)."""
ERROR_ATTR = "error"
"""The user attribute of a trial failed by its own configuration: what raised, with which parameters."""
SETUP_ATTR = "mindspore_doctor"
"""The study's user attribute holding the search space, the metric and the baseline: every worker and every
resumed run reads the same ones."""

logger = logging.getLogger("mindspore_doctor")


class TuneError(ValueError):
    """Bad input to ``tune`` (storage URL, space, data): one line for the user."""


class TrialFailed(TuneError):
    """The user's ``build``, data factory or training raised for one configuration: inside the study that trial
    fails and the next one runs; for the baseline (the defaults: nothing to tune from) it is the study's error."""

    def __init__(self, doing: str, exc: Exception) -> None:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        reason = f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__
        super().__init__(f"{doing} raised {textwrap.shorten(reason, MAX_ERROR_CHARS, placeholder=' ...')}")


@contextlib.contextmanager
def failing_as(doing: str) -> Iterator[None]:
    """Runs the user's code: an ``Exception`` (``MemoryError`` included) becomes ``TrialFailed`` saying what was being
    done; ``KeyboardInterrupt`` and ``SystemExit`` pass, so Ctrl-C and a termination still stop the study."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the user's code: the trial fails, the study goes on
        raise TrialFailed(doing, exc) from exc


class HeartbeatStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose heartbeat survives a write that fails (a lock held past the busy timeout): Optuna's
    heartbeat thread ends at the first error, and the live trial would then be failed as dead ``GRACE_S`` later."""

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            super().record_heartbeat(trial_id)
        except optuna.exceptions.StorageInternalError as exc:
            logger.warning("a trial heartbeat was not recorded (%s); the next one follows in %d s",
                           exc.__cause__ or exc, HEARTBEAT_S)


@contextlib.contextmanager
def _settled_features() -> Iterator[None]:
    """Optuna's heartbeat, multivariate TPE and constant liar are "experimental" (since 2.x): not the user's
    concern, no warning on their console."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def open_storage(url: str | None) -> Any:
    """Optuna's RDB storage with a heartbeat (a killed worker's trial is failed, then retried once); in memory
    when ``url`` is None."""
    if url is None:
        return optuna.storages.InMemoryStorage()
    scheme = url.partition(":")[0].partition("+")[0]
    if scheme not in STORAGE_SCHEMES:
        raise TuneError(f"unknown storage {url!r}: give a database URL, sqlite:///path/study.db (one machine) or "
                        "postgresql://... / mysql://... (many machines)")
    engine = {"connect_args": {"timeout": SQLITE_LOCK_WAIT_S}} if scheme == "sqlite" else {}
    try:
        if scheme == "sqlite":
            Path(url.partition(":///")[2]).parent.mkdir(parents=True, exist_ok=True)
        with _settled_features():
            return HeartbeatStorage(
                url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
    except (OSError, ImportError, SQLAlchemyError) as exc:  # a directory, a driver, a server out of reach
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        shown = make_url(url).render_as_string(hide_password=True)
        raise TuneError(f"cannot open the study's storage {shown!r}: {reason}") from None


def fail_dead_trials(study: Any) -> None:
    """Fail (and so retry) the trials a killed process left running before this process starts its own.

    Optuna does it when a trial starts, but only once the dead one's heartbeat is ``GRACE_S`` old: a study
    resumed at once after a crash, with short trials, would end with the dead trial still running and its
    parameters never retried. A trial of a live worker keeps beating and is waited for only ``GRACE_S`` + 1 s.
    """
    running = (optuna.trial.TrialState.RUNNING,)
    deadline = time.monotonic() + GRACE_S + 1
    while study.get_trials(deepcopy=False, states=running) and time.monotonic() < deadline:
        with _settled_features():
            optuna.storages.fail_stale_trials(study)
        time.sleep(0.5)


def build_once(build: Build, params: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``build(params)``, checked: what it raises fails the trial (``TrialFailed``); a wrong return value is a bug
    of ``build`` itself, one line that stops the study."""
    with failing_as(f"build({params})"):
        built = build(dict(params))
    if not isinstance(built, (tuple, list)) or len(built) != 3:
        raise TuneError(f"build(params) must return (net, loss_fn, optimizer), got {type(built).__name__}")
    return tuple(built)


def _is_dataset(data: Any) -> bool:
    return hasattr(data, "create_tuple_iterator")


def _data_for(data: Any, params: dict[str, Any]) -> Any:
    """The trial's training set: a copy of the dataset (``Model.train`` refuses a dataset another ``Model`` trained
    on), or what the factory ``data(params)`` builds (so ``batch_size`` can be searched)."""
    if _is_dataset(data):
        return copy.deepcopy(data)
    with failing_as(f"train_ds({params})"):
        return data(dict(params))


def require_batches(**datasets: Any) -> None:
    """An empty dataset is one clear line before anything trains (MindSpore's own error comes mid-baseline for the
    training set; an empty evaluation set would only leave every trial without a score)."""
    for name, data in datasets.items():
        if data is None:
            continue
        data = _data_for(data, {})
        try:
            next(data.create_tuple_iterator(num_epochs=1))
        except StopIteration:
            raise TuneError(f"{name} yields no batch: is it empty, or filtered to nothing?") from None


class HopelessPruner(optuna.pruners.BasePruner):
    """Stops a trial whose learning curve is clearly in the worst quarter of the others' at the same epoch
    (``rules/tuning.hopeless``), past the first ``warmup`` epochs and once ``startup`` trials completed.

    Optuna's percentile pruner compares bare numbers: on the tune target's 192 validation samples (one standard
    error of an accuracy: 3 points) it stopped 7 of the 8 trials TPE proposed, for differences of a point or two;
    this one stopped none of them (docs/tune.md)."""

    def __init__(self, startup: int, warmup: int, metric: str, eval_samples: int | None) -> None:
        self.startup, self.warmup, self.metric, self.eval_samples = startup, warmup, metric, eval_samples

    def prune(self, study: Any, trial: Any) -> bool:
        step = trial.last_step
        if step is None or step < self.warmup:
            return False
        if len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))) < self.startup:
            return False
        finished = study.get_trials(deepcopy=False, states=FINISHED)
        others = [t.intermediate_values[step] for t in finished if step in t.intermediate_values]
        value = trial.intermediate_values[step]
        return tuning.hopeless(value, others, study.direction == optuna.study.StudyDirection.MAXIMIZE,
                               tuning.score_noise(self.metric, value, self.eval_samples))


class TrialGuard(Callback):
    """Placed after the Doctor: stops a trial at the step of a fatal finding, reports each epoch's eval score to
    Optuna and stops a trial the pruner gives up on."""

    def __init__(self, doctor: Any, trial: Any, progress: Any) -> None:
        super().__init__()
        self.doctor, self.trial, self.progress = doctor, trial, progress
        self.fatal: Finding | None = None
        self.pruned_epoch: int | None = None
        self.values: dict[int, float] = {}

    @property
    def value(self) -> float | None:
        """The last evaluation's score."""
        return self.values[max(self.values)] if self.values else None

    def on_train_step_end(self, run_context: Any) -> None:
        if self.fatal is None and self.trial is not None:  # the baseline trains on: its score is the reference
            self.fatal = next((f for f in self.doctor.report.findings if f.code in tuning.FATAL), None)
            if self.fatal is not None:
                run_context.request_stop()

    def on_train_epoch_end(self, run_context: Any) -> None:
        args = run_context.original_args()
        epoch = args.cur_epoch_num
        value = eval_value(self.doctor.report.meta.get("evaluation", {}))
        if value is None or self.fatal is not None:  # stopped at a fatal finding: its score means nothing
            return
        self.values[epoch] = value
        self.progress.update(epoch, f"{value:.4g}")
        if self.trial is not None:
            self.trial.report(value, epoch)
            if epoch < args.epoch_num and self.trial.should_prune():  # after the last epoch there is nothing to save
                self.pruned_epoch = epoch
                run_context.request_stop()


@dataclass
class Trained:
    """One configuration after training: its Doctor (findings, history), the guard (scores, why it stopped)."""

    doctor: Any
    guard: TrialGuard
    network: Any
    loss_fn: Any
    optimizer: Any


def eval_value(evaluation: dict[str, Any]) -> float | None:
    """The last evaluation's score (``Evaluator.to_dict()``, a report's ``meta["evaluation"]``): its metric
    (accuracy, MSE...) when the task has one, else the eval loss."""
    records = evaluation.get("records", [])
    if not records:
        return None
    metric = records[-1].get("eval_metric")
    if metric:
        return float(metric["value"])
    loss = records[-1].get("eval_loss")
    return None if loss is None else float(loss)


def _metric_of(report: Report) -> tuple[str, bool, int | None]:
    """(name, higher is better, eval samples) of the runs' score, from the baseline's evaluation."""
    records = report.meta.get("evaluation", {}).get("records", [])
    last = records[-1] if records else {}
    metric = last.get("eval_metric")
    if metric:
        return metric["name"], bool(metric["higher_is_better"]), last.get("eval_samples")
    return "eval loss", False, last.get("eval_samples")


def _finding_dict(finding: Finding) -> dict[str, Any]:
    """The finding as JSON (a trial attribute, the summary), with its short location for tables."""
    return {**finding.to_dict(), "where": finding.where}


class _Trainer:
    """Trains one configuration with the Doctor; what every trial (and the baseline) runs."""

    def __init__(self, build: Build, train_ds: Any, eval_ds: Any, *, epochs: int, seed: int,
                 summary_dir: str | None, progress: bool, doctor_options: dict[str, Any]) -> None:
        self.build, self.train_ds, self.eval_ds = build, train_ds, eval_ds
        self.epochs, self.seed, self.summary_dir, self.progress = epochs, seed, summary_dir, progress
        self.doctor_options = doctor_options

    def run(self, params: dict[str, Any], name: str, trial: Any = None) -> Trained:
        """Train one configuration with the Doctor (and the guard) inside; ``TrialFailed`` when the user's code
        raises (its progress line says so)."""
        from mindspore_doctor.progress import Progress

        bar = Progress(name, self.epochs, self.progress)
        try:
            trained = self._train(params, name, trial, bar)
        except TrialFailed as failure:
            bar.close(f"failed: {failure}")
            raise
        guard = trained.guard
        bar.close(f"pruned: {guard.fatal.code} at step {guard.fatal.step}" if guard.fatal else
                  f"pruned at epoch {guard.pruned_epoch}" if guard.pruned_epoch else
                  f"{guard.value:.4g}" if guard.value is not None else "no score")
        return trained

    def _train(self, params: dict[str, Any], name: str, trial: Any, bar: Any) -> Trained:
        import mindspore as ms
        from mindspore.train import Model

        from mindspore_doctor.training.callback import Doctor

        ms.set_seed(self.seed)
        net, loss_fn, optimizer = build_once(self.build, params)
        options = {"eval_dataset": self.eval_ds, "eval_every": 1, "print_summary": False, "html_report": False,
                   "hparams": {"trial": name, **params}, **self.doctor_options}
        if self.summary_dir:
            options["summary_dir"] = str(Path(self.summary_dir) / name)
        doctor = Doctor(**options)
        guard = TrialGuard(doctor, trial, bar)
        data = _data_for(self.train_ds, params)
        level = logger.level
        logger.setLevel(logging.ERROR)  # the trial's findings go to its attributes, not to the console
        try:
            with failing_as(f"training with {params}"):
                Model(net, loss_fn, optimizer).train(self.epochs, data, callbacks=[doctor, guard],
                                                     dataset_sink_mode=False)
        finally:
            logger.setLevel(level)
        return Trained(doctor, guard, net, loss_fn, optimizer)


def _ranked(report: Report) -> list[dict[str, Any]]:
    """A run's findings, most severe first, without the Doctor's own notes (MSD001/MSD002)."""
    return [_finding_dict(f) for f in report.sorted() if f.code not in ("MSD001", "MSD002")]


def _record(trial: Any, trained: Trained) -> None:
    """The trial's findings (most severe first) as its attributes: the report and the dashboards show them."""
    ranked, guard = _ranked(trained.doctor.report), trained.guard
    trial.set_user_attr("findings", ranked)
    trial.set_user_attr("top_finding", ranked[0] if ranked else None)
    if guard.fatal is not None:
        trial.set_user_attr("pruned_step", guard.fatal.step)
        trial.set_user_attr("pruned_reason", f"{guard.fatal.code} {guard.fatal.rule} at step {guard.fatal.step}")
    elif guard.pruned_epoch is not None:
        trial.set_user_attr("pruned_reason", f"learning curve in the worst quarter at epoch {guard.pruned_epoch}")


def _suggest(trial: Any, name: str, knob: tuning.Knob) -> Any:
    if knob.kind == "categorical":
        return trial.suggest_categorical(name, list(knob.choices))
    if knob.kind == "int":
        return trial.suggest_int(name, int(knob.low), int(knob.high), log=knob.log)
    return trial.suggest_float(name, knob.low, knob.high, log=knob.log)


def _setup(trainer: _Trainer, given: dict[str, tuning.Knob] | None, progress: bool) -> dict[str, Any]:
    """Train the baseline, and without a ``given`` space run the range test and derive one from the findings:
    what the study's attribute stores."""
    from mindspore_doctor.diagnosis import diagnose
    from mindspore_doctor.probes.learning_rate import fixed_learning_rate
    from mindspore_doctor.sanity_checks import sanity

    baseline = trainer.run({}, "baseline")
    report = baseline.doctor.report
    metric, higher_is_better, samples = _metric_of(report)
    codes = set(report.codes())
    knobs = given
    if knobs is None:
        checked = sanity(lambda: build_once(trainer.build, {}), _data_for(trainer.train_ds, {}), progress=progress)
        codes |= checked.codes()
        knobs = tuning.auto_space(
            codes, learning_rate=fixed_learning_rate(baseline.optimizer),  # a schedule's is not one number: None
            lr_suggestion=checked.meta.get("lr_range_test", {}).get("suggested_lr"),
            has_dropout=any(type(c).__name__ == "Dropout" for _, c in baseline.network.cells_and_names()),
            batch_sizes=() if _is_dataset(trainer.train_ds) else (16, 32, 64, 128))
    ranked = _ranked(report)
    return {
        "metric": metric, "direction": "maximize" if higher_is_better else "minimize", "eval_samples": samples,
        "space": {name: knob.to_dict() for name, knob in knobs.items()},
        "baseline": {"params": {}, "value": baseline.guard.value,
                     "state": "COMPLETE",
                     "top_finding": ranked[0] if ranked else None, "findings": ranked,
                     "diagnosis": diagnose(report, history=baseline.doctor.history).to_dict()},
    }


def tune(build: Build, train_ds: Any, eval_ds: Any, *, space: Any = "auto", trials: int = 30,
         storage: str | None = None, study_name: str = "mindspore_doctor", epochs: int = 3, seed: int = 0,
         random_trials: int | None = None, holdout_ds: Any = None, summary_dir: str | None = None,
         worker: int = 0, progress: bool = True, on_ready: Callable[[], None] | None = None,
         **doctor_options: Any) -> Any:
    """Search ``build``'s hyperparameters; returns the ``optuna.Study`` (``best_params``, ``best_value``...).

    ``build(params)`` returns a fresh ``(net, loss_fn, optimizer)`` using the names it knows from ``params``
    (``learning_rate``, ``weight_decay``, ``dropout``, ``warmup_ratio``, ``width_multiplier`` with
    ``space="auto"``; absent: its own defaults, which make the baseline). ``train_ds``: a batched dataset, or
    ``train_ds(params)`` building one (then ``batch_size`` is searched too). Each trial trains ``epochs`` epochs
    and scores the last evaluation on ``eval_ds`` (accuracy, MSE... as the Doctor infers the task; else the eval
    loss). A trial whose ``build``, ``train_ds`` or training raises fails (``trial.user_attrs["error"]``) and
    counts towards ``trials``; ``TuneError`` when the baseline fails or every trial does. ``storage``: a database
    URL; the study resumes from it and several processes (``worker`` = 0, 1...: each samples with its own seed)
    share it. ``holdout_ds``: scored once per finished trial, never used to choose. ``on_ready``: called once
    the study and its space exist, before the first trial (``msdoctor tune --jobs`` starts its other workers
    there). ``doctor_options``: ``DoctorConfig`` fields for the Doctor inside every trial.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trials' progress lines say what happens
    if trials < 1 or epochs < 1:
        raise TuneError(f"trials and epochs must be at least 1, got trials={trials}, epochs={epochs}")
    try:
        given = None if space == "auto" else tuning.parse_space(space)  # refused before anything trains
    except ValueError as exc:
        raise TuneError(str(exc)) from None
    require_batches(train_ds=train_ds, eval_ds=eval_ds, holdout_ds=holdout_ds)
    trainer = _Trainer(build, train_ds, eval_ds, epochs=epochs, seed=seed, summary_dir=summary_dir,
                       progress=progress, doctor_options=doctor_options)
    backend = open_storage(storage)
    setup = _existing_setup(backend, study_name) or _setup(trainer, given, progress)
    startup = random_trials if random_trials is not None else max(3, trials // 3)
    with _settled_features():  # constant liar: workers sampling at once do not pick the same region
        sampler = optuna.samplers.TPESampler(n_startup_trials=startup, seed=seed + worker, multivariate=True,
                                             constant_liar=True)
    study = optuna.create_study(
        study_name=study_name, storage=backend, direction=setup["direction"], load_if_exists=True,
        sampler=sampler, pruner=HopelessPruner(startup, epochs // 2 + 1, setup["metric"], setup["eval_samples"]))
    if SETUP_ATTR not in study.user_attrs:
        study.set_user_attr(SETUP_ATTR, setup)
    setup = study.user_attrs[SETUP_ATTR]
    knobs = {name: tuning.Knob.from_dict(k) for name, k in setup["space"].items()}
    holdout = None
    if holdout_ds is not None:
        from mindspore_doctor.config import DoctorConfig
        from mindspore_doctor.probes.evaluation import Evaluator

        holdout = Evaluator(holdout_ds, DoctorConfig())

    def objective(trial: Any) -> float:
        params = {name: _suggest(trial, name, knob) for name, knob in knobs.items()}
        trial.set_user_attr("worker", worker)
        started = time.perf_counter()
        try:
            trained = trainer.run(params, f"trial_{trial.number:03d}", trial)
        except TrialFailed as failure:
            trial.set_user_attr(ERROR_ATTR, str(failure))
            raise
        finally:
            trial.set_user_attr("duration_s", round(time.perf_counter() - started, 2))
        _record(trial, trained)
        if trained.guard.fatal is not None or trained.guard.pruned_epoch is not None:
            raise optuna.TrialPruned(trial.user_attrs["pruned_reason"])
        value = trained.guard.value
        if value is None or not math.isfinite(value):
            trial.set_user_attr("pruned_reason", "no finite evaluation score")
            raise optuna.TrialPruned("no finite evaluation score")
        if holdout is not None:
            holdout.records.clear()
            holdout.run(trained.network, trained.loss_fn, epochs)
            trial.set_user_attr("holdout", eval_value(holdout.to_dict()))
        return value

    def stop_once_tried(_study: Any, _trial: Any) -> None:  # every worker stops once the study has its trials
        if tried_count(study) >= trials:
            study.stop()

    if storage is not None:
        fail_dead_trials(study)
    if on_ready is not None:
        on_ready()
    if tried_count(study) < trials:  # at most `trials` here too: a study whose trials all fail ends
        with _quiet_failed_trials():
            study.optimize(objective, n_trials=trials, gc_after_trial=True, catch=(TrialFailed,),
                           callbacks=[stop_once_tried])
    _require_a_finished_trial(study)
    return study


def tried_count(study: Any) -> int:
    """The trials that count towards ``trials``: finished (complete or pruned) or failed by their configuration's
    error. A trial whose process died is retried, and counts through its retry."""
    states = (*FINISHED, optuna.trial.TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=states)
               if t.state in FINISHED or ERROR_ATTR in t.user_attrs)


def _require_a_finished_trial(study: Any) -> None:
    """A study whose every trial failed has no result: one line naming the first error, not an empty summary."""
    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if ERROR_ATTR in t.user_attrs]
    if failed and not any(t.state in FINISHED for t in trials):
        raise TuneError(f"every trial failed ({len(failed)}); the first, trial {failed[0].number}: "
                        f"{failed[0].user_attrs[ERROR_ATTR]}")


class _FailedTrialLog(logging.Filter):
    """Drops Optuna's two warnings per failed trial (one with the traceback): the trial's progress line and its
    ``error`` attribute already say what raised, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not re.match(r"Trial \d+ failed with ", record.getMessage())


@contextlib.contextmanager
def _quiet_failed_trials() -> Iterator[None]:
    optuna_log = logging.getLogger("optuna.study._optimize")
    quiet = _FailedTrialLog()
    optuna_log.addFilter(quiet)
    try:
        yield
    finally:
        optuna_log.removeFilter(quiet)


def _existing_setup(backend: Any, study_name: str) -> dict[str, Any] | None:
    """The setup a study in ``backend`` already has (a resumed study, or another worker's): nothing to train."""
    try:
        study = optuna.load_study(study_name=study_name, storage=backend)
    except KeyError:
        return None
    return study.user_attrs.get(SETUP_ATTR)


def _failed_reason(trial: Any, retry: int | None) -> str | None:
    """Why a failed trial failed: its configuration's error, else its process stopped (killed, interrupted)."""
    if trial.state != optuna.trial.TrialState.FAIL:
        return None
    if ERROR_ATTR in trial.user_attrs:
        return trial.user_attrs[ERROR_ATTR]
    return "its process stopped before the trial ended" + (f"; retried as trial {retry}" if retry is not None else "")


def study_summary(study: Any, trials_requested: int | None = None, storage: str | None = None) -> dict[str, Any]:
    """The study as plain data: what ``export/tune_html.py`` draws and ``msdoctor tune`` prints."""
    setup = study.user_attrs.get(SETUP_ATTR, {})
    with _settled_features():
        retried = {t.number: optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t)
                   for t in study.get_trials(deepcopy=False)}
    retries = {original: number for number, original in retried.items() if original is not None}
    rows = [{
        "number": t.number, "state": t.state.name, "value": t.value, "params": dict(t.params),
        "intermediate": {str(k): v for k, v in sorted(t.intermediate_values.items())},
        "pruned_step": t.user_attrs.get("pruned_step"), "pruned_reason": t.user_attrs.get("pruned_reason"),
        "failed_reason": _failed_reason(t, retries.get(t.number)),
        "top_finding": t.user_attrs.get("top_finding"), "findings": t.user_attrs.get("findings", []),
        "holdout": t.user_attrs.get("holdout"), "duration_s": t.user_attrs.get("duration_s"),
        "worker": t.user_attrs.get("worker"), "retry_of": retried[t.number],
    } for t in study.get_trials(deepcopy=False)]
    completed = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
    best, importance, findings = None, {}, []
    if completed:
        trial = study.best_trial
        best = {"number": trial.number, "value": trial.value, "params": dict(trial.params),
                "holdout": trial.user_attrs.get("holdout")}
        findings = tuning.optimistic_best(setup.get("metric", ""), best["value"], setup.get("eval_samples"),
                                          len(completed), best["holdout"])
    if len(completed) >= 2:
        try:
            importance = dict(optuna.importance.get_param_importances(study))
        except (RuntimeError, ValueError) as exc:  # e.g. every trial drew the same values
            logger.info("parameter importance unavailable: %s", exc)
    return {
        "study_name": study.study_name, "direction": setup.get("direction"), "metric": setup.get("metric"),
        "trials_requested": trials_requested, "storage": storage, "baseline": setup.get("baseline"),
        "space": setup.get("space", {}), "best": best, "importance": importance, "trials": rows,
        "findings": [_finding_dict(f) for f in findings],
    }
