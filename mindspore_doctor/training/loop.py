"""The Doctor in a hand-written training loop: one ``with`` line, one ``run.step`` line per step.

    doctor = Doctor(summary_dir="runs/exp1")
    with doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=ds) as run:
        for epoch in range(epochs):
            for data, label in ds.create_tuple_iterator():
                loss = train_step(data, label)      # value_and_grad + optimizer(grads), jit or PyNative
                run.step(loss, data, label)         # the batch is optional: it goes into the NaN repro bundle
            run.epoch_end()                         # optional: evaluation, summaries, the report on disk
    print(doctor.report)

``network`` may be the model, a ``WithLossCell`` or a ``TrainOneStepCell``-like cell called by hand (the loss
and optimizer inside it are found). Enter the ``with`` before the first call of a compiled step: the probes
are part of the graph it compiles. Leaving it (also on an exception) restores the cells and writes the report.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from mindspore_doctor.cells import unwrap
from mindspore_doctor.training.session import DoctorSession


@dataclass
class LoopState:
    """The run's state, with the attribute names of MindSpore's ``RunContext.original_args()``."""

    network: Any
    train_network: Any
    optimizer: Any
    loss_fn: Any
    train_dataset: Any
    epoch_num: int | None
    batch_num: int | None
    cur_step_num: int = 0
    cur_epoch_num: int = 1
    net_outputs: Any = None
    train_dataset_element: Any = None
    dataset_sink_mode: bool = False


class TrainingRun:
    """What ``doctor.watch(...)`` yields: tell it each step's loss; read ``should_stop`` to honour ``stop_on``."""

    def __init__(self, session: DoctorSession, state: LoopState, backbone: Any) -> None:
        self._session = session
        self._state = state
        self._backbone = backbone
        self._steps_in_epoch = 0
        self.should_stop = False
        """True once a finding at ``stop_on`` severity asks training to stop (the loop decides)."""

    def __enter__(self) -> "TrainingRun":
        state = self._state
        self._session.begin(state, self._backbone, loss_fn=state.loss_fn, optimizer=state.optimizer,
                            request_stop=self._stop, check_mode=False, inputs_every_step=False)
        self._session.step_begin(1)
        return self

    def _stop(self) -> None:
        self.should_stop = True

    def step(self, outputs: Any, *batch: Any) -> None:
        """After each training step: ``outputs`` is what the step returned (the loss, or a loss-scale cell's
        ``(loss, overflow, scale)``); ``batch``, optional, the step's inputs (kept for the NaN repro bundle)."""
        state = self._state
        state.cur_step_num += 1
        state.net_outputs, state.train_dataset_element = outputs, (batch or None)
        self._session.step_end(state)
        self._steps_in_epoch += 1
        state.net_outputs = state.train_dataset_element = None  # no reference kept past the step
        self._session.step_begin(state.cur_step_num + 1)

    def epoch_end(self) -> None:
        """At the end of each epoch (optional): evaluation on ``eval_dataset``, summaries, the report on disk."""
        state = self._state
        if state.epoch_num and state.batch_num is None and state.cur_epoch_num == 1 and self._steps_in_epoch:
            # ``epochs`` given, batches not countable up front: the first epoch tells the run's length.
            state.batch_num = self._steps_in_epoch
            self._session.plan_final_probe(replace(state, cur_step_num=0))
        self._session.epoch_end(state)
        self._state.cur_epoch_num += 1
        self._steps_in_epoch = 0

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc_type is None and self._steps_in_epoch:
            self.epoch_end()
        # Restores the cells and writes the reports; an exception of the loop is named (MSD003) and goes on.
        self._session.end(self._state, exc)


def watch(session: DoctorSession, network: Any, optimizer: Any = None, *, loss_fn: Any = None,
          train_dataset: Any = None, epochs: int | None = None) -> TrainingRun:
    """A ``TrainingRun`` for a hand-written loop over ``network``.

    ``optimizer`` / ``loss_fn``: needed unless ``network`` is a train/loss cell holding them (the probes need
    the optimizer, the loss rules the loss). ``train_dataset``: the data checks and the repro bundle's column
    roles. ``epochs``: the run's length when known, so a short run still gets enough probe steps.
    """
    found = unwrap(network)
    state = LoopState(network=network, train_network=found.train_cell, optimizer=optimizer or found.optimizer,
                      loss_fn=loss_fn or found.loss_fn, train_dataset=train_dataset, epoch_num=epochs,
                      batch_num=_batches(train_dataset) if epochs else None)
    return TrainingRun(session, state, found.backbone)


def _batches(dataset: Any) -> int | None:
    """Batches per epoch, when the dataset knows (only asked when ``epochs`` is given: it may read the data)."""
    try:
        size = dataset.get_dataset_size() if dataset is not None else None
    except Exception:  # noqa: BLE001 - the run's length is then unknown; the data checks say what is wrong
        return None
    return size if isinstance(size, int) and size > 0 else None
