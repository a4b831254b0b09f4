"""Training one configuration with the Doctor inside: ``build(params)``, the trial's data, ``Model.train`` with the
Doctor and the ``TrialGuard``; what every trial and the baseline run."""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mindspore_doctor.tuner.failures import TrialFailed, TuneError, failing_as
from mindspore_doctor.tuner.pruning import TrialGuard

Build = Callable[[dict[str, Any]], tuple[Any, Any, Any]]

logger = logging.getLogger("mindspore_doctor")


def build_once(build: Build, params: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``build(params)``, checked: what it raises fails the trial (``TrialFailed``); a wrong return value is a bug
    of ``build`` itself, one line that stops the study."""
    with failing_as(f"build({params})"):
        built = build(dict(params))
    if not isinstance(built, (tuple, list)) or len(built) != 3:
        raise TuneError(f"build(params) must return (net, loss_fn, optimizer), got {type(built).__name__}")
    return tuple(built)


def is_dataset(data: Any) -> bool:
    return hasattr(data, "create_tuple_iterator")


def data_for(data: Any, params: dict[str, Any]) -> Any:
    """The trial's training set: a copy of the dataset (``Model.train`` refuses a dataset another ``Model`` trained
    on), or what the factory ``data(params)`` builds (so ``batch_size`` can be searched)."""
    if is_dataset(data):
        return copy.deepcopy(data)
    with failing_as(f"train_ds({params})"):
        return data(dict(params))


def require_batches(**datasets: Any) -> None:
    """An empty dataset is one clear line before anything trains (MindSpore's own error comes mid-baseline for the
    training set; an empty evaluation set would only leave every trial without a score)."""
    for name, data in datasets.items():
        if data is None:
            continue
        data = data_for(data, {})
        try:
            next(data.create_tuple_iterator(num_epochs=1))
        except StopIteration:
            raise TuneError(f"{name} yields no batch: is it empty, or filtered to nothing?") from None


@dataclass
class Trained:
    """One configuration after training: its Doctor (findings, history), the guard (scores, why it stopped)."""

    doctor: Any
    guard: TrialGuard
    network: Any
    loss_fn: Any
    optimizer: Any


class TrialTrainer:
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
        # every epoch evaluated (no eval_budget): a trial's curve is what the search compares and prunes on
        options = {"eval_dataset": self.eval_ds, "eval_every": 1, "eval_budget": None, "print_summary": False,
                   "html_report": False,
                   "hparams": {"trial": name, **params}, **self.doctor_options}
        if self.summary_dir:
            options["summary_dir"] = str(Path(self.summary_dir) / name)
        doctor = Doctor(**options)
        guard = TrialGuard(doctor, trial, bar)
        data = data_for(self.train_ds, params)
        level = logger.level
        logger.setLevel(logging.ERROR)  # the trial's findings go to its attributes, not to the console
        try:
            with failing_as(f"training with {params}"):
                Model(net, loss_fn, optimizer).train(self.epochs, data, callbacks=[doctor, guard],
                                                     dataset_sink_mode=False)
        finally:
            logger.setLevel(level)
        return Trained(doctor, guard, net, loss_fn, optimizer)
