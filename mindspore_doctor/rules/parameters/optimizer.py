"""The optimizer's hyperparameters: learning rate (MSD111), loss scale (MSD112), weight decay (MSD116), momentum
(MSD117).

Pure functions of the plain signals of ``static/optimizer_settings.py`` (``OptimizerSignal``, ``LossScaleSignal``)
and ``DoctorConfig``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding, Severity
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING
from mindspore_doctor.rules.parameters.wording import cell_text
from mindspore_doctor.static.signals import LossScaleSignal, OptimizerSignal

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _group_of(label: str, parameters: tuple[str, ...]) -> str:
    """`` (group 1: `fc.weight` and 3 more)`` for one of several groups, else nothing."""
    if not label:
        return ""
    more = f" and {len(parameters) - 1} more" if len(parameters) > 1 else ""
    return f" ({label}: `{parameters[0]}`{more})" if parameters else f" ({label})"


SGD_LR_RANGE = Option(
    "sgd_lr_range", (1e-6, 1.0),
    "MSD111: sane learning-rate range for SGD/Momentum-family optimizers.",
    type="tuple[float, float]",
)
ADAM_LR_RANGE = Option(
    "adam_lr_range", (1e-7, 1e-2),
    "MSD111: sane learning-rate range for Adam-family optimizers.",
    type="tuple[float, float]",
)
LEARNING_RATE_OUT_OF_RANGE = Rule(
    "MSD111", "learning-rate-out-of-range", WARNING,
    "learning rate outside a sane range",
    options=(SGD_LR_RANGE, ADAM_LR_RANGE),
)


@LEARNING_RATE_OUT_OF_RANGE.judge
def learning_rate_out_of_range(opt: OptimizerSignal, config: DoctorConfig) -> list[Finding]:
    """MSD111: the (peak) learning rate of a group outside the sane range of its optimizer family."""
    lo, hi = {"sgd": config.sgd_lr_range, "adam": config.adam_lr_range}[opt.family]
    found = []
    for group in opt.lr_groups:
        if group.peak is None or lo <= group.peak <= hi:
            continue
        high = group.peak > hi
        of = _group_of(group.label, group.parameters)
        peak = "" if group.kind == "constant" else f"peak of its {group.kind} schedule "
        found.append(
            LEARNING_RATE_OUT_OF_RANGE.finding(
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


FP16_MAX = 65504.0


MAX_FIXED_LOSS_SCALE = Option(
    "max_fixed_loss_scale", 65504.0,
    "MSD112: a fixed loss scale above this (float16's largest value) overflows a float16 network.",
)
LOSS_SCALE_MISCONFIGURED = Rule(
    "MSD112", "loss-scale-misconfigured", WARNING,
    "loss scale inconsistent with mixed precision",
    options=(MAX_FIXED_LOSS_SCALE,),
)


@LOSS_SCALE_MISCONFIGURED.judge
def loss_scale_misconfigured(ls: LossScaleSignal, config: DoctorConfig) -> list[Finding]:
    """MSD112: loss scaling that contradicts the precision or the train cell around it."""
    found = []
    opt_scale = ls.optimizer_loss_scale

    def add(setting: str, message: str, suggestion: str, severity: Severity | None = None, **evidence) -> None:
        """``setting`` names the misconfigured attribute; it keeps the findings apart in the report."""
        found.append(LOSS_SCALE_MISCONFIGURED.finding(message, location={"cell": "", "setting": setting},
                                                      evidence=evidence, suggestion=suggestion, severity=severity))

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
            f"(e.g. {cell_text(ls.fp16_cells[0])}); float16 tops out at {FP16_MAX:g}, so scaled gradients overflow and "
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


SGD_WEIGHT_DECAY_MAX = Option(
    "sgd_weight_decay_max", 1e-2,
    "MSD116: upper end of the usual weight decay for SGD/Momentum-family optimizers (usual range 1e-5 to 1e-2).",
)
ADAM_WEIGHT_DECAY_MAX = Option(
    "adam_weight_decay_max", 0.1,
    "MSD116: upper end of the usual weight decay for Adam-family optimizers, AdamWeightDecay/AdamW included (usual "
    "range 0 to 0.1).",
)
WEIGHT_DECAY_FACTOR = Option(
    "weight_decay_factor", 10.0,
    "MSD116: a parameter group decayed by more than this multiple of the usual upper end is reported; "
    "normalization/bias parameters as soon as their decay exceeds the upper end itself.",
)
WEIGHT_DECAY_OUT_OF_RANGE = Rule(
    "MSD116", "weight-decay-out-of-range", WARNING,
    "weight decay far outside the usual range",
    options=(SGD_WEIGHT_DECAY_MAX, ADAM_WEIGHT_DECAY_MAX, WEIGHT_DECAY_FACTOR),
)


@WEIGHT_DECAY_OUT_OF_RANGE.judge
def weight_decay_out_of_range(opt: OptimizerSignal, config: DoctorConfig) -> list[Finding]:
    """MSD116: a group's weight decay far above the usual range of its optimizer family, or a decay above that
    range on normalization/bias parameters."""
    limit = {"sgd": config.sgd_weight_decay_max, "adam": config.adam_weight_decay_max}[opt.family]
    family = "SGD/Momentum" if opt.family == "sgd" else "Adam"
    found = []
    for group in opt.decay_groups:
        evidence = {"weight_decay": group.value, "usual_max": limit, "family": opt.family,
                    "factor": config.weight_decay_factor, "parameters": list(group.parameters)}
        location = {"optimizer": opt.cls, "group": group.label or None}
        if group.value > limit * config.weight_decay_factor:
            found.append(WEIGHT_DECAY_OUT_OF_RANGE.finding(
                f"{opt.cls}{_group_of(group.label, group.parameters)} weight decay {group.value:g} is "
                f"{group.value / limit:.0f}x the usual upper end {limit:g} for {family}-family optimizers: the decay "
                "outweighs the gradient and pulls the weights toward zero (underfitting, shrinking activations).",
                location=location, evidence=evidence,
                suggestion=f"Use a weight decay of at most {limit:g} for {opt.cls} (typical: "
                f"{'1e-4 to 5e-4' if opt.family == 'sgd' else '0.01 to 0.05 with AdamW'}); raise "
                f"`{opt.family}_weight_decay_max` if this value is deliberate.",
            ))
        elif group.value > limit and group.norm_or_bias:
            shown = ", ".join(f"`{n}`" for n in group.norm_or_bias[:3]) + (
                f" and {len(group.norm_or_bias) - 3} more" if len(group.norm_or_bias) > 3 else "")
            found.append(WEIGHT_DECAY_OUT_OF_RANGE.finding(
                f"{opt.cls}{_group_of(group.label, group.parameters)} decays {len(group.norm_or_bias)} "
                f"normalization/bias parameters ({shown}) by {group.value:g}, above the usual upper end {limit:g} "
                f"for {family}-family optimizers: it shrinks normalization scales and biases toward zero and "
                "regularizes nothing.",
                location={**location, "parameter": group.norm_or_bias[0]},
                evidence={**evidence, "norm_or_bias": list(group.norm_or_bias)},
                suggestion="Put BatchNorm/LayerNorm and bias parameters in a group with `'weight_decay': 0.0` "
                "(mindcv: `weight_decay_filter='norm_and_bias'`), or lower the decay.",
            ))
    return found


MAX_MOMENTUM = Option(
    "max_momentum", 0.99,
    "MSD117: a momentum above this (and below 1) is a warning: the heavy-ball step is 1/(1-m) times the learning "
    "rate, 100x at 0.99 (usual range 0.8 to 0.99); 1 and above is an error.",
)
MOMENTUM_OUT_OF_RANGE = Rule(
    "MSD117", "momentum-out-of-range", ERROR,
    "momentum of 1 or more (the updates never settle), or above the usual range",
    options=(MAX_MOMENTUM,),
)


@MOMENTUM_OUT_OF_RANGE.judge
def momentum_out_of_range(opt: OptimizerSignal, config: DoctorConfig) -> list[Finding]:
    """MSD117: a group's momentum of 1 or more (error: the updates never settle), or above ``max_momentum``
    (warning: each step is 1/(1-m) times the learning rate)."""
    found = []
    for group in opt.momentum_groups:
        m = group.value
        if not (m >= 1.0 or m > config.max_momentum):  # a NaN momentum is neither: not judged
            continue
        of = _group_of(group.label, group.parameters)
        evidence = {"momentum": m, "max_momentum": config.max_momentum, "parameters": list(group.parameters)}
        location = {"optimizer": opt.cls, "group": group.label or None}
        if m >= 1.0:
            grows = "never decays" if m == 1.0 else f"grows {m!r}x every step"
            found.append(MOMENTUM_OUT_OF_RANGE.finding(
                f"`{opt.cls}`{of} has momentum={m!r} (1 or more): the velocity {grows}, so every update adds all "
                f"past gradients{', amplified,' if m > 1.0 else ''} and the weights diverge.",
                location=location, evidence={**evidence, "limit": 1.0},
                suggestion="Use momentum=0.9 (MindSpore's usual value; 0.8 to 0.99 is the usual range): a momentum "
                "below 1 lets old gradients fade.",
            ))
        else:
            factor = 1.0 / (1.0 - m)
            found.append(MOMENTUM_OUT_OF_RANGE.finding(
                f"`{opt.cls}`{of} has momentum={m!r}, above `max_momentum` {config.max_momentum:g}: the "
                f"heavy-ball step is 1/(1-m) = {factor:.0f}x the learning rate ({factor / 10:.0f}x that of the usual "
                "0.9), so a learning rate tuned for 0.9 overshoots.",
                location=location, evidence={**evidence, "limit": config.max_momentum, "step_factor": factor},
                suggestion=f"Use momentum=0.9, or divide the learning rate by {factor / 10:.0f}; raise `max_momentum` "
                "if this value is deliberate.",
                severity=Severity.WARNING,
            ))
    return found
