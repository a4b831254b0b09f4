"""MSD209, MSD115: weights that do not move: frozen (no gradient reaches them), or redundant (a bias/beta whose
per-channel shift a following normalization removes, so its gradient is rounding noise while its cell learns)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import INFO, Option, Rule, WARNING
from mindspore_doctor.rules.training.common import (PERSISTENT_PROBES, finite, param_location, persistent,
                                                    persistent_count)
from mindspore_doctor.signals import StepSignals, TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


_SHIFT_LEAVES = ("bias", "beta")
"""Per-channel shift parameters: what a following normalization (batch statistics) subtracts again."""


def _cancelled_by_normalization(probes: list[StepSignals], name: str, config: DoctorConfig) -> dict | None:
    """Evidence when ``name`` is a bias/beta whose gradient is rounding noise while its cell's weight/gamma learns.

    A per-channel constant added before a normalization with batch statistics is removed by it, whatever lies
    between them that keeps it per-channel constant: a 1x1 conv, a residual add, a concatenation or channel
    shuffle, pooling (the linear-bottleneck projection BatchNorms of MobileNetV2/V3 and ShuffleNetV2, a conv bias
    before BatchNorm). Its gradient is then ~0 on every probe (below ``redundant_grad_ratio`` of its sibling's):
    redundant, not frozen. A frozen or cut-off cell gets no gradient anywhere, the sibling included.
    """
    cell, _, leaf = name.rpartition(".")
    if leaf not in _SHIFT_LEAVES:
        return None
    siblings = [n for n in probes[-1].grad_rms if n != name and n.rpartition(".")[0] == cell]
    if not siblings:
        return None
    ratios = []
    for p in probes:
        own = p.grad_rms.get(name)
        sibling = max(siblings, key=lambda n: p.grad_rms.get(n, 0.0))
        other = p.grad_rms.get(sibling, 0.0)
        if not (finite(own) and finite(other) and other > 0 and own < config.redundant_grad_ratio * other):
            return None
        ratios.append((own / other, own, sibling, other))
    ratio, own, sibling, other = max(ratios)
    return {"grad_rms": own, "sibling": sibling, "sibling_grad_rms": other, "grad_ratio": ratio,
            "threshold": config.redundant_grad_ratio}


REDUNDANT_GRAD_RATIO = Option(
    "redundant_grad_ratio", 1e-5,
    "MSD115/MSD209: a bias/beta whose gradient RMS stays below this fraction of its cell's weight/gamma gradient "
    "(which learns) is cancelled by a following normalization: redundant (info), not frozen. Measured: 3e-7 on the "
    "projection BatchNorm betas of MobileNetV3; a learning beta is within 10x of its gamma.",
)
REDUNDANT_PARAMETER = Rule(
    "MSD115", "redundant-parameter", INFO,
    "bias/beta whose effect a following normalization removes",
    options=(REDUNDANT_GRAD_RATIO, PERSISTENT_PROBES),
    probe="optimizer", probes_needed=persistent_count,
)


@REDUNDANT_PARAMETER.judge
def redundant_parameter(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    """MSD115 (dynamic part): a bias/beta that a following normalization cancels: info, once per parameter."""
    probes = persistent(history, config, "grad_rms")
    found = []
    for name in history.parameter_order if probes else ():
        evidence = _cancelled_by_normalization(probes, name, config)
        if evidence is None:
            continue
        found.append(
            REDUNDANT_PARAMETER.finding(
                f"`{name}` is redundant: its gradient is {evidence['grad_ratio']:.2g} of `{evidence['sibling']}`'s "
                f"(RMS {evidence['grad_rms']:.3g} vs {evidence['sibling_grad_rms']:.3g}) on the last {len(probes)} "
                "probed steps: a normalization further on removes the per-channel shift it adds, so it cannot "
                "learn, and need not.",
                location=param_location(name),
                step=probes[-1].step,
                evidence=evidence,
                suggestion="Nothing is broken. To drop the dead parameter, build the layer without it "
                "(has_bias=False before a BatchNorm); its near-zero updates are not a frozen layer (MSD209).",
            )
        )
    return found


FROZEN_UPDATE_ATOL = Option(
    "frozen_update_atol", 1e-8,
    "MSD209: |dw| <= atol + rtol*|w| counts as not updated.",
)
FROZEN_UPDATE_RTOL = Option(
    "frozen_update_rtol", 1e-7,
    "MSD209: about one float32 ulp of the weight (the catalog's 1e-5 also caught a tiny but non-zero learning rate, "
    "which is MSD210's case).",
)
WEIGHTS_NOT_UPDATING = Rule(
    "MSD209", "weights-not-updating", WARNING,
    "weight unchanged across steps",
    options=(FROZEN_UPDATE_ATOL, FROZEN_UPDATE_RTOL, REDUNDANT_GRAD_RATIO, PERSISTENT_PROBES),
    probe="optimizer", probes_needed=persistent_count, transient=True,
)


@WEIGHTS_NOT_UPDATING.judge
def weights_not_updating(history: TrainingHistory, config: DoctorConfig) -> list[Finding]:
    probes = persistent(history, config, "update_abs")
    found = []
    for name in history.parameter_order if probes else ():
        if _cancelled_by_normalization(probes, name, config) is not None:
            continue  # MSD115: redundant, not frozen
        rows = [(p.update_abs.get(name), p.weight_mean_abs.get(name, 0.0)) for p in probes]
        if all(d is not None and d <= config.frozen_update_atol + config.frozen_update_rtol * w for d, w in rows):
            found.append(
                WEIGHTS_NOT_UPDATING.finding(
                    f"`{name}` is not updating: max |dw| = {rows[-1][0]:.3g} on the last {len(rows)} probed steps "
                    f"(mean |w| = {rows[-1][1]:.3g}).",
                    location=param_location(name),
                    step=probes[-1].step,
                    evidence={"max_abs_update": rows[-1][0], "weight_mean_abs": rows[-1][1]},
                    suggestion="Its gradient is zero: check the cell is used on the path to the loss, that no "
                    "stop_gradient or integer cast cuts it, and that its learning rate is not zero.",
                )
            )
    return found
