"""What one training run writes: the JSON report and history, the HTML report, rank 0's merged report, the repro
bundle of the first non-finite loss, and the Doctor's own MindInsight / TensorBoard event files.

``DoctorSession`` measures and judges; it hands what it found to ``RunOutputs`` at the points of the run where it is
written (each step, each epoch, the end). Writing goes through the session's guard: a writer that raises becomes
MSD001 and is closed off, the others and the training go on.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable, Collection, Iterable

import numpy as np

from mindspore_doctor import _io
from mindspore_doctor._io import HISTORY_FILE, HTML_FILE, REPORT_FILE
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Report
from mindspore_doctor.probes.learning_rate import fixed_learning_rate
from mindspore_doctor.signals import StepSignals, TrainingHistory

Guard = Callable[[str, Iterable[str], Callable[[], Any]], Any]
"""``DoctorSession._guard``: run one job; if it raises (MSD001) or cannot run (MSD002), switch it off."""


class RunOutputs:
    """The files and event writers of one run. ``guard`` and ``disabled`` are the session's: a check it switched off
    (a writer that failed) is in ``disabled``."""

    def __init__(self, config: DoctorConfig, report: Report, history: Callable[[], TrainingHistory], guard: Guard,
                 disabled: Collection[str], report_dir: str | None) -> None:
        self.config = config
        self.report = report
        self._history = history
        self._guard = guard
        self._disabled = disabled
        self._report_dir = report_dir  # rank 0 writes the merged report here
        self._writers: list[Any] = []  # export.summary.BufferedSummaryWriter: MindInsight, TensorBoard
        self._run_info: dict[str, Any] = {}
        self._backbone: Any = None

    @property
    def history(self) -> TrainingHistory:
        """The run's history as the session reads it (``DoctorSession.history``: the quick steps' signals made),
        whatever the session did before writing."""
        return self._history()

    @property
    def has_writers(self) -> bool:
        """Whether an event file (MindInsight, TensorBoard) is open."""
        return bool(self._writers)

    # --- the event files --------------------------------------------------------------------

    def open(self, args: Any, backbone: Any, optimizer: Any, loss_fn: Any) -> None:
        """The run's configuration and the event files, when ``summary_dir`` asks for a dashboard."""
        self._backbone = backbone
        if self.config.summary_dir and (self.config.mindinsight or self.config.tensorboard):
            self._guard("run-info", (), lambda: self._read_run_info(args, backbone, optimizer, loss_fn))
            self._open_writers()

    def _read_run_info(self, args: Any, backbone: Any, optimizer: Any, loss_fn: Any) -> None:
        """The run's configuration, for the dashboards (MindInsight lineage, TensorBoard HParams) and the report."""
        dataset = args.train_dataset
        self._run_info = {
            "optimizer": type(optimizer).__name__ if optimizer is not None else None,
            "learning_rate": fixed_learning_rate(optimizer),
            "loss_function": type(loss_fn).__name__ if loss_fn is not None else None,
            "epoch": getattr(args, "epoch_num", None),
            "batch_size": dataset.get_batch_size() if dataset is not None else None,
            "train_dataset_size": dataset.get_dataset_size() if dataset is not None else None,
            "network": type(backbone).__name__,
            "parallel_mode": getattr(args, "parallel_mode", None),
            "device_num": getattr(args, "device_number", None),
            **dict(self.config.hparams or {}),
        }
        self.report.meta["run"] = self._run_info

    def _open_writers(self) -> None:
        """The Doctor's own event files (MindSpore allows one SummaryRecord, SummaryCollector may hold it)."""
        config = self.config
        options = {"max_layers": config.mindinsight_max_layers, "histogram_layers": config.histogram_layers,
                   "flush_seconds": config.summary_flush_seconds}
        if config.mindinsight:
            from mindspore_doctor.export.mindinsight import MindInsightWriter

            self._add_writer("mindinsight", lambda: MindInsightWriter(config.summary_dir, **options))
        if config.tensorboard:
            self._add_writer("tensorboard", lambda: self._tensorboard_writer(options))

    def _tensorboard_writer(self, options: dict[str, Any]) -> Any:
        from mindspore_doctor.export.tensorboard import TensorBoardWriter

        return TensorBoardWriter(self.config.summary_dir, run_info=self._run_info, **options)

    def _add_writer(self, check: str, open_writer: Callable[[], Any]) -> None:
        writer = self._guard(check, (), open_writer)
        if writer is not None:
            self._writers.append(writer)

    def _each_writer(self, write: Callable[[Any], Any]) -> None:
        """``write(writer)`` for every open writer; one that fails is closed off, the others go on."""
        for writer in list(self._writers):
            self._guard(writer.check, (), lambda: write(writer))
            if writer.check in self._disabled:
                self._writers.remove(writer)

    def watched_parameters(self) -> list[str] | tuple[()]:
        """The parameters whose updates a writer draws at every probe step (none when no writer does)."""
        if not any(w.updates_every_probe for w in self._writers):
            return ()
        return self._guard("histograms", (), self._histogram_names) or ()

    def write_updates(self, step: int, updates: Any) -> None:
        """A probe step's update histograms, for the writers that draw them at every probe."""
        self._each_writer(lambda w: w.updates_every_probe and w.write_histograms(step, updates=updates))

    def write_step(self, signals: StepSignals, episodes: Any) -> None:
        """One step's signals, once its loss is read."""
        self._each_writer(lambda w: w.write_step(signals, self.report, episodes=episodes))

    def write_evaluation(self, step: int, record: Any) -> None:
        """An evaluation's scores (``probes.evaluation.EvalRecord``) as scalars."""
        scores = {"eval/loss": record.eval_loss}
        if record.eval_metric is not None:
            scores[f"eval/{record.eval_metric.name.replace(' ', '_')}"] = record.eval_metric.value
        for name in ("target_eval", "holdout"):  # the other sets, when given
            loss, metric = getattr(record, f"{name}_loss"), getattr(record, f"{name}_metric")
            if loss is not None:
                scores[f"{name}/loss"] = loss
            if metric is not None:
                scores[f"{name}/{metric.name.replace(' ', '_')}"] = metric.value
        self._each_writer(lambda w: w.write_scalars(step, scores))

    def _histogram_names(self) -> list[str]:
        """The parameters whose weights and updates get histograms: those named in findings, first, last."""
        order = self.history.parameter_order or [p.name for p in self._backbone.trainable_params()]
        return self._writers[0].histogram_targets(self.report, order)

    def _weights(self) -> dict[str, np.ndarray]:
        params = {p.name: p for p in self._backbone.trainable_params()}
        return {n: params[n].asnumpy() for n in self._histogram_names() if n in params}

    def write_epoch(self, step: int) -> None:
        """Weight histograms of the layers that matter, the findings table, then the buffered steps to disk."""
        weights = self._guard("histograms", (), self._weights) or {}
        self._each_writer(lambda w: w.write_histograms(step, weights=weights))
        if any(w.shows_findings for w in self._writers):
            from mindspore_doctor.diagnosis import diagnose

            diagnosis = self._guard("diagnosis", (), lambda: diagnose(self.report, history=self.history).to_dict())
            self._each_writer(lambda w: w.write_findings(self.report, diagnosis, step))
        self._each_writer(lambda w: w.flush())

    def close_writers(self, episodes: Any) -> None:
        """Final counts, MindInsight's lineage, TensorBoard's final findings table and HParams."""
        diagnosis = self.report.meta.get("diagnosis")
        self._each_writer(lambda w: w.close(self.report, self._run_info, episodes=episodes, diagnosis=diagnosis))
        self._writers = []

    # --- the files ----------------------------------------------------------------------------

    def print_summary(self) -> None:
        """The findings, then the run's analyses in a few lines each (error analysis, error budget, label errors)."""
        if self.config.print_summary:
            from mindspore_doctor.export.summary import analysis_text

            try:
                extra = analysis_text(self.report.meta)
            except Exception as exc:  # pylint: disable=broad-except  # the summary itself still prints
                extra = f"(the run's analyses could not be printed: {exc!r})"
            print(f"mindspore_doctor summary ({len(self.history.steps)} steps):\n{self.report}"
                  + (f"\n\n{extra}" if extra else ""))

    def write_html(self) -> None:
        if self.config.summary_dir and self.config.html_report:
            from mindspore_doctor.export.html import write_html

            write_html(self.report, self.history, Path(self.config.summary_dir) / HTML_FILE, config=self.config)

    def write_merged_report(self, merged: Report) -> None:
        """Rank 0's report of every rank (``location["ranks"]``), in the directory above the ranks' own."""
        if self._report_dir:
            _io.atomic_write_text(Path(self._report_dir) / REPORT_FILE, merged.to_json())

    def write_report(self) -> None:
        """The report and the history, in ``summary_dir``."""
        if not self.config.summary_dir:
            return
        folder = Path(self.config.summary_dir)
        _io.atomic_write_text(folder / REPORT_FILE, self.report.to_json())
        _io.atomic_write_text(folder / HISTORY_FILE, json.dumps(self.history.to_dict()))

    def write_label_files(self, reports: list[Any], inputs: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """``doctor_label_issues.csv`` (every flagged sample) and ``doctor_label_suspects.npz`` (the inputs of each
        source's top suspects), in ``summary_dir``."""
        if self.config.summary_dir:
            from mindspore_doctor.export.labels import write_label_files

            write_label_files(self.config.summary_dir, reports, inputs)

    def save_repro(self, batch: Any, signals: StepSignals) -> None:
        """The batch that gave the first non-finite loss (when it is still at hand), with the last probed
        statistics. A deferred loss read finds the step later, when its batch is gone: the bundle says so."""
        if not self.config.summary_dir:
            return
        folder = Path(self.config.summary_dir)
        arrays = {f"input_{i}": t.asnumpy() for i, t in enumerate(batch or ()) if hasattr(t, "asnumpy")}
        if batch is not None:
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
        if batch is None:
            meta["inputs_missing"] = ("the loss was read after the step (loss_read='deferred'); rerun with "
                                      "loss_read='step' to keep the batch, or pass it to run.step(loss, *batch)")
        _io.atomic_write_text(folder / f"repro_step{signals.step}.json", json.dumps(meta, indent=2, default=str))
