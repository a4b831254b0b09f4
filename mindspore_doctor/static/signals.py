"""The plain signals the static checks measure and the MSD1xx rules judge: parameter roles, the activations and
scale resets around a layer, and one frozen dataclass per measured thing (names, paths, shapes, numbers).

Nothing here imports MindSpore or the rules: ``static/`` produces these, ``rules/`` reads them, and rule tests
build them by hand.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Parameter roles, as the probe classifies them from the owning cell's type and the parameter key.
WEIGHT = "weight"  # Dense/Conv kernels, attention projections, custom ``*weight*`` tensors
BIAS = "bias"
NORM_GAMMA = "norm_gamma"
NORM_BETA = "norm_beta"
EMBEDDING = "embedding"
RECURRENT = "recurrent"  # LSTM/GRU/RNN gate weights
BUFFER = "buffer"  # not meant to be trained: BatchNorm moving statistics, integer counters
OTHER = "other"  # a parameter of a cell type we do not know

TRAINABLE_LOOKING = frozenset({WEIGHT, BIAS, NORM_GAMMA, NORM_BETA, EMBEDDING, RECURRENT})
"""Roles whose ``requires_grad=False`` is almost never intended (MSD102)."""
INIT_CHECKED = frozenset({WEIGHT, EMBEDDING, RECURRENT})
"""Roles that must not start constant (MSD108): a constant weight cannot break symmetry."""

# Activations after a layer, by cell class name, deciding which init recommendation applies (MSD109).
RELU_LIKE = frozenset(
    {"ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "CELU", "SeLU", "GELU", "FastGelu", "SiLU", "HSwish", "Mish"}
)
SATURATING = frozenset({"Tanh", "Sigmoid", "Softsign", "HSigmoid", "Hardtanh", "LogSigmoid"})

# How the scale of a layer's output is reset downstream (MSD109), strongest first.
NORM = "norm"
"""A normalization follows through linear / ReLU-like ops only: the init scale cancels exactly."""
ACTIVATION_NORM = "activation-norm"
"""A normalization follows after a smooth activation (which is near-linear for small inputs)."""
SOFTMAX = "softmax"
"""A softmax follows: its output is a distribution whatever the input scale."""
RESIDUAL = "residual"
"""The output is added to another path (a skip connection), which carries the signal on."""


# --- parameters and the optimizer (rules/parameters/) ---

@dataclass(frozen=True)
class ParamSignal:
    """What the probe measured about one network Parameter."""

    name: str
    cell: str
    """Owning cell path (first path in ``cells_and_names`` order; "" is the root)."""
    cell_type: str
    role: str
    shape: tuple[int, ...]
    requires_grad: bool = True
    paths: tuple[str, ...] = ()
    """Every distinct cell path the same Parameter object is reachable under (wrapper aliases removed)."""
    uses: int | None = None
    """Calls of its owning cell(s) in one forward pass, from the construct call sites along each path
    (None: not counted). A cell registered twice but called once (an alias) has 1."""
    repeated: bool = False
    """Some cell on its paths is registered twice by one parent (``[block] * 3``, ``self.b = self.a``),
    rather than handed to distinct cells or bound to several names in one statement (``self.a = self.b = X()``)."""
    owner_types: tuple[str, ...] = ()
    """Class names of the distinct cell objects holding it (two for tied embedding/projection weights)."""
    owner_cells: tuple[str, ...] = ()
    """One path per distinct cell object holding it, in the order of ``owner_types``."""
    owners_running: int | None = None
    """How many of those distinct cells run in one forward pass (None: not counted)."""
    owners_alike: bool = False
    """Two or more distinct cells hold it and all are of one class with equal settings (channels, stride,
    dilation, activation): separate copies of one layer, not a layer reusing another's matrix differently."""
    in_optimizer: bool | None = None
    """None when no optimizer was given."""
    at_init: bool | None = None
    """Measured for frozen parameters: True when the values still match a MindSpore initializer (constant, or
    uniform within a known bound with its spread), False when they are trained or loaded values (or the
    normalization reading the layer's output has trained scale/shift), None when nothing tells."""
    fixed: bool = False
    """Frozen, in a layer whose frozen kernel holds deterministic values on a small grid (``arange``, a Sobel
    kernel): a constant layer by design, neither a random init nor trained values."""
    key: str = ""
    """Attribute name on the owning cell; ``cell.key`` is the registration path when the Parameter's name
    differs from it (a library that names parameters before placing their cells)."""
    all_equal: bool | None = None
    """Every element has the same value (None: not measured)."""
    constant: float | None = None
    std: float | None = None
    """Of the initial values: measured for weights whose fans are known and for embedding tables."""
    fresh_draw: bool | None = None
    """An embedding table's values are shaped like an initializer's draw (centred; a uniform's or a normal's
    tails), not like loaded or trained rows (None: not measured)."""
    fan_in: int | None = None
    """Set only for layers whose weight layout is known (Dense, Conv, attention projections)."""
    fan_out: int | None = None
    activation: str | None = None
    """Class name of the activation that follows the layer, when it can be seen."""
    scale_reset: str | None = None
    """NORM, ACTIVATION_NORM, SOFTMAX or RESIDUAL: what resets the scale of the layer's output on every path
    it takes (the weakest of them); None when a path reaches the output with nothing in between, or is unknown."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def location(self) -> dict[str, str]:
        return parameter_location(self.cell, self.key, self.name)


def parameter_location(cell: str, key: str, name: str) -> dict[str, str]:
    """Where a parameter is: the real cell path, the Parameter's own name (what optimizer groups, checkpoints and
    the Doctor's probes key on) and, where the two differ, its registration path ``cell.key`` (mindcv names
    parameters before placing their cells: `0.0.dwconv.weight` lives at `stages.0.0.dwconv.weight`)."""
    path = f"{cell}.{key}" if cell else key
    return {"cell": cell, "parameter": name, **({"parameter_path": path} if key and path != name else {})}


@dataclass(frozen=True)
class LrGroup:
    """The learning rate of one optimizer parameter group; ``peak`` is None when it cannot be read."""

    label: str
    peak: float | None
    kind: str = "constant"
    """"constant", "list" (per-step values) or the LearningRateSchedule class name."""
    parameters: tuple[str, ...] = ()
    """Names of the parameters this learning rate drives."""


@dataclass(frozen=True)
class DecayGroup:
    """Parameters the optimizer decays by one weight-decay value."""

    label: str
    value: float
    parameters: tuple[str, ...] = ()
    norm_or_bias: tuple[str, ...] = ()
    """Those of ``parameters`` that are normalization scales/shifts or biases."""


@dataclass(frozen=True)
class MomentumGroup:
    """The momentum (heavy-ball coefficient) the optimizer applies to one parameter group."""

    label: str
    """"group i" (``param_groups[i]``) when the optimizer has several groups, else ""."""
    value: float
    parameters: tuple[str, ...] = ()


@dataclass(frozen=True)
class OptimizerSignal:
    cls: str
    family: str | None
    """"sgd" (SGD, Momentum, LARS over them), "adam" (Adam, AdamW, Lamb, ...) or None."""
    lr_groups: tuple[LrGroup, ...] = ()
    decay_groups: tuple[DecayGroup, ...] = ()
    momentum_groups: tuple[MomentumGroup, ...] = ()
    foreign: tuple[str, ...] = ()
    """Names of optimizer parameters that are not objects of the network."""
    foreign_same_name: tuple[str, ...] = ()
    """Those of ``foreign`` whose name is also a network parameter name (another instance)."""
    held: int = 0


@dataclass(frozen=True)
class LossScaleSignal:
    network_is_train_cell: bool
    """``lint`` received the train cell itself, so the precision seen is the precision trained."""
    fp16_cells: tuple[str, ...] = ()
    low_precision: bool = False
    """Any fp16 or bf16 cell, AMP level or half-precision parameter."""
    optimizer_loss_scale: float | None = None
    train_cell: str | None = None
    """Class name of the train cell."""
    sens: float | None = None
    """``TrainOneStepCell.sens``: the gradient scale of a plain train cell."""
    scale_sense: float | None = None
    """Loss scale of a ``TrainOneStepWithLossScaleCell``."""
    scale_manager: str | None = None
    """"fixed" (Tensor or FixedLossScaleUpdateCell), "dynamic", or None."""


# --- layers (rules/layers.py) ---

@dataclass(frozen=True)
class DropoutSignal:
    name: str
    drop_rate: float
    via_keep_prob: bool
    """The rate was given as the deprecated ``keep_prob`` (probability to KEEP)."""
    location: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BatchNormSignal:
    name: str
    use_batch_statistics: bool
    setting: str
    """The argument that fixes it, as written: ``use_batch_statistics=True`` (nn), ``track_running_stats=False``
    (mint: no running statistics are kept, so batch statistics in eval too)."""
    location: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SoftmaxAxisSignal:
    name: str
    axis: int | tuple
    log: bool
    location: dict[str, Any] = field(default_factory=dict)


# --- the construct graph (rules/graph.py) ---

@dataclass(frozen=True)
class MaskedMean:
    """The denominator counts the entries of a mask: the division is a masked mean."""

    count: str
    """The reduction as written (``mask.sum()``, ``self.mean(mask)``)."""
    mask: str
    """The mask as written at the reduction."""
    evidence: str
    """What makes it a mask, as written (``target != 0``, ``the argument `mask```)."""
    axis: str | None = None
    """The axis counted over when there is one count per row (an empty row gives 0/0); None: one count overall."""
    labels: str | None = None
    """The label argument the mask comes from (a batch can hold no valid label), else None."""
    mean: bool = False
    """The count is a mean (the fraction of valid entries): its guard is a small floor, not 1."""


@dataclass(frozen=True)
class DivisionSignal:
    owner: str
    """The cell path (or class name in source mode) whose construct divides."""
    expression: str
    denominator: str
    reason: str
    location: dict[str, Any] = field(default_factory=dict)
    instances: int = 1
    masked: MaskedMean | None = None
    """Set when the denominator is a mask's count."""


@dataclass(frozen=True)
class OutputActivationSignal:
    activation: str
    """``softmax`` | ``log_softmax`` | ``sigmoid`` | ``logits`` (a linear layer) | ``unknown``."""
    layer: str
    """Cell path (or op) producing the network output."""
    loss: str
    """Loss class name; ``log`` for ``ops.log`` in a hand-written loss."""
    location: dict[str, Any] = field(default_factory=dict)
    loss_cell: str = ""
    """A hand-written loss that passes the value on to ``loss`` (its class name), else empty."""
    call: str = ""
    """The call in ``loss_cell`` that receives it (``self.nll(log_probs, labels)``)."""
    in_loss: bool = False
    """``layer`` is an activation ``loss_cell`` applies itself (not the network output)."""
    unused: tuple[tuple[str, str], ...] = ()
    """(attribute, class) of the activations ``loss_cell`` defines and never applies (``("log_softmax",
    "LogSoftmax")``)."""
    switched_off: tuple[tuple[str, str, str], ...] = ()
    """(cell path, class, ``if`` test) of activation cells of the network called only under a test that is false
    on this instance (``("net.log_softmax", "LogSoftmax", "self.use_log_softmax")``): training never applies them."""


@dataclass(frozen=True)
class UnusedMemberSignal:
    name: str
    kind: str
    """``cell`` or ``parameter``."""
    type_name: str
    location: dict[str, Any] = field(default_factory=dict)
    discarded: bool = False
    """construct calls the cell but drops its output (``aux = self.aux_head(h)``, never read)."""


@dataclass(frozen=True)
class BroadcastSignal:
    output_shape: tuple[int, ...]
    label_shape: tuple[int, ...]
    loss: str
    elementwise: bool
    location: dict[str, Any] = field(default_factory=dict)
