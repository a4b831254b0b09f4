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

import math
import time
from typing import Any, Callable

import optuna

from mindspore_doctor.findings import Report
from mindspore_doctor.rules import tuning
from mindspore_doctor.tuner.failures import (ERROR_ATTR, TrialFailed, TuneError, quiet_failed_trials,
                                             require_a_finished_trial, tried_count)
from mindspore_doctor.tuner.pruning import HopelessPruner, eval_value
from mindspore_doctor.tuner.storage import SETUP_ATTR, existing_setup, fail_dead_trials, open_storage, settled_features
from mindspore_doctor.tuner.summary import ranked_findings
from mindspore_doctor.tuner.trainer import (Build, Trained, TrialTrainer, build_once, data_for, is_dataset,
                                            require_batches)


def _metric_of(report: Report) -> tuple[str, bool, int | None]:
    """(name, higher is better, eval samples) of the runs' score, from the baseline's evaluation."""
    records = report.meta.get("evaluation", {}).get("records", [])
    last = records[-1] if records else {}
    metric = last.get("eval_metric")
    if metric:
        return metric["name"], bool(metric["higher_is_better"]), last.get("eval_samples")
    return "eval loss", False, last.get("eval_samples")


def _record(trial: Any, trained: Trained) -> None:
    """The trial's findings (most severe first) as its attributes: the report and the dashboards show them."""
    ranked, guard = ranked_findings(trained.doctor.report), trained.guard
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


def _setup(trainer: TrialTrainer, given: dict[str, tuning.Knob] | None, progress: bool) -> dict[str, Any]:
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
        checked = sanity(lambda: build_once(trainer.build, {}), data_for(trainer.train_ds, {}), progress=progress)
        codes |= checked.codes()
        knobs = tuning.auto_space(
            codes, learning_rate=fixed_learning_rate(baseline.optimizer),  # a schedule's is not one number: None
            lr_suggestion=checked.meta.get("lr_range_test", {}).get("suggested_lr"),
            has_dropout=any(type(c).__name__ == "Dropout" for _, c in baseline.network.cells_and_names()),
            batch_sizes=() if is_dataset(trainer.train_ds) else (16, 32, 64, 128))
    ranked = ranked_findings(report)
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
    trainer = TrialTrainer(build, train_ds, eval_ds, epochs=epochs, seed=seed, summary_dir=summary_dir,
                       progress=progress, doctor_options=doctor_options)
    backend = open_storage(storage)
    setup = existing_setup(backend, study_name) or _setup(trainer, given, progress)
    startup = random_trials if random_trials is not None else max(3, trials // 3)
    with settled_features():  # constant liar: workers sampling at once do not pick the same region
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
            record = holdout.run(trained.network, trained.loss_fn, epochs)
            trial.set_user_attr("holdout", eval_value(holdout.to_dict()))
            trial.set_user_attr("holdout_samples", record.eval_samples)
        return value

    def stop_once_tried(_study: Any, _trial: Any) -> None:  # every worker stops once the study has its trials
        if tried_count(study) >= trials:
            study.stop()

    if storage is not None:
        fail_dead_trials(study)
    if on_ready is not None:
        on_ready()
    if tried_count(study) < trials:  # at most `trials` here too: a study whose trials all fail ends
        with quiet_failed_trials():
            study.optimize(objective, n_trials=trials, gc_after_trial=True, catch=(TrialFailed,),
                           callbacks=[stop_once_tried])
    require_a_finished_trial(study)
    return study
