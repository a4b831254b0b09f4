"""Rules over parameters, initialisation and the optimizer (MSD101-103, 108, 109, 111, 112).

Pure functions: they read the plain signals of ``static/signals.py`` (names, paths, shapes, numbers)
that ``static/parameters.py`` measures, plus ``DoctorConfig``; they never touch
MindSpore, so each one is unit-testable with hand-built signals.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import fnmatch
import math
import re

from mindspore_doctor.findings import Finding, Severity
from mindspore_doctor.static.signals import (
    BUFFER,
    EMBEDDING,
    INIT_CHECKED,
    NORM,
    RELU_LIKE,
    SATURATING,
    TRAINABLE_LOOKING,
    WEIGHT,
    LossScaleSignal,
    OptimizerSignal,
    ParamSignal,
)
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

# --- definitions: the options these rules read, and the rules ----------------------------------------

ALLOW_SHARED = Option(
    "allow_shared", (),
    "Parameter names (or cell-path prefixes) whose sharing is intentional (MSD101).",
    type="tuple[str, ...]",
)
INIT_STD_FACTOR = Option(
    "init_std_factor", 10.0,
    "MSD109: init std off from the He/Glorot recommendation by more than this factor.",
)
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
MAX_FIXED_LOSS_SCALE = Option(
    "max_fixed_loss_scale", 65504.0,
    "MSD112: a fixed loss scale above this (float16's largest value) overflows a float16 network.",
)

SHARED_PARAMETER = Rule(
    "MSD101", "shared-parameter", WARNING,
    "one Parameter reachable under several cell paths",
    options=(ALLOW_SHARED,),
)
FROZEN_PARAMETER = Rule(
    "MSD102", "frozen-parameter", WARNING,
    "weight frozen or not held by the optimizer",
)
FOREIGN_OPTIMIZER_PARAMETER = Rule(
    "MSD103", "foreign-optimizer-parameter", ERROR,
    "optimizer holds parameters not in the network",
)
ZERO_INITIALIZED_WEIGHT = Rule(
    "MSD108", "zero-initialized-weight", ERROR,
    "weight all zeros or constant at init",
)
POOR_INITIALIZATION = Rule(
    "MSD109", "poor-initialization", WARNING,
    "weight init scale far from He/Glorot",
    options=(INIT_STD_FACTOR,),
)
LEARNING_RATE_OUT_OF_RANGE = Rule(
    "MSD111", "learning-rate-out-of-range", WARNING,
    "learning rate outside a sane range",
    options=(SGD_LR_RANGE, ADAM_LR_RANGE),
)
LOSS_SCALE_MISCONFIGURED = Rule(
    "MSD112", "loss-scale-misconfigured", WARNING,
    "loss scale inconsistent with mixed precision",
    options=(MAX_FIXED_LOSS_SCALE,),
)
WEIGHT_DECAY_OUT_OF_RANGE = Rule(
    "MSD116", "weight-decay-out-of-range", WARNING,
    "weight decay far outside the usual range",
    options=(SGD_WEIGHT_DECAY_MAX, ADAM_WEIGHT_DECAY_MAX, WEIGHT_DECAY_FACTOR),
)

RULES = (SHARED_PARAMETER, FROZEN_PARAMETER, FOREIGN_OPTIMIZER_PARAMETER, ZERO_INITIALIZED_WEIGHT, POOR_INITIALIZATION, LEARNING_RATE_OUT_OF_RANGE, LOSS_SCALE_MISCONFIGURED, WEIGHT_DECAY_OUT_OF_RANGE)

FP16_MAX = 65504.0


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


_ENCODER_WORDS = frozenset({"enc", "encoder", "encoders"})
_DECODER_WORDS = frozenset({"dec", "decoder", "decoders"})


def _words(path: str) -> set[str]:
    return set(re.split(r"[._\d]+", path.lower()))


def _mirrored(cells: tuple[str, ...]) -> bool:
    """The holders sit on the two sides of an encoder/decoder pair (``encoder.fc2`` and ``decoder.fc1``): the
    mirror tying of tied autoencoders and of sequence-to-sequence models."""
    return any(_words(a) & _ENCODER_WORDS and _words(b) & _DECODER_WORDS for a in cells for b in cells)


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _sharing(p: ParamSignal) -> tuple[str, str] | None:
    """How a Parameter used at two or more call sites of a forward pass is shared: (kind, why), None when it is
    used once (an alias: a cell registered under two names, called once).

    Kinds, by what the code shows of the intent:

    - "tied" (info): distinct cells reuse one matrix in a recognisable tying pattern: an embedding table used by
      another layer (input/output tying, shared source/target vocabularies), cells of different kinds or settings
      (a transposed reuse, one kernel at several dilations), the two sides of an encoder/decoder mirror;
    - "copied" (warning): distinct cells of one kind with equal settings, two or more of them running: separate
      copies of a layer that compute with one matrix (``self.block3.weight = self.block2.weight`` where a copy of
      the values was meant);
    - "design" (info): one cell handed to several distinct cells, or bound to several names in one statement;
    - "reused" (info): one cell, registered once, called at several sites (a shared block applied at several
      places, a Siamese branch; one call in a loop, ALBERT-style, is one site);
    - "repeated" (warning): one cell registered twice by the same parent (``[block] * 3``, ``self.fc2 = self.fc1``),
      or call sites that could not be counted.
    """
    uses = p.uses if p.uses is not None else len(p.paths)
    if uses < 2:
        return None
    if len(p.owner_types) > 1:
        embedding = next((t for t in p.owner_types if "Embedding" in t), None)
        if embedding is not None:
            return "tied", f"an {embedding} table reused by another layer"
        if _mirrored(p.owner_cells):
            return "tied", "the encoder/decoder mirror"
        if not p.owners_alike:
            return "tied", "one matrix reused by layers of different kinds or settings"
        if len(p.owner_cells) > 1 and (p.owners_running is None or p.owners_running > 1):
            return "copied", "separate layers of one kind and settings"
    if p.repeated or p.uses is None:
        return "repeated", "one cell registered more than once"
    if len(p.paths) > 1:
        return "design", "one cell handed to several cells or bound to several names in one statement"
    return "reused", "one cell called at several sites"


def _sharing_message(p: ParamSignal, kind: str, why: str, uses: int) -> str:
    listed = ", ".join(f"`{x}`" if x else "<root>" for x in p.paths)
    if kind == "tied":
        return (f"Parameter `{p.name}` ({_shape(p.shape)}) is tied weights, held by "
                f"{' and '.join(sorted(set(p.owner_types)))} ({listed}): {why}. Intended weight tying; every use "
                "updates it.")
    if kind == "copied":
        cells, count = _listing([_path(c) for c in p.owner_cells]), len(p.owner_cells)
        running = ("both" if count == 2 else f"all {count}") if p.owners_running in (None, count) \
            else f"{p.owners_running} of them"
        return (f"{cells}, {count} separate {p.owner_types[0]} layers with the same settings, hold one "
                f"Parameter `{p.name}` ({_shape(p.shape)}), and {running} run in the forward pass: they compute with "
                f"one matrix and it gets the sum of their gradients. Copy meant, assign written? (`{_assignment(p)}` "
                "shares the object; it does not copy the values.)")
    if kind == "design":
        return (f"Parameter `{p.name}` is shared by design: its cell is handed to several cells (or bound to "
                f"several names in one statement) and runs {uses} times per forward pass ({listed}); every "
                "use updates the same weights.")
    if kind == "reused":
        return (f"Parameter `{p.name}` belongs to {_path(p.cell)}, one cell called at {uses} sites of the forward "
                "pass (a shared block applied repeatedly, a Siamese branch); every call updates the same weights.")
    return (f"Parameter `{p.name}` is one object used at {uses} call sites of the forward pass ({listed}). "
            "Every use updates the same weights.")


def _attribute(cell: str, key: str) -> str:
    """``layers.1`` + ``weight`` -> ``self.layers[1].weight``: the parameter as code in the root cell reaches it."""
    parts = [f"[{part}]" if part.isdigit() else f".{part}" for part in [*cell.split("."), key] if part]
    return "self" + "".join(parts)


def _assignment(p: ParamSignal) -> str:
    """The statement that shares a Parameter between two cells, as the user wrote it."""
    first, second = p.owner_cells[0], p.owner_cells[1]
    return f"{_attribute(second, p.key)} = {_attribute(first, p.key)}"


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _sharing_fix(p: ParamSignal, kind: str) -> str:
    declare = f"if it is intended, declare it with `allow_shared=[\"{p.name}\"]`."
    if kind == "copied":
        first, second = p.owner_cells[0], p.owner_cells[1]
        return (f"To start `{second}` from `{first}`'s values, copy them: "
                f"`{_attribute(second, p.key)}.set_data(ms.Tensor({_attribute(first, p.key)}.asnumpy()))`; to share "
                f"a layer on purpose, call one cell at every site (ALBERT-style) or {declare}")
    return ("If the sharing is unintended, build a separate cell for each use (a new instance, not the same object "
            f"or `[cell] * n`); {declare}")


def shared_parameter(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD101: one Parameter used at two or more call sites of a forward pass.

    Decided by what runs: a cell registered under two names but called once is an alias. Recognisable tying
    (embedding/output, transposed reuse, encoder/decoder mirror), one cell deliberately handed to several cells
    and one cell called at several sites are reported at info; one object registered twice by a parent, and
    separate same-kind, same-settings layers holding one matrix (an assignment where a copy was meant) warn.
    """
    found = []
    for p in params:
        sharing = _sharing(p)
        if sharing is None or _allowed(p.name, p.paths, config.allow_shared):
            continue
        kind, why = sharing
        uses = p.uses if p.uses is not None else len(p.paths)
        found.append(
            SHARED_PARAMETER.finding(
                _sharing_message(p, kind, why, uses),
                location=p.location,
                evidence={"paths": list(p.paths), "shape": list(p.shape), "uses": uses, "sharing": kind,
                          "why": why, "owners": list(p.owner_types), "cells": list(p.owner_cells)},
                suggestion=_sharing_fix(p, kind),
                severity=None if kind in ("repeated", "copied") else Severity.INFO,
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


def _shown(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


_FREEZE_FIX = ("Unfreeze them (`param.requires_grad = True`) and build the optimizer from `net.trainable_params()`; "
               "to fine-tune, load the pretrained checkpoint (`ms.load_param_into_net`) before freezing.")


_HELD_FROZEN = ("frozen (requires_grad=False) yet held by the optimizer",
                "its weight decay still changes {them}: neither trained nor fixed", Severity.ERROR,
                "Build the optimizer from the trainable parameters only: "
                "`filter(lambda p: p.requires_grad, net.get_parameters())` or `net.trainable_params()`.")


def _judge_frozen(members: list[ParamSignal], whole: bool) -> tuple[str, str, Severity, str]:
    """(what, consequence, severity, fix) for a group of frozen parameters.

    Freezing random weights never helps (error); freezing loaded weights and leaving them out of the optimizer
    is transfer learning (info); a frozen parameter the optimizer still holds is inconsistent (error).
    """
    if any(p.in_optimizer for p in members):
        return _HELD_FROZEN
    states = {p.at_init for p in members}
    if False in states:
        return ("frozen (requires_grad=False) with loaded, trained values and left out of the optimizer",
                "deliberate transfer learning: fixed while the rest trains", Severity.INFO,
                "Nothing to fix if this is fine-tuning; suppress MSD102 for this cell to hide it.")
    if True in states:
        return ("frozen (requires_grad=False) while still at their random initialisation",
                "{they} will never learn, and pass random features on", Severity.ERROR, _FREEZE_FIX)
    return ("frozen (requires_grad=False)", "{they} will not learn", Severity.ERROR if whole else Severity.WARNING,
            "Set `param.requires_grad = True` (and pass `net.trainable_params()` to the optimizer) unless freezing "
            "is intended; if it is, suppress MSD102 for this cell.")


def _judge_fixed(members: list[ParamSignal], whole: bool) -> tuple[str, str, Severity, str]:
    """A frozen fixed layer (a deterministic kernel) is a constant by design (info), unless the optimizer holds it."""
    if any(p.in_optimizer for p in members):
        return _HELD_FROZEN
    return ("frozen (requires_grad=False) with fixed values on a regular grid (`arange`, a hand-written kernel), "
            "neither a random init nor trained weights", "a constant layer by design", Severity.INFO,
            "Nothing to fix if the layer is meant to be constant (mindyolo's DFL projection); suppress MSD102 "
            "for this cell to hide it.")


def _frozen_findings(params: list[ParamSignal], is_frozen, judge) -> list[Finding]:
    found = []
    for cell, members, whole in _frozen_groups(params, is_frozen):
        what, consequence, severity, fix = judge(members, whole)
        names = [p.name for p in members]
        plural = len(names) > 1
        if whole:
            text = f"All {len(names)} weight{'s' if plural else ''} of {_path(cell)} {'are' if plural else 'is'} {what} ({_shown(names)})"
        else:
            text = f"{_shown(names)} in {_path(cell)} {'are' if plural else 'is'} {what}"
        consequence = consequence.format(they="they" if plural else "it", them="them" if plural else "it")
        location = {**members[0].location, "cell": cell} if not plural else {"cell": cell, "parameter": None}
        found.append(
            FROZEN_PARAMETER.finding(
                f"{text}; {consequence}.",
                location=location,
                evidence={"parameters": names, "count": len(names), "whole_cell": whole,
                          "at_init": [p.at_init for p in members], "in_optimizer": [p.in_optimizer for p in members]},
                suggestion=fix,
                severity=severity,
            )
        )
    return found


def frozen_parameter(params: list[ParamSignal], config: DoctorConfig) -> list[Finding]:
    """MSD102: trainable-looking weights with requires_grad=False, or trainable ones the optimizer does not hold.

    Frozen fixed layers (a deterministic kernel) are judged apart, so they neither hide nor join the frozen
    random weights around them.
    """
    looking = [p for p in params if p.role in TRAINABLE_LOOKING]
    found = _frozen_findings([p for p in looking if not p.fixed], lambda p: not p.requires_grad, _judge_frozen)
    found += _frozen_findings(looking, lambda p: p.fixed, _judge_fixed)
    trainable = [p for p in params if p.role != BUFFER and p.requires_grad and p.in_optimizer is not None]
    found += _frozen_findings(
        trainable,
        lambda p: not p.in_optimizer,
        lambda members, whole: (
            "trainable but not held by the optimizer",
            "{they} will not learn: freezing by leaving {them} out of the optimizer is inconsistent with "
            "requires_grad=True", Severity.ERROR,
            "Build the optimizer from `net.trainable_params()` of the network you train (after any freezing or "
            "wrapping), so every trainable parameter is updated; to freeze on purpose set `requires_grad = False`."),
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
        FOREIGN_OPTIMIZER_PARAMETER.finding(
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
            ZERO_INITIALIZED_WEIGHT.finding(
                f"Weight `{p.name}` of {p.cell_type} {_path(p.cell)} is {what} at init ({p.size} elements): "
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
                f"Weight `{p.name}` of {p.cell_type} {_path(p.cell)}{after} has init std {p.std:.3g}, "
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


def _group_of(label: str, parameters: tuple[str, ...]) -> str:
    """`` (group 1: `fc.weight` and 3 more)`` for one of several groups, else nothing."""
    if not label:
        return ""
    more = f" and {len(parameters) - 1} more" if len(parameters) > 1 else ""
    return f" ({label}: `{parameters[0]}`{more})" if parameters else f" ({label})"


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


def loss_scale_misconfigured(ls: LossScaleSignal, config: DoctorConfig) -> list[Finding]:
    """MSD112: loss scaling that contradicts the precision or the train cell around it."""
    found = []
    opt_scale = ls.optimizer_loss_scale

    def add(setting: str, message: str, suggestion: str, severity: Severity | None = None, **evidence) -> None:
        """``setting`` names the misconfigured attribute; it keeps the findings apart in the report."""
        found.append(LOSS_SCALE_MISCONFIGURED.finding(message, location={"cell": "", "setting": setting}, evidence=evidence,
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
