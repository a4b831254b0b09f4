"""Signals: the plain numbers probes measure and rules and exporters read.

No MindSpore objects here: a rule or an exporter can be exercised with numbers
built by hand, and a finished run can be re-read from JSON.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


ACTIVATION_KINDS = {"ReLU": "relu", "ReLU6": "relu6", "Sigmoid": "sigmoid", "Tanh": "tanh", "GELU": "gelu"}
"""The activation cells the probes sample, by MindSpore class name (``nn`` and ``mint.nn`` alike), and their kind."""
DEAD_AT_ZERO = ("relu", "relu6")
"""Kinds whose unit passes no gradient while its output is <= 0 (a dead unit, MSD212)."""


@dataclass
class ActivationStats:
    """Statistics of one activation cell's output at one probed step."""

    kind: str
    """"relu", "sigmoid", "tanh", "gelu", ..."""
    mean_abs: float
    dead_fraction: float = 0.0
    """ReLU-like: fraction of outputs <= 0."""
    saturated_fraction: float = 0.0
    """Sigmoid/Tanh: fraction of inputs in the flat tails."""
    dead_unit_fraction: float = -1.0
    """ReLU-like: fraction of units (output positions of one sample) <= 0 on every sample of the batch; -1: not
    measured (batch too small or no batch axis)."""
    units: int = 0
    """ReLU-like: how many units ``dead_unit_fraction`` was measured on (a layer's output positions, at most the
    probe's sample width); 0: not known. A fraction over a handful of units is coarse and noisy (MSD212)."""
    nonfinite: int = 0
    order: int = 0
    """Position of the cell in network order (0 = closest to the input)."""


class _NotProbed(dict):
    """The statistics of a step that was not probed: one shared, read-only empty dict. A dict of its own for each
    of a step's eight statistics kept ~0.8 KB a step in the history (800 MB over a million steps); a probe step's
    signals get dicts of their own (``StepSignals.probed``)."""

    __slots__ = ()

    def __hash__(self) -> int:  # one instance, shared as a dataclass default
        return id(self)

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a step's statistics are read-only until it is probed: call StepSignals.probed() first")

    __setitem__ = __delitem__ = __ior__ = update = setdefault = pop = popitem = clear = _read_only


NOT_PROBED: dict[str, Any] = _NotProbed()
_STATISTICS = ("grad_norm", "grad_rms", "grad_nonfinite", "weight_nonfinite", "update_ratio", "update_abs",
               "weight_mean_abs", "activations")


@dataclass(slots=True)
class StepSignals:
    """What the probes read at one training step. Empty dicts: not probed this step (``NOT_PROBED``, read-only)."""

    step: int
    loss: float | None = None
    epoch: int | None = None
    grad_norm: dict[str, float] = NOT_PROBED
    """Per trainable parameter name: L2 norm of its gradient."""
    grad_rms: dict[str, float] = NOT_PROBED
    grad_nonfinite: dict[str, int] = NOT_PROBED
    weight_nonfinite: dict[str, int] = NOT_PROBED
    update_ratio: dict[str, float] = NOT_PROBED
    """Per parameter: mean|w_t - w_{t-1}| / mean|w_{t-1}| over this step."""
    update_abs: dict[str, float] = NOT_PROBED
    """Per parameter: max|w_t - w_{t-1}| (for the "not updating" test)."""
    weight_mean_abs: dict[str, float] = NOT_PROBED
    activations: dict[str, ActivationStats] = NOT_PROBED
    """Per activation cell path."""
    overflow: bool | None = None
    """Loss-scale overflow at this step (None: no loss-scale cell)."""
    loss_scale: float | None = None
    learning_rate: float | None = None
    """The optimizer's learning rate at this step (the largest of its groups); None: not read or not known."""
    group_learning_rates: list[float] = field(default_factory=list)
    """With several learning-rate groups (``TrainingHistory.lr_groups``): each group's rate at this step."""

    def probed(self) -> "StepSignals":
        """Give each statistic a dict of its own, to be filled; returns the signals."""
        for name in _STATISTICS:
            if isinstance(getattr(self, name), _NotProbed):
                setattr(self, name, {})
        return self

    @property
    def global_grad_norm(self) -> float | None:
        if not self.grad_norm:
            return None
        return float(sum(v * v for v in self.grad_norm.values()) ** 0.5)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StepSignals":
        data = dict(data)
        data["activations"] = {k: ActivationStats(**v) for k, v in data.get("activations", {}).items()}
        return cls(**data)


@dataclass
class StartState:
    """Whether a training run starts from freshly initialised weights, measured before its first step: a resumed,
    continued or fine-tuned run starts from what the network learned, and the rules that judge what a fresh network
    does first (MSD205, MSD215) keep quiet on it."""

    fresh: bool | None
    """True: nothing shows training and parameters hold the values of a MindSpore initialisation; False: trained or
    loaded weights, or an optimizer that has stepped; None: nothing tells either way."""
    reason: str
    """The evidence that decided, with its numbers."""


@dataclass
class TrainingHistory:
    """Every probed step of a run, in order; what the MSD2xx rules and the reports read."""

    steps: list[StepSignals] = field(default_factory=list)
    parameter_order: list[str] = field(default_factory=list)
    """Trainable parameters in network order (first layer first)."""
    num_classes: int | None = None
    parameter_shapes: dict[str, list[int]] = field(default_factory=dict)
    """Shape of each trainable parameter (rules tell weights from biases/norm scales by rank)."""
    peak_learning_rate: float | None = None
    """The schedule's largest learning rate (known up front for a per-step list, else the largest read so far):
    updates judged at a step the schedule lowered the rate (warm-up, decay) are scaled back to it (MSD210)."""
    lr_groups: dict[str, int] = field(default_factory=dict)
    """Parameter name -> index of its learning-rate group, when the optimizer has several (empty: one rate)."""
    group_peak_learning_rates: list[float] = field(default_factory=list)
    """Per learning-rate group: its schedule's largest rate, as ``peak_learning_rate`` is for the optimizer."""
    start: StartState | None = None
    """Where the first step started from (``static/start_state.py``); None: not measured."""
    adversarial: bool = False
    """The loss is one side of an adversarial game (a GAN's generator or discriminator, ``training/multi.py``): it
    rises and swings by design, so the rules that expect a minimised loss (MSD202-205) do not judge it."""

    def append(self, s: StepSignals) -> None:
        self.steps.append(s)

    @property
    def losses(self) -> list[tuple[int, float]]:
        return [(s.step, s.loss) for s in self.steps if s.loss is not None]

    def probed(self) -> list[StepSignals]:
        """Steps where the in-graph statistics (not only the loss) were read."""
        return [s for s in self.steps if s.grad_norm or s.update_ratio or s.activations]

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameter_order": list(self.parameter_order),
            "num_classes": self.num_classes,
            "parameter_shapes": {k: list(v) for k, v in self.parameter_shapes.items()},
            "peak_learning_rate": self.peak_learning_rate,
            "lr_groups": dict(self.lr_groups),
            "group_peak_learning_rates": list(self.group_peak_learning_rates),
            "start": asdict(self.start) if self.start is not None else None,
            "adversarial": self.adversarial,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingHistory":
        return cls(
            steps=[StepSignals.from_dict(s) for s in data.get("steps", [])],
            parameter_order=list(data.get("parameter_order", [])),
            num_classes=data.get("num_classes"),
            parameter_shapes={k: list(v) for k, v in data.get("parameter_shapes", {}).items()},
            peak_learning_rate=data.get("peak_learning_rate"),
            lr_groups=dict(data.get("lr_groups", {})),
            group_peak_learning_rates=list(data.get("group_peak_learning_rates", [])),
            start=StartState(**data["start"]) if data.get("start") else None,
            adversarial=bool(data.get("adversarial", False)),
        )


@dataclass
class Metric:
    """One score of a model, or of a trivial predictor, on some data."""

    name: str
    """"accuracy" (binary, multi-class, per token/pixel), "label accuracy" (multi-label) or "mse" (regression)."""
    value: float
    higher_is_better: bool
    trivial: str = ""
    """For a trivial predictor's score: how it predicts ("predicting the majority class")."""


@dataclass
class EvalRecord:
    """One evaluation: train and eval losses and metrics after ``epoch`` (None: not measured)."""

    epoch: int
    task: str | None = None
    """What the metrics judge: "binary", "multiclass", "multilabel" or "regression" (None: no metric)."""
    train_loss: float | None = None
    eval_loss: float | None = None
    train_loss_se: float | None = None
    """Standard error of ``train_loss`` over its samples (None: not estimated, taken as no noise)."""
    eval_loss_se: float | None = None
    """Standard error of ``eval_loss`` over the eval samples: a small eval split's loss is noisy."""
    eval_metric: Metric | None = None
    eval_samples: int | None = None
    train_samples: int | None = None
    """Samples the train loss/metric were measured on (the fixed training sample, or fresh batches)."""
    train_metric: Metric | None = None
    baseline: Metric | None = None
    """The trivial predictor's eval score (majority class / label mean, fitted on the train labels when known)."""
    train_baseline: Metric | None = None
    """The trivial predictor's score on the train sample (what MSD402 compares the train metric with)."""
    target_eval_metric: Metric | None = None
    """The score on ``target_eval_dataset`` (a second validation set from the test distribution; None: not given)."""
    target_eval_loss: float | None = None
    target_eval_loss_se: float | None = None
    target_eval_samples: int | None = None
    holdout_metric: Metric | None = None
    """The score on ``holdout_dataset`` (a held-out test set; None: not given)."""
    holdout_loss: float | None = None
    holdout_loss_se: float | None = None
    holdout_samples: int | None = None


QUANTILE_LEVELS = tuple(i / 20 for i in range(21))
"""The levels at which ``ValueStats.quantiles`` are taken: 0, 5 %, ..., 100 %."""


@dataclass
class ValueStats:
    """The distribution of the values one tensor stream holds (a batch of real images, a generator's output)."""

    step: int
    """The step it was measured at (0: before training)."""
    quantiles: list[float]
    """The values' quantiles at ``QUANTILE_LEVELS``: [0] is the minimum, [-1] the maximum."""
    mean: float
    std: float
    count: int
    """How many values were measured."""

    @property
    def low(self) -> float:
        return self.quantiles[0]

    @property
    def high(self) -> float:
        return self.quantiles[-1]

    def fraction_outside(self, low: float, high: float) -> float:
        """The fraction of the values below ``low`` or above ``high``, read from the quantiles (to 5 %)."""
        below = _fraction_below(self.quantiles, low)
        above = 1.0 - _fraction_below(self.quantiles, high, inclusive=True)
        return below + above


def _fraction_below(quantiles: list[float], value: float, inclusive: bool = False) -> float:
    """Fraction of a distribution below ``value`` (at or below with ``inclusive``), by its quantile levels."""
    levels = [level for level, q in zip(QUANTILE_LEVELS, quantiles) if (q <= value if inclusive else q < value)]
    return levels[-1] if levels else 0.0


@dataclass
class AdversarialSignals:
    """What the GAN rules (MSD217, MSD218) read: the two players' losses, and what the discriminator is shown."""

    generator: str
    """The generator's model name in the watch, for the findings."""
    discriminator: str
    generator_losses: list[tuple[int, float]] = field(default_factory=list)
    """(step, loss) of each generator step."""
    discriminator_losses: list[tuple[int, float]] = field(default_factory=list)
    real: ValueStats | None = None
    """The real samples the discriminator is shown (the batch passed to ``run.step``, or the dataset's)."""
    generated: list[ValueStats] = field(default_factory=list)
    """The generator's output at each probed generator step."""
    output_activation: str | None = None
    """The kind of the generator's last activation when its output is that activation's ("tanh", "sigmoid")."""
    generator_grad_norms: list[tuple[int, float]] = field(default_factory=list)
    """(step, global gradient norm) of the generator at its probed steps."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
