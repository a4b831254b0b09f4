"""Initialisation: weights all equal at init (MSD108), an init scale far from He/Glorot or an embedding table drawn
far too large (MSD109).

Pure functions of the plain ``ParamSignal`` of ``static/parameters.py`` (init statistics measured on the host) and
``DoctorConfig``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING
from mindspore_doctor.rules.parameters.wording import cell_text
from mindspore_doctor.static.signals import EMBEDDING, INIT_CHECKED, NORM, RELU_LIKE, SATURATING, WEIGHT, ParamSignal

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


ZERO_INITIALIZED_WEIGHT = Rule(
    "MSD108", "zero-initialized-weight", ERROR,
    "weight all zeros or constant at init",
)


@ZERO_INITIALIZED_WEIGHT.judge
def zero_initialized_weight(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD108: a weight whose elements are all equal at init (no symmetry breaking)."""
    found = []
    for p in params:
        if p.role not in INIT_CHECKED or not p.all_equal or p.size <= 1:
            continue
        value = p.constant if p.constant is not None else float("nan")
        what = "all zeros" if value == 0 else f"constant ({value:g} everywhere)"
        found.append(
            ZERO_INITIALIZED_WEIGHT.finding(
                f"Weight `{p.name}` of {p.cell_type} {cell_text(p.cell)} is {what} at init ({p.size} elements): "
                "every unit computes the same thing and gets the same gradient, so they never differ.",
                location=p.location,
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


def _holder(p: ParamSignal) -> str:
    return f"{p.cell_type} `{p.cell}`" if p.cell else f"the root cell ({p.cell_type})"


EMBEDDING_STD_USUAL_MAX = 1.0
"""Largest init std in common use for embedding tables: Normal(0, 1), PyTorch's and ``mint.nn.Embedding``'s
default. The others are smaller: MindSpore ``nn.Embedding``'s Normal(0.01), BERT's TruncatedNormal(0.02),
Normal(1/sqrt(dim)), Uniform(+-0.1), word2vec's Uniform(+-0.5/dim). MSD109 warns above ``init_std_factor`` times it."""


def _embedding_scale(p: ParamSignal, factor: float) -> Finding | None:
    """MSD109 on an embedding table (``nn.Embedding``, ``mint.nn.Embedding`` or a raw table read through a
    gather/lookup/index in construct): only a too *large* init is judged. Every token vector is then
    ~std*sqrt(dim) long: it swamps the positional encodings and biases added to it, saturates what follows,
    and updates of learning-rate size barely move it, so the rows stay random. A small init is not harmful
    the same way: the table is the network's input, the gradient reaching a row does not depend on its scale,
    and small inits are common by design (word2vec's +-0.5/dim). A table whose values are not shaped like an
    initializer's draw (loaded or trained rows) is not judged."""
    limit = EMBEDDING_STD_USUAL_MAX * factor
    if not p.std or p.std <= limit or not p.fresh_draw:
        return None
    rows, dim = (p.shape[0], p.shape[-1]) if len(p.shape) >= 2 else (p.size, 1)
    ratio = p.std / EMBEDDING_STD_USUAL_MAX
    return POOR_INITIALIZATION.finding(
        f"Embedding table `{p.name}` of {_holder(p)} ({rows} rows x {dim}) has init std "
        f"{p.std:.3g}, {ratio:.0f}x the largest usual embedding init (std {EMBEDDING_STD_USUAL_MAX:g}, "
        f"Normal(0, 1)): every token vector is ~{p.std * math.sqrt(dim):.3g} long, so it swamps what is added to "
        "it (positions, biases), saturates what follows, and updates of learning-rate size barely move it.",
        location=p.location,
        evidence={"std": p.std, "usual_max": EMBEDDING_STD_USUAL_MAX, "ratio": ratio, "factor": factor,
                  "rows": rows, "dim": dim, "role": p.role},
        suggestion="Drop the explicit table init (nn.Embedding's default is Normal(0.01)) or use "
        f"`Normal(1 / sqrt(dim))` = Normal({1 / math.sqrt(dim):.3g}) or 'normal'; to scale embeddings on purpose, "
        "multiply in construct (`* sqrt(d_model)`) where the gradient sees it.",
    )


INIT_STD_FACTOR = Option(
    "init_std_factor", 10.0,
    "MSD109: init std off from the He/Glorot recommendation by more than this factor.",
)
POOR_INITIALIZATION = Rule(
    "MSD109", "poor-initialization", WARNING,
    "weight init scale far from He/Glorot",
    options=(INIT_STD_FACTOR,),
)


@POOR_INITIALIZATION.judge
def poor_initialization(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD109: init std more than ``init_std_factor`` away from every fitting recommendation; an embedding
    table's more than ``init_std_factor`` above the largest usual embedding init (``_embedding_scale``).

    A small init of the output layer (the last weight defined) is a deliberate pattern (residual
    forecasters, zero-ish heads): nothing follows it for the signal to vanish through, so only a too
    large init is reported there. A layer whose output is normalized further on (through linear or
    ReLU-like ops) does not pass its init scale on: neither direction is reported. A too small init is
    also harmless when a smooth activation sits before that normalization, when a softmax follows, or
    when the output is added to a skip connection that carries the signal past it. A frozen parameter
    (requires_grad=False) is not judged: its values are loaded, or a constant by design, or random ones that
    MSD102 already reports; no optimizer starts from them.
    """
    factor = config.init_std_factor
    found = []
    weights = [p for p in params if p.role == WEIGHT and p.requires_grad]
    output_layer = weights[-1].name if weights else None
    for p in weights:
        if not p.fan_in or not p.fan_out or not p.std or p.all_equal:
            continue
        recommended = _recommended_stds(p)
        low, high = min(recommended.values()), max(recommended.values())
        too_small = p.std < low / factor and p.name != output_layer and p.scale_reset is None
        too_large = p.std > high * factor and p.scale_reset != NORM
        if not (too_small or too_large):
            continue
        scheme, target = min(recommended.items(), key=lambda kv: abs(math.log(p.std / kv[1])))
        ratio = p.std / target
        direction = "too large: activations and gradients explode" if ratio > 1 else "too small: signals vanish"
        after = f" followed by {p.activation}" if p.activation else ""
        found.append(
            POOR_INITIALIZATION.finding(
                f"Weight `{p.name}` of {p.cell_type} {cell_text(p.cell)}{after} has init std {p.std:.3g}, "
                f"{max(ratio, 1 / ratio):.0f}x {'above' if ratio > 1 else 'below'} {scheme} ({target:.3g} for "
                f"fan_in={p.fan_in}, fan_out={p.fan_out}): {direction} with depth.",
                location=p.location,
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
    tables = (_embedding_scale(p, factor) for p in params if p.role == EMBEDDING and p.requires_grad)
    return found + [finding for finding in tables if finding is not None]
