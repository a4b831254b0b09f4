"""Rules over parameters, initialisation and the optimizer (MSD101-103, 108, 109, 111, 112).

Pure functions: they read the plain signals below (names, paths, shapes, numbers)
that ``static/parameters.py`` measures, plus ``DoctorConfig``; they never touch
MindSpore, so each one is unit-testable with hand-built signals.
"""
from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Finding, Severity

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

FP16_MAX = 65504.0


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
    in_optimizer: bool | None = None
    """None when no optimizer was given."""
    all_equal: bool | None = None
    """Every element has the same value (None: not measured)."""
    constant: float | None = None
    std: float | None = None
    fan_in: int | None = None
    """Set only for layers whose weight layout is known (Dense, Conv, attention projections)."""
    fan_out: int | None = None
    activation: str | None = None
    """Class name of the activation that follows the layer, when it can be seen."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)


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
class OptimizerSignal:
    cls: str
    family: str | None
    """"sgd" (SGD, Momentum, LARS over them), "adam" (Adam, AdamW, Lamb, ...) or None."""
    lr_groups: tuple[LrGroup, ...] = ()
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


def _path(path: str) -> str:
    return f"`{path}`" if path else "the root cell"


def _allowed(name: str, paths: tuple[str, ...], patterns: tuple[str, ...]) -> bool:
    """A pattern matches the parameter name, a cell path, or a cell-path prefix (glob allowed)."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(name, pattern):
            return True
        for path in paths:
            if fnmatch.fnmatchcase(path, pattern) or path == pattern or path.startswith(pattern + "."):
                return True
    return False


def shared_parameter(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD101: one Parameter object reachable under two or more cell paths."""
    found = []
    for p in params:
        if len(p.paths) < 2 or _allowed(p.name, p.paths, config.allow_shared):
            continue
        listed = ", ".join(f"`{x}`" if x else "<root>" for x in p.paths)
        found.append(
            make_finding(
                "MSD101",
                f"Parameter `{p.name}` is one object shared by {len(p.paths)} cells: {listed}. "
                "Every use updates the same weights.",
                location={"cell": p.cell, "parameter": p.name},
                evidence={"paths": list(p.paths), "shape": list(p.shape)},
                suggestion="If the sharing is unintended, build a separate cell for each use (a new instance, "
                "not the same object or `[cell] * n`); if it is intended (tied embeddings), declare it with "
                f"`allow_shared=[\"{p.name}\"]`.",
            )
        )
    return found


def _subtree_totals(params: list[ParamSignal], is_frozen) -> dict[str, list[int]]:
    """Per cell path: [frozen, total] trainable-looking parameters in its subtree."""
    totals: dict[str, list[int]] = {}
    for p in params:
        parts = p.cell.split(".") if p.cell else []
        frozen = is_frozen(p)
        for depth in range(len(parts) + 1):
            entry = totals.setdefault(".".join(parts[:depth]), [0, 0])
            entry[0] += frozen
            entry[1] += 1
    return totals


def _parent(path: str) -> str | None:
    return None if not path else path.rpartition(".")[0]


def _frozen_groups(params: list[ParamSignal], is_frozen) -> list[tuple[str, list[ParamSignal], bool]]:
    """Group frozen parameters: (cell, params, whole_cell) per largest fully-frozen subtree, else per owning cell."""
    totals = _subtree_totals(params, is_frozen)

    def fully(path: str | None) -> bool:
        return path is not None and totals[path][0] == totals[path][1]

    groups: dict[str, list[ParamSignal]] = {}
    for p in (p for p in params if is_frozen(p)):
        top = p.cell
        while fully(_parent(top)):
            top = _parent(top)
        groups.setdefault(top if fully(top) else p.cell, []).append(p)
    return [(cell, members, fully(cell)) for cell, members in groups.items()]


def _frozen_findings(params, is_frozen, what: str, fix: str) -> list[Finding]:
    found = []
    for cell, members, whole in _frozen_groups(params, is_frozen):
        names = [p.name for p in members]
        shown = ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        plural = len(names) > 1
        if whole:
            text = f"All {len(names)} weight{'s' if plural else ''} of {_path(cell)} {'are' if plural else 'is'} {what} ({shown})"
        else:
            text = f"{shown} in {_path(cell)} {'are' if plural else 'is'} {what}"
        found.append(
            make_finding(
                "MSD102",
                f"{text}; {'they' if plural else 'it'} will not learn.",
                location={"cell": cell, "parameter": names[0] if len(names) == 1 else None},
                evidence={"parameters": names, "count": len(names), "whole_cell": whole},
                suggestion=fix,
                severity=Severity.ERROR if whole else Severity.WARNING,
            )
        )
    return found


def frozen_parameter(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD102: trainable-looking weights with requires_grad=False, or trainable ones the optimizer does not hold."""
    looking = [p for p in params if p.role in TRAINABLE_LOOKING]
    found = _frozen_findings(
        looking,
        lambda p: not p.requires_grad,
        "frozen (requires_grad=False)",
        "Set `param.requires_grad = True` (and pass `net.trainable_params()` to the optimizer) unless freezing "
        "is intended; if it is, suppress MSD102 for this cell.",
    )
    trainable = [p for p in params if p.role != BUFFER and p.requires_grad and p.in_optimizer is not None]
    found += _frozen_findings(
        trainable,
        lambda p: not p.in_optimizer,
        "trainable but not held by the optimizer",
        "Build the optimizer from `net.trainable_params()` of the network you train (after any freezing or "
        "wrapping), so every trainable parameter is updated.",
    )
    return found


def foreign_optimizer_parameter(opt: OptimizerSignal, config: DoctorConfig) -> list[Finding]:
    """MSD103: the optimizer updates Parameters that are not objects of the trained network."""
    if not opt.foreign:
        return []
    shown = ", ".join(f"`{n}`" for n in opt.foreign[:5]) + (" ..." if len(opt.foreign) > 5 else "")
    why = ""
    if opt.foreign_same_name:
        why = (
            f" {len(opt.foreign_same_name)} of them have the same name as a network parameter but are different "
            "objects: the optimizer was built from another instance of the network."
        )
    return [
        make_finding(
            "MSD103",
            f"{opt.cls} holds {len(opt.foreign)} of {opt.held} parameters that are not in the network: {shown}.{why} "
            "Training updates those copies, never the network's own weights.",
            location={"parameter": opt.foreign[0]},
            evidence={
                "optimizer": opt.cls,
                "foreign": list(opt.foreign),
                "same_name": list(opt.foreign_same_name),
                "held": opt.held,
            },
            suggestion="Create the optimizer from the very network you train: "
            "`opt = nn.Momentum(net.trainable_params(), ...)` with the same `net` object passed to the train cell/Model.",
        )
    ]


def zero_initialized_weight(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD108: a weight whose elements are all equal at init (no symmetry breaking)."""
    found = []
    for p in params:
        if p.role not in INIT_CHECKED or not p.all_equal or p.size <= 1:
            continue
        value = p.constant if p.constant is not None else float("nan")
        what = "all zeros" if value == 0 else f"constant ({value:g} everywhere)"
        found.append(
            make_finding(
                "MSD108",
                f"Weight `{p.name}` of {p.cell_type} {_path(p.cell)} is {what} at init ({p.size} elements): "
                "every unit computes the same thing and gets the same gradient, so they never differ.",
                location={"cell": p.cell, "parameter": p.name},
                evidence={"value": value, "shape": list(p.shape)},
                suggestion="Use a random init: drop the explicit `weight_init` (MindSpore's default is "
                "HeUniform) or pass `weight_init='he_normal'`/`'xavier_uniform'`.",
            )
        )
    return found


def _recommended_stds(p: ParamSignal) -> dict[str, float]:
    """He for ReLU-like activations, Glorot/LeCun for saturating ones, all of them when unknown."""
    he = math.sqrt(2.0 / p.fan_in)
    glorot = math.sqrt(2.0 / (p.fan_in + p.fan_out))
    lecun = math.sqrt(1.0 / p.fan_in)
    if p.activation in RELU_LIKE:
        return {"He": he}
    if p.activation in SATURATING:
        return {"Glorot": glorot, "LeCun": lecun}
    return {"He": he, "Glorot": glorot, "LeCun": lecun}


def poor_initialization(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD109: init std more than ``init_std_factor`` away from every fitting recommendation.

    A small init of the output layer (the last weight defined) is a deliberate pattern (residual
    forecasters, zero-ish heads): nothing follows it for the signal to vanish through, so only a too
    large init is reported there.
    """
    factor = config.init_std_factor
    found = []
    weights = [p for p in params if p.role == WEIGHT]
    output_layer = weights[-1].name if weights else None
    for p in weights:
        if not p.fan_in or not p.fan_out or not p.std or p.all_equal:
            continue
        recommended = _recommended_stds(p)
        low, high = min(recommended.values()), max(recommended.values())
        if (low / factor <= p.std or p.name == output_layer) and p.std <= high * factor:
            continue
        scheme, target = min(recommended.items(), key=lambda kv: abs(math.log(p.std / kv[1])))
        ratio = p.std / target
        direction = "too large: activations and gradients explode" if ratio > 1 else "too small: signals vanish"
        after = f" followed by {p.activation}" if p.activation else ""
        found.append(
            make_finding(
                "MSD109",
                f"Weight `{p.name}` of {p.cell_type} {_path(p.cell)}{after} has init std {p.std:.3g}, "
                f"{max(ratio, 1 / ratio):.0f}x {'above' if ratio > 1 else 'below'} {scheme} ({target:.3g} for "
                f"fan_in={p.fan_in}, fan_out={p.fan_out}): {direction} with depth.",
                location={"cell": p.cell, "parameter": p.name},
                evidence={
                    "std": p.std,
                    "recommended": target,
                    "scheme": scheme,
                    "ratio": ratio,
                    "fan_in": p.fan_in,
                    "fan_out": p.fan_out,
                    "activation": p.activation,
                    "factor": factor,
                },
                suggestion="Drop the explicit `weight_init` (MindSpore's default HeUniform fits) or use "
                "`weight_init='he_normal'` before ReLU-like activations, `'xavier_uniform'` otherwise.",
            )
        )
    return found


def learning_rate_out_of_range(opt: OptimizerSignal, config: DoctorConfig) -> list[Finding]:
    """MSD111: the (peak) learning rate of a group outside the sane range of its optimizer family."""
    lo, hi = {"sgd": config.sgd_lr_range, "adam": config.adam_lr_range}[opt.family]
    found = []
    for group in opt.lr_groups:
        if group.peak is None or lo <= group.peak <= hi:
            continue
        high = group.peak > hi
        of = "" if group.label == "" else f" ({group.label}: `{group.parameters[0]}`" + (
            f" and {len(group.parameters) - 1} more)" if len(group.parameters) > 1 else ")"
        ) if group.parameters else f" ({group.label})"
        peak = "" if group.kind == "constant" else f"peak of its {group.kind} schedule "
        found.append(
            make_finding(
                "MSD111",
                f"{opt.cls}{of} learning rate {peak}{group.peak:g} is {'above' if high else 'below'} the sane "
                f"range [{lo:g}, {hi:g}] for {opt.family.upper() if opt.family == 'sgd' else 'Adam'}-family "
                f"optimizers: {'updates will overshoot and diverge' if high else 'weights will barely move'}.",
                location={"optimizer": opt.cls, "group": group.label or None},
                evidence={"lr": group.peak, "range": [lo, hi], "family": opt.family, "kind": group.kind,
                          "parameters": list(group.parameters)},
                suggestion=(
                    f"Use a learning rate around {'1e-3' if opt.family == 'adam' else '0.01-0.1'} for {opt.cls}"
                    + (" (did you mean an SGD-style lr with Adam?)" if high and opt.family == "adam" else "")
                    + "; set `sgd_lr_range`/`adam_lr_range` if this value is deliberate."
                ),
            )
        )
    return found


def loss_scale_misconfigured(ls: LossScaleSignal, config: DoctorConfig) -> list[Finding]:
    """MSD112: loss scaling that contradicts the precision or the train cell around it."""
    found = []
    opt_scale = ls.optimizer_loss_scale

    def add(setting: str, message: str, suggestion: str, severity: Severity | None = None, **evidence) -> None:
        """``setting`` names the misconfigured attribute; it keeps the findings apart in the report."""
        found.append(make_finding("MSD112", message, location={"cell": "", "setting": setting}, evidence=evidence,
                                  suggestion=suggestion, severity=severity))

    if ls.train_cell and ls.scale_sense is not None and opt_scale not in (None, 1.0):
        add(
            "optimizer.loss_scale",
            f"{ls.train_cell} already divides the gradients by its loss scale ({ls.scale_sense:g}), and the "
            f"optimizer divides them again by its `loss_scale={opt_scale:g}`: every update is {opt_scale:g}x too small.",
            "Keep the optimizer at `loss_scale=1.0` when the train cell or a DynamicLossScaleManager / "
            "FixedLossScaleManager(drop_overflow_update=True) does the loss scaling.",
            optimizer_loss_scale=opt_scale, scale_sense=ls.scale_sense,
        )
    if ls.train_cell and ls.sens is not None and opt_scale is not None and not math.isclose(ls.sens, opt_scale):
        factor = ls.sens / opt_scale
        add(
            "sens",
            f"{ls.train_cell} scales the gradients by sens={ls.sens:g} but the optimizer divides them by "
            f"`loss_scale={opt_scale:g}`: every update is {factor:.3g}x the intended size.",
            "Give the optimizer the same `loss_scale` as the train cell's `sens` "
            "(FixedLossScaleManager(s, drop_overflow_update=False) needs `loss_scale=s` on the optimizer).",
            sens=ls.sens, optimizer_loss_scale=opt_scale,
        )
    if (
        ls.scale_manager == "fixed"
        and ls.fp16_cells
        and ls.scale_sense is not None
        and ls.scale_sense > config.max_fixed_loss_scale
    ):
        add(
            "scale_sense",
            f"{ls.train_cell} uses a fixed loss scale of {ls.scale_sense:g} on a float16 network "
            f"(e.g. {_path(ls.fp16_cells[0])}); float16 tops out at {FP16_MAX:g}, so scaled gradients overflow and "
            "the steps are skipped: the network may never update.",
            "Use a fixed scale of 128-1024, or a DynamicLossScaleUpdateCell/DynamicLossScaleManager that lowers "
            "the scale on overflow.",
            Severity.ERROR,
            scale=ls.scale_sense, limit=config.max_fixed_loss_scale, fp16_cells=list(ls.fp16_cells[:5]),
        )
    scale = ls.scale_sense if ls.scale_sense is not None else (ls.sens if ls.sens not in (None, 1.0) else opt_scale)
    if ls.network_is_train_cell and not ls.low_precision and scale not in (None, 1.0):
        add(
            "loss_scale",
            f"Loss scale {scale:g} is set but the network runs entirely in float32: loss scaling only protects "
            "float16 gradients from underflow, here it only risks overflow-skipped steps and mismatched scales.",
            "Drop the loss scale for float32 training, or enable mixed precision "
            "(`amp_level='O2'`, `net.to_float(ms.float16)`).",
            scale=scale,
        )
    return found
