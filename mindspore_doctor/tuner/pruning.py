"""Stopping a trial early: at the step of a fatal finding (``TrialGuard``, a callback after the Doctor's) and when its
learning curve is clearly among the worst (``HopelessPruner``); each epoch's evaluation score goes to Optuna."""
from __future__ import annotations

from typing import Any

import optuna
from mindspore.train import Callback

from mindspore_doctor.findings import Finding
from mindspore_doctor.rules import tuning
from mindspore_doctor.tuner.failures import FINISHED


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
