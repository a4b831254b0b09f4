"""``Doctor``: diagnoses a training run while it trains — as a ``Model.train`` callback, or in your own loop.

    model.train(10, ds, callbacks=[Doctor(summary_dir="runs/exp1")])

    with Doctor(summary_dir="runs/exp1").watch(net, optimizer, loss_fn=loss_fn, train_dataset=ds) as run:
        for data, label in ds.create_tuple_iterator():
            run.step(train_step(data, label), data, label)

The callback hooks only translate ``Model.train``'s run context for ``DoctorSession``, which does the work.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mindspore.train import Callback

from mindspore_doctor.cells import unwrap
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Report
from mindspore_doctor.signals import TrainingHistory
from mindspore_doctor.training.loop import TrainingRun, watch
from mindspore_doctor.training.multi import MultiModelRun
from mindspore_doctor.training.session import DoctorSession


class Doctor(Callback):
    """Diagnoses a training run: static lint at start, in-graph probes and MSD2xx rules while training.

    ``summary_dir``: where ``doctor_report.json`` / ``doctor_history.json`` (and a
    repro bundle at the first non-finite loss) are written; None writes nothing.
    ``options``: any ``DoctorConfig`` field, e.g. ``probe_every=10``,
    ``stop_on="error"`` (default None: never stop training), ``ignore=("MSD203",)``.
    After training, ``doctor.report`` holds every finding and ``doctor.history``
    the signals. One Doctor diagnoses one run.
    """

    def __init__(self, summary_dir: str | Path | None = None, **options: Any) -> None:
        super().__init__()
        if summary_dir is not None:
            options["summary_dir"] = str(summary_dir)
        self._config = DoctorConfig.from_options(options)
        self.session = DoctorSession(dataclasses.replace(self._config))

    def _fresh_session(self) -> DoctorSession:
        """The session for a run about to start: a Doctor used again starts a new run with its options (the report,
        history and findings of the run before are replaced; its files in ``summary_dir`` are overwritten)."""
        if self.session.began:
            self.session = DoctorSession(dataclasses.replace(self._config))
        return self.session

    @property
    def config(self) -> DoctorConfig:
        return self.session.config

    @property
    def report(self) -> Report:
        return self.session.report

    @property
    def history(self) -> TrainingHistory:
        return self.session.history

    @property
    def histories(self) -> dict[str, TrainingHistory]:
        """Each model's signals, by name, after ``watch({name: ...})``; ``{"": history}`` for one model."""
        return getattr(self.session, "histories", None) or {"": self.session.history}

    @property
    def merged_report(self) -> Report | None:
        """Under msrun, on rank 0: every rank's findings (``location["ranks"]``)."""
        return self.session.merged_report

    def watch(self, network: Any, optimizer: Any = None, *, loss_fn: Any = None, train_dataset: Any = None,
              epochs: int | None = None, adversarial: bool | None = None) -> TrainingRun | MultiModelRun:
        """The Doctor for a hand-written training loop; see ``mindspore_doctor.training.loop.watch``.

        Several models, each with its optimizer (a GAN): ``network`` is ``{name: (network, optimizer), ...}`` and
        ``run.step({name: loss, ...})``; see ``mindspore_doctor.training.multi`` (``adversarial``: None tells a GAN by
        its models' names, True/False declares it)."""
        if isinstance(network, Mapping):
            if optimizer is not None:
                raise TypeError("doctor.watch({name: (network, optimizer), ...}) takes each optimizer in the mapping")
            self.session = MultiModelRun(dataclasses.replace(self._config), network, loss_fn=loss_fn,
                                         train_dataset=train_dataset, epochs=epochs, adversarial=adversarial)
            return self.session
        return watch(self._fresh_session(), network, optimizer, loss_fn=loss_fn, train_dataset=train_dataset, epochs=epochs)

    # --- Model.train's hooks ------------------------------------------------------------------

    def on_train_begin(self, run_context: Any) -> None:
        cb = run_context.original_args()
        found = unwrap(cb.train_network)
        cb_optimizer, cb_loss = getattr(cb, "optimizer", None), getattr(cb, "loss_fn", None)
        self._fresh_session().begin(cb, unwrap(cb.network).backbone, loss_fn=cb_loss or found.loss_fn,
                                    optimizer=cb_optimizer or found.optimizer, request_stop=run_context.request_stop)

    def on_train_step_begin(self, run_context: Any) -> None:
        args = run_context.original_args()
        self.session.step_begin(args.cur_step_num, getattr(args, "train_dataset_element", None))

    def on_train_step_end(self, run_context: Any) -> None:
        self.session.step_end(run_context.original_args())

    def on_train_epoch_end(self, run_context: Any) -> None:
        self.session.epoch_end(run_context.original_args())

    def on_train_end(self, run_context: Any) -> None:
        self.session.end(run_context.original_args())

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: Any) -> None:
        """``Model.train`` leaves its callbacks' context on every exit; when training raised, MindSpore skips
        ``on_train_end``: the run ends here, with MSD003 naming the error, and the error goes on unchanged."""
        if self.session.began:
            self.session.end(self.session.run_state, exc)
