"""The Doctor in a loop that trains several models, each with its own optimizer (a GAN's generator and discriminator).

    with doctor.watch({"generator": (g_net, g_opt), "discriminator": (d_net, d_opt)},
                      loss_fn=loss_fn, train_dataset=ds) as run:
        for real, in ds.create_tuple_iterator():
            d_loss, g_loss = train_step(real)
            run.step({"discriminator": d_loss, "generator": g_loss}, real)
    print(doctor.report)            # one report; each finding names its model

Each model gets the single-model run (``loop.TrainingRun``) with its own session: its probes, its history, its
findings, its files in ``summary_dir/<model>/``. This run adds what needs them together: one report
(``summary_dir/doctor_report.json``, findings tagged ``location["model"]``), one stop flag, one SIGTERM handler, and,
for a GAN, the adversarial judgement: the two losses are not minimised (MSD202-205 keep quiet on them) and MSD217/218
judge what goes wrong instead, from the losses, the real batch and a sample of the generator's output.

A GAN is recognised by its models' names (``generator``/``discriminator``, ``G``/``D``, ``netG``/``netD``,
``critic``...) or declared with ``adversarial=True``.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Callable

import numpy as np
from mindspore import ops

from mindspore_doctor import _io
from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding, Report, Severity
from mindspore_doctor.probes.instrument import _EMPTY_SAMPLE, SAMPLE_PAD, free_parameter
from mindspore_doctor.probes.instrument import _output_sample  # the activation probes' sampler
from mindspore_doctor.probes.swap import CannotProbe, probed_class, swap
from mindspore_doctor.rules.adversarial import ADVERSARIAL_RULES
from mindspore_doctor.signals import QUANTILE_LEVELS, AdversarialSignals, TrainingHistory, ValueStats
from mindspore_doctor.training.loop import TrainingRun, watch
from mindspore_doctor.training.session import DoctorSession
from mindspore_doctor.training.sigterm import SigtermReport

logger = logging.getLogger("mindspore_doctor")

_ROLES = {
    "generator": {"generator", "gen", "g", "netg", "gnet", "gmodel", "modelg", "generatormodel"},
    "discriminator": {"discriminator", "disc", "d", "netd", "dnet", "dmodel", "modeld", "critic", "discriminatormodel"},
}
"""Model names that say which player a model is, compared without case, ``_`` or ``-``."""
LABEL_CODES = ("MSD114", "MSD302", "MSD305", "MSD306")
"""Checks that take a dataset's label column for the network's targets (the loss on a sample batch, class balance,
label order, labels within the outputs): a GAN's players are trained on real/fake targets the loop makes, and a label
column in its dataset (MNIST's digits, an image folder's index) is not what either predicts."""
_GAN_CODES = tuple(code for codes, _ in ADVERSARIAL_RULES for code in codes)
_REAL_BATCHES = 4
"""Real batches whose values describe what the discriminator is shown (MSD218)."""
_MAX_VALUES = 1 << 16


def role(name: str) -> str | None:
    """``"generator"``, ``"discriminator"`` or None, from a model's name in the watch."""
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    return next((r for r, names in _ROLES.items() if key in names), None)


OPPOSED_CORRELATION = -0.3
"""Two losses whose step-to-step changes correlate at or below this move against each other (one player's gain is
the other's loss): an adversarial pair even under names that do not say so."""


def opposed(a: list[float], b: list[float], min_steps: int) -> float | None:
    """The correlation of two step-aligned loss series' changes, when both have ``min_steps`` finite values; None
    otherwise. Changes, not levels: two losses that both fall (two models learning side by side) correlate in level
    and not in their batch-to-batch changes; a GAN's move against each other on every batch."""
    n = min(len(a), len(b))
    x, y = np.diff(np.asarray(a[-n:], np.float64)), np.diff(np.asarray(b[-n:], np.float64))
    if n < min_steps or not (np.isfinite(x).all() and np.isfinite(y).all()) or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def value_stats(values: np.ndarray, step: int) -> ValueStats | None:
    """The distribution of an array's finite values (None when it has none)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    flat = flat[np.isfinite(flat)]
    if flat.size == 0:
        return None
    return ValueStats(step=step, quantiles=[float(q) for q in np.quantile(flat, QUANTILE_LEVELS)],
                      mean=float(flat.mean()), std=float(flat.std()), count=int(flat.size))


def _output_probe(self, *args, **kwargs):
    """The probed generator's ``construct``: the user's, and a sample of its output (the first, for a tuple)."""
    y = self._msd_inner(*args, **kwargs)
    first = y[0] if isinstance(y, (tuple, list)) else y
    ops.assign(self._msd_sample, _output_sample(ops.stop_gradient(first)))
    return y


class _GeneratorOutput:
    """A sample of the generator's output on every call (one gather and one copy), as the activation probes take
    theirs, so the host sees what the generator hands the discriminator; ``restore()`` puts the class back."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator
        self._empty = _EMPTY_SAMPLE.asnumpy()
        self._undo = swap(generator, probed_class(type(generator), _output_probe),
                          {"_msd_sample": free_parameter(self._empty.copy())})

    def read(self) -> np.ndarray | None:
        """The last call's sample without the padding; None before the first call."""
        sample = self.generator._msd_sample.asnumpy()  # pylint: disable=protected-access
        sample = sample[~np.all(sample == SAMPLE_PAD, axis=1)]
        sample = sample[:, ~np.all(sample == SAMPLE_PAD, axis=0)]
        return sample if sample.size else None

    def output_activation(self, sample: np.ndarray) -> str | None:
        """The kind of the activation cell whose output the generator returns: its probe sampled the same values."""
        for path, cell in self.generator.cells_and_names():
            theirs = getattr(cell, "_msd_sample", None) if path else None
            if theirs is None or getattr(cell, "_msd_kind", None) is None:
                continue
            values = theirs.asnumpy()
            values = values[:sample.shape[0], :sample.shape[1]]
            if values.shape == sample.shape and np.array_equal(values, sample):
                return cell._msd_kind  # pylint: disable=protected-access
        return None

    def restore(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()


@dataclasses.dataclass
class _Model:
    name: str
    run: TrainingRun
    session: DoctorSession
    network: Any
    optimizer: Any


class MultiModelRun:
    """What ``doctor.watch({name: (network, optimizer), ...})`` yields: ``run.step({name: loss, ...}, *batch)``.

    ``models``: name -> ``(network, optimizer)``, ``(network, optimizer, loss_fn)`` or a train cell holding both.
    ``adversarial``: None recognises a GAN by its models' names; True declares the losses adversarial; False not.
    """

    def __init__(self, config: DoctorConfig, models: Mapping[str, Any], *, loss_fn: Any = None,
                 train_dataset: Any = None, epochs: int | None = None, adversarial: bool | None = None) -> None:
        if not models:
            raise ValueError("doctor.watch({...}) needs at least one model: {name: (network, optimizer)}")
        self.config = config
        self._roles = {role(name): name for name in models if role(name)}
        gan = "generator" in self._roles and "discriminator" in self._roles
        self.adversarial = gan if adversarial is None else bool(adversarial)
        # Undeclared, two models with separate parameters: told from their losses (``opposed``) at each epoch end.
        self._detect = adversarial is None and not gan and len(models) == 2
        self._gan = gan and self.adversarial
        self._models: dict[str, _Model] = {}
        for name, spec in models.items():
            network, optimizer, own_loss = _unpack(name, spec)
            # Data checks judge the data against the network that reads it: a generator reads noise, not the dataset.
            dataset = None if self._gan and self._roles["generator"] == name else train_dataset
            session = DoctorSession(_model_config(config, name, LABEL_CODES if self._gan else ()))
            run = watch(session, network, optimizer, loss_fn=own_loss or loss_fn, train_dataset=dataset, epochs=epochs)
            self._models[name] = _Model(name, run, session, run._backbone,  # pylint: disable=protected-access
                                        run._state.optimizer)  # pylint: disable=protected-access
        self._train_dataset = train_dataset
        self._report = Report(meta={"target": "+".join(models), "models": {}, "adversarial": self.adversarial})
        self._found: list[Finding] = []  # the run's own findings (GAN rules, skipped checks)
        self._signals = AdversarialSignals(self._roles.get("generator", ""), self._roles.get("discriminator", ""))
        self._generator_output: _GeneratorOutput | None = None
        self._real: list[np.ndarray] = []
        self._real_from_steps = False
        self._generator_steps = 0
        self._ended = False
        self._disabled: set[str] = set()
        self._sigterm = SigtermReport(lambda error: self.end(None, error))  # one handler for every model
        self.began = False

    # --- what Doctor reads ---------------------------------------------------------------------

    @property
    def report(self) -> Report:
        """Every model's findings (message and ``location["model"]`` name the model) and the run's own."""
        report = Report(meta=dict(self._report.meta))
        for model in self._models.values():
            for finding in model.session.report.findings:
                report.add(dataclasses.replace(finding, message=f"{model.name}: {finding.message}",
                                               location={**finding.location, "model": model.name}))
        report.extend(self._found)
        return report

    @property
    def histories(self) -> dict[str, TrainingHistory]:
        """Each model's signals, by name."""
        return {name: model.session.history for name, model in self._models.items()}

    @property
    def history(self) -> TrainingHistory:
        """The first model's signals (``histories`` has each model's)."""
        return next(iter(self._models.values())).session.history

    @property
    def merged_report(self) -> Report | None:
        return None

    @property
    def run_state(self) -> Any:
        return None

    @property
    def should_stop(self) -> bool:
        """True once a finding at ``stop_on`` severity asks training to stop (the loop decides)."""
        stop = self.config.stop_on
        own = stop is not None and any(f.severity.rank >= Severity.parse(stop).rank for f in self._found)
        return own or any(model.run.should_stop for model in self._models.values())

    # --- the run ---------------------------------------------------------------------------------

    def __enter__(self) -> "MultiModelRun":
        self.began = True
        self._sigterm.catch()
        entered: list[_Model] = []
        try:
            for model in self._models.values():
                model.run.__enter__()
                entered.append(model)
                model.session.history.adversarial = self.adversarial
                self._report.meta["models"][model.name] = {"network": type(model.network).__name__,
                                                           "summary_dir": model.session.config.summary_dir}
        except BaseException as error:
            for model in reversed(entered):
                model.run.__exit__(type(error), error, error.__traceback__)
            self._sigterm.release()
            raise
        if self._gan:
            self._begin_gan()
        elif self.adversarial:
            self._skip("the models are not named as a GAN's players ('generator' and 'discriminator'), so which one "
                       "judges the other is not known")
        return self

    def step(self, losses: Mapping[str, Any], *batch: Any) -> None:
        """After each training step: ``losses`` maps each model that stepped to what its step returned (its loss);
        models that did not step this time (a discriminator trained 5 times per generator step) are left out.
        ``batch``, optional: the step's inputs as the loop feeds them (the NaN repro bundle, MSD218's real samples)."""
        if not isinstance(losses, Mapping):
            raise TypeError("run.step of a several-model watch takes {model name: loss, ...}, got "
                            f"{type(losses).__name__}")
        unknown = set(losses) - set(self._models)
        if unknown:
            raise KeyError(f"run.step: no model named {sorted(unknown)} in this watch (models: {list(self._models)})")
        for name, outputs in losses.items():
            self._models[name].run.step(outputs, *batch)
        if self._gan:
            self._guard("real-samples", lambda: self._take_real(batch))
            if self._roles["generator"] in losses:
                self._generator_steps += 1
                step = self._generator_steps
                if step == 1 or step % self.config.probe_every == 0:
                    self._guard("generator-output", lambda: self._read_generator(step))

    def epoch_end(self) -> None:
        """At the end of each epoch (optional): each model's evaluation, summaries and report; the GAN rules."""
        if self._detect:
            self._guard("adversarial-losses", self._detect_adversarial)
        for model in self._models.values():
            model.run.epoch_end()
        if self._gan:
            self._judge(final=False)
        self._guard("write-report", self._write_report)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.end(None, exc)

    def end(self, args: Any = None, error: BaseException | None = None) -> None:
        """Judge the run, put every cell back, write every report; never raises; runs once."""
        if self._ended:
            return
        self._ended = True
        try:
            if self._gan and error is None and self._generator_output is not None:
                self._guard("generator-output", lambda: self._read_generator(self._generator_steps))
            if self._detect:
                self._guard("adversarial-losses", self._detect_adversarial)
            if self._generator_output is not None:
                output, self._generator_output = self._generator_output, None
                self._guard("restore", output.restore)
            for model in self._models.values():
                model.run.__exit__(type(error) if error else None, error, error.__traceback__ if error else None)
            if self._gan:
                self._judge(final=error is None)
            if self.config.print_summary:
                steps = ", ".join(f"{m.name}: {len(m.session.history.steps)} steps" for m in self._models.values())
                print(f"mindspore_doctor summary ({steps}):\n{self.report}")
            self._guard("write-report", self._write_report)
        finally:
            self._sigterm.release()

    def _detect_adversarial(self) -> None:
        """Two models whose losses move against each other are judged as adversarial from now on: their loss-trend
        findings logged so far are re-judged at the end (the finding lifecycle) and end as resolved."""
        first, second = self._models.values()
        mine = {id(p) for p in getattr(first.optimizer, "parameters", ())}
        if any(id(p) in mine for p in getattr(second.optimizer, "parameters", ())):
            self._detect = False  # shared parameters: not two players
            return
        losses = [[v for _, v in m.session.history.losses] for m in (first, second)]
        r = opposed(*losses, min_steps=2 * self.config.loss_window)
        if r is None or r > OPPOSED_CORRELATION:
            return
        self._detect, self.adversarial = False, True
        self._report.meta["adversarial"] = True
        self._report.meta["adversarial_detected"] = {"loss_change_correlation": r}
        for model in self._models.values():
            model.session.history.adversarial = True
        logger.warning("mindspore_doctor: the losses of `%s` and `%s` move against each other (correlation of their "
                       "changes %.2f): judged as adversarial from now on (MSD202-205 off); name the models "
                       "'generator' and 'discriminator' for the GAN checks", first.name, second.name, r)

    # --- the GAN ---------------------------------------------------------------------------------

    def _begin_gan(self) -> None:
        generator = self._models[self._roles["generator"]].network
        try:
            self._generator_output = _GeneratorOutput(generator)
        except CannotProbe as why:
            self._skip(f"the generator `{type(generator).__name__}` cannot carry the output probe: {why}", ("MSD218",))
        if self._train_dataset is not None:
            self._guard("real-samples", self._real_from_dataset)

    def _real_from_dataset(self) -> None:
        """A first batch of the dataset, read with its own iterator (the training's order is not disturbed): what
        the discriminator is shown when the loop does not pass its batch to ``run.step``."""
        iterator = self._train_dataset.create_tuple_iterator(num_epochs=1, output_numpy=True)
        self._real = [_images(next(iter(iterator)))] if iterator is not None else []
        self._real = [r for r in self._real if r is not None]

    def _take_real(self, batch: tuple[Any, ...]) -> None:
        """The real samples as the loop passes them: they replace the dataset's (the loop may transform them)."""
        if not batch or (self._real_from_steps and len(self._real) >= _REAL_BATCHES):
            return
        arrays = [t.asnumpy() if hasattr(t, "asnumpy") else np.asarray(t) for t in batch]
        images = _images(arrays)
        if images is None:
            return
        if not self._real_from_steps:
            self._real, self._real_from_steps = [], True
        self._real.append(images)

    def _read_generator(self, step: int) -> None:
        output = self._generator_output
        if output is None or step < 1:
            return
        sample = output.read()
        if sample is None:
            return
        stats = value_stats(sample, step)
        signals = self._signals
        if stats is not None and (not signals.generated or signals.generated[-1].step != step):
            signals.generated.append(stats)
        if signals.output_activation is None:
            signals.output_activation = output.output_activation(sample)

    def _judge(self, final: bool) -> None:
        signals = self._signals
        generator, discriminator = (self._models[self._roles[r]].session.history
                                    for r in ("generator", "discriminator"))
        signals.generator_losses = [(s, v) for s, v in generator.losses if np.isfinite(v)]
        signals.discriminator_losses = [(s, v) for s, v in discriminator.losses if np.isfinite(v)]
        signals.generator_grad_norms = [(s.step, s.global_grad_norm) for s in generator.probed()
                                        if s.global_grad_norm is not None and np.isfinite(s.global_grad_norm)]
        if self._real:
            values = np.concatenate([r.reshape(-1) for r in self._real])
            signals.real = value_stats(values[::max(1, values.size // _MAX_VALUES)], 0)
        now: list[Finding] = []
        for codes, rule in ADVERSARIAL_RULES:
            found = self._guard(f"rule {codes[0]}", lambda: rule(signals, self.config))
            now += found or []
        self._report.meta["adversarial_signals"] = {
            "generator": signals.generator, "discriminator": signals.discriminator,
            "output_activation": signals.output_activation,
            "real": dataclasses.asdict(signals.real) if signals.real else None,
            "generated": [dataclasses.asdict(g) for g in signals.generated[-8:]]}
        self._record(now, final)

    def _record(self, now: list[Finding], final: bool) -> None:
        """Log what is new; at the end, an MSD217 that no longer holds is kept as resolved (info)."""
        known = {f.key: f for f in self._found}
        for finding in now:
            if finding.key not in known and self._wanted(finding.code):
                self._found.append(finding)
                logger.warning("mindspore_doctor %s [%s] %s @step %s: %s", finding.code, finding.rule, finding.where,
                               finding.step, finding.message)
        if final:
            holding = {f.key for f in now}
            last = max((s for s, _ in self._signals.discriminator_losses), default=None)
            for finding in self._found:
                if finding.code == "MSD217" and finding.key not in holding and not finding.resolved and last:
                    finding.resolve(last)

    # --- plumbing --------------------------------------------------------------------------------

    def _wanted(self, code: str) -> bool:
        from mindspore_doctor.checks import selector

        return selector(self.config)(code)

    def _guard(self, name: str, fn: Callable[[], Any]) -> Any:
        """A GAN check that raises is MSD001 and training goes on (as the sessions' checks)."""
        from mindspore_doctor.checks import attempt

        if name in self._disabled:
            return None
        result, failure = attempt(name, _GAN_CODES, fn, "; it is disabled for the rest of the run.")
        if failure is not None:
            self._disabled.add(name)
            self._found.append(failure)
        return result

    def _skip(self, why: str, codes: tuple[str, ...] = _GAN_CODES) -> None:
        codes = tuple(c for c in codes if self._wanted(c))
        if codes:
            self._found.append(make_finding("MSD002", f"{', '.join(codes)} skipped: {why}.",
                                            location={"check": "adversarial"}, evidence={"codes": list(codes)}))

    def _write_report(self) -> None:
        if self.config.summary_dir:
            _io.atomic_write_text(Path(self.config.summary_dir) / _io.REPORT_FILE, self.report.to_json())


def _unpack(name: str, spec: Any) -> tuple[Any, Any, Any]:
    """(network, optimizer, loss_fn) of one model entry."""
    if isinstance(spec, (tuple, list)):
        if not 1 <= len(spec) <= 3:
            raise ValueError(f"model {name!r}: expected (network, optimizer) or (network, optimizer, loss_fn), got "
                             f"{len(spec)} items")
        spec = (*spec, None, None)
        return spec[0], spec[1], spec[2]
    return spec, None, None


def _model_config(config: DoctorConfig, name: str, ignore: tuple[str, ...] = ()) -> DoctorConfig:
    """One model's options: its files in ``summary_dir/<name>``; the run prints one summary and evaluates nothing
    (``eval_dataset`` scores one model on labelled data); ``ignore``: codes that do not apply to this model."""
    folder = os.path.join(config.summary_dir, name) if config.summary_dir else None
    return dataclasses.replace(config, summary_dir=folder, eval_dataset=None, print_summary=False,
                               ignore=(*config.ignore, *ignore))


def _images(arrays: Any) -> np.ndarray | None:
    """The real samples in a batch: its floating-point column with the most values per sample (labels and ids are
    integers; a conditional GAN's class vector is smaller than its images)."""
    columns = [np.asarray(a) for a in (arrays if isinstance(arrays, (tuple, list)) else [arrays])]
    floats = [a for a in columns if a.dtype.kind == "f" and a.ndim >= 1 and a.size]
    if not floats:
        return None
    return max(floats, key=lambda a: a.size // max(1, a.shape[0]))


__all__ = ["MultiModelRun", "role", "value_stats"]
