"""MSD312 and MSD313: the evaluation pipeline's own operations, read before training.

Both judge the ``PipelineSignals`` the pipeline reader (``data/pipeline.py``) made of the MindSpore pipelines:

- MSD312: random augmentation left in the eval pipeline, found by the op's class and confirmed by a replay
  (the same eval input fed several times through that stage gives different outputs);
- MSD313: deterministic preprocessing that differs between train and eval (normalisation constants, the final
  spatial size, HWC2CHW, the dtype), each difference confirmed by what the first rows of both sets look like.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mindspore_doctor.data.signals import DataSignals, FeatureStats, PipelineOp, PipelineSignals
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Rule, WARNING
from mindspore_doctor.rules.data.common import _g

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


EVAL_RANDOM_AUGMENTATION = Rule(
    "MSD312", "eval-random-augmentation", WARNING,
    "random augmentation in the evaluation pipeline",
)


def _names(ops: list[PipelineOp]) -> str:
    names = list(dict.fromkeys(op.name + (f" (in {op.wrapper})" if op.wrapper else "") for op in ops))
    return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]


@EVAL_RANDOM_AUGMENTATION.judge
def eval_random_augmentation(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD312: a random op in a stage of the eval pipeline whose replay gives different outputs for one input.

    A MindSpore random op (``Random*``, AutoAugment, RandAugment, MixUpBatch, ...) whose replay shows one output
    every time is not reported (``RandomApply(prob=0)``, a flip with ``prob=0``); one that could not be replayed is
    reported on the op alone. A Python callable is reported only when its name says augmentation (random, mixup,
    augment, ...) and the replay shows it random; any other Python function is not judged.
    """
    pipe = s.pipelines.get("eval")
    if pipe is None:
        return []
    replays = {r.stage: r for r in pipe.replays}
    reported: list[tuple[str, list[PipelineOp], Any]] = []
    for stage in dict.fromkeys(op.stage for op in pipe.ops if op.random or op.random_name):
        ops = [op for op in pipe.ops if op.stage == stage and (op.random or op.random_name)]
        replay = replays.get(stage)
        if replay is not None and replay.reads:
            if replay.distinct > 1:
                reported.append((stage, ops, replay))
        elif any(op.random for op in ops):
            reported.append((stage, [op for op in ops if op.random], replay))
    if not reported:
        return []
    parts, confirmed = [], []
    for stage, ops, replay in reported:
        if replay is not None and replay.reads:
            seen = (f"the same eval input fed {replay.reads} times through it came out {replay.distinct} different "
                    f"ways")
            confirmed.append(stage)
        else:
            seen = f"not replayed: {replay.why}" if replay is not None else "not replayed"
        parts.append(f"{_names(ops)} in {stage}: {seen}")
    first_stage, first_ops, _ = reported[0]
    return [EVAL_RANDOM_AUGMENTATION.finding(
        f"The eval pipeline applies random augmentation: {'; '.join(parts)}. Every evaluation then scores a "
        "different, distorted version of the eval set: the metric is noisier and biased low, and comparisons "
        "between epochs or runs measure the augmentation's draw.",
        location={"dataset": "eval", "op": first_ops[0].name, "stage": first_stage,
                  "column": ",".join(first_ops[0].columns) or None},
        evidence={"ops": [{"op": op.name, "stage": stage, "wrapper": op.wrapper, "columns": list(op.columns),
                           "text": op.text} for stage, ops, _ in reported for op in ops],
                  "replays": [{"stage": r.stage, "reads": r.reads, "distinct": r.distinct, "why": r.why}
                              for r in pipe.replays],
                  "confirmed_stages": confirmed},
        suggestion="Keep random augmentation (random crops, flips, rotations, colour jitter, AutoAugment, "
        "mixup/cutmix) in the training pipeline only; evaluate on the deterministic version "
        "(e.g. Decode, Resize(256), CenterCrop(224), Normalize, HWC2CHW for ImageNet-style models).",
    )]


EVAL_PREPROCESSING_MISMATCH = Rule(
    "MSD313", "eval-preprocessing-mismatch", WARNING,
    "evaluation preprocessing differs from training (normalisation, final size, layout, dtype)",
)

AFFINE_RTOL = 0.02
"""MSD313: scale factors (a of a*x+b per channel) within 2 % of each other are the same normalisation (rounded
constants: 123.68 for 0.485 x 255 = 123.675)."""
AFFINE_ATOL = 0.02
"""MSD313: offsets (b) within this (output units, plus ``AFFINE_RTOL``) are the same."""


def _in_random_wrapper(op: PipelineOp) -> bool:
    return "Random" in op.wrapper or "UniformAugment" in op.wrapper


def _affine(chain: list[PipelineOp]) -> tuple[np.ndarray, np.ndarray, list[PipelineOp], list[str]]:
    """The per-channel a, b of the chain's rescale/normalise steps (x -> a*x + b), those steps, and the keys of
    the Python callables among them (unknown steps: named like augmentation, they are taken as not rescaling)."""
    a, b = np.ones(1), np.zeros(1)
    steps, python = [], []
    for op in chain:
        if _in_random_wrapper(op):
            continue
        if op.kind == "python" and not op.random_name:
            python.append(op.key)
            continue
        if op.kind != "affine":
            continue
        p = op.params
        if op.name == "Rescale":
            a, b = a * p["rescale"], b * p["rescale"] + p["shift"]
        elif op.name in ("Normalize", "NormalizePad"):
            mean, std = np.asarray(p["mean"], float), np.asarray(p["std"], float)
            a, b = a / std, (b - mean) / std
        elif op.name == "ToTensor":
            a, b = a / 255.0, b / 255.0
        steps.append(op)
    return a, b, steps, python


def _feature(signals: DataSignals, dataset: str, column: str) -> FeatureStats | None:
    ds = signals.train if dataset == "train" else signals.eval
    return next((f for f in ds.features if f.column == column), None) if ds is not None else None


def _refuted(t: FeatureStats | None, e: FeatureStats | None, r: np.ndarray, c: np.ndarray) -> bool:
    """The measured eval channels match the train channels where the two chains predict they would not (the eval
    data arrive already scaled, say): eval = r * train + c predicted on the same raw inputs."""
    if t is None or e is None or t.num_features != e.num_features or r.size not in (1, t.num_features):
        return False
    with np.errstate(all="ignore"):
        scale = np.where(t.std > 0, t.std, 1.0)
        predicted_shift = np.abs((r - 1) * t.mean + c) / scale
        predicted_ratio = np.abs(np.log(np.abs(r)))
        measured_shift = np.abs(e.mean - t.mean) / scale
        measured_ratio = np.abs(np.log(np.where((t.std > 0) & (e.std > 0), e.std / np.where(t.std > 0, t.std, 1), 1)))
    large = (predicted_shift >= 0.5) | (predicted_ratio >= np.log(1.5))
    small = (measured_shift < np.maximum(predicted_shift / 4, 0.05)) & (measured_ratio < np.maximum(predicted_ratio / 4, 0.05))
    return bool(np.all(large & small))


def _spatial(shape: tuple[int, ...] | None, layout: str) -> tuple[int, ...] | None:
    if not shape:
        return None
    if layout == "CHW" and len(shape) >= 3:
        return tuple(shape[-2:])
    if layout == "HWC" and len(shape) >= 3:
        return tuple(shape[-3:-1])
    if layout == "HW" and len(shape) >= 2:
        return tuple(shape[-2:])
    return None


def _chain_text(ops: list[PipelineOp], none: str) -> str:
    return " + ".join(op.text for op in ops) or none


def _values(a: np.ndarray) -> str:
    return "(" + ", ".join(_g(v) for v in np.ravel(a)) + ")" if np.size(a) > 1 else _g(np.ravel(a)[0])


def _mismatch(column: str, aspect: str, message: str, evidence: dict[str, Any], suggestion: str) -> Finding:
    return EVAL_PREPROCESSING_MISMATCH.finding(
        message, location={"dataset": "eval", "column": column, "aspect": aspect},
        evidence={"aspect": aspect, **evidence}, suggestion=suggestion,
    )


def _normalisation(s: DataSignals, column: str, train: list[PipelineOp], evals: list[PipelineOp]) -> list[Finding]:
    a_t, b_t, steps_t, py_t = _affine(train)
    a_e, b_e, steps_e, py_e = _affine(evals)
    if py_t != py_e or not (steps_t or steps_e):
        return []  # a different Python step may do the scaling: unknown
    try:
        same = np.allclose(a_t, a_e, rtol=AFFINE_RTOL, atol=0) and np.allclose(b_t, b_e, rtol=AFFINE_RTOL,
                                                                               atol=AFFINE_ATOL)
        r, c = np.broadcast_arrays(a_e / a_t, b_e - (a_e / a_t) * b_t)
    except ValueError:  # 3 channels against 4: a mismatch of its own, not of the constants
        return []
    if same or _refuted(_feature(s, "train", column), _feature(s, "eval", column), r, c):
        return []
    text_t, text_e = _chain_text(steps_t, "no rescaling or normalisation"), _chain_text(steps_e, "none")
    return [_mismatch(
        column, "normalisation",
        f"Eval `{column}` is normalised differently from train: train {text_t} vs eval {text_e}. A pixel value x "
        f"becomes {_values(a_t)}*x + {_values(b_t)} in train but {_values(a_e)}*x + {_values(b_e)} in eval, so "
        "the network is evaluated on inputs on another scale than it was trained on.",
        {"train_ops": [op.text for op in steps_t], "eval_ops": [op.text for op in steps_e],
         "train_scale": np.ravel(a_t).tolist(), "train_offset": np.ravel(b_t).tolist(),
         "eval_scale": np.ravel(a_e).tolist(), "eval_offset": np.ravel(b_e).tolist()},
        "Use the same Rescale/Normalize constants (the training set's statistics) in both pipelines, e.g. one "
        "shared list of deterministic transforms appended to both.",
    )]


def _layout(column: str, t: FeatureStats, e: FeatureStats, train: list[PipelineOp],
            evals: list[PipelineOp], shape_t: Any, shape_e: Any) -> list[Finding]:
    if {t.layout, e.layout} != {"CHW", "HWC"}:
        return []
    has_t = [op.text for op in train if op.name in ("HWC2CHW", "ToTensor")]
    has_e = [op.text for op in evals if op.name in ("HWC2CHW", "ToTensor")]
    where = ("train only" if has_t and not has_e else "eval only" if has_e and not has_t
             else "neither pipeline or both")
    return [_mismatch(
        column, "layout",
        f"Eval `{column}` arrives {e.layout} {tuple(shape_e)} but train `{column}` {t.layout} {tuple(shape_t)}: "
        f"HWC2CHW (or ToTensor) is in {where}.",
        {"train_layout": t.layout, "eval_layout": e.layout, "train_shape": list(shape_t), "eval_shape": list(shape_e),
         "train_ops": has_t, "eval_ops": has_e},
        "Apply HWC2CHW (or ToTensor) in both pipelines: the network reads the channel axis where it was trained.",
    )]


def _size(column: str, t: FeatureStats, e: FeatureStats, train: list[PipelineOp], evals: list[PipelineOp],
          shape_t: Any, shape_e: Any) -> list[Finding]:
    size_t = [op for op in train if op.kind == "size"]
    size_e = [op for op in evals if op.kind == "size"]
    hw_t, hw_e = _spatial(shape_t, t.layout), _spatial(shape_e, e.layout)
    if not (size_t and size_e) or hw_t is None or hw_e is None or hw_t == hw_e:
        return []  # an eval set at its native size (no resize or crop) is not judged: fully convolutional eval
    return [_mismatch(
        column, "size",
        f"Eval `{column}` ends at {hw_e[0]}x{hw_e[1]} ({size_e[-1].text}) but train `{column}` at "
        f"{hw_t[0]}x{hw_t[1]} ({size_t[-1].text}): the network sees objects at another scale than in training.",
        {"train_size": list(hw_t), "eval_size": list(hw_e), "train_op": size_t[-1].text, "eval_op": size_e[-1].text},
        "End both pipelines at the same size: for a train RandomResizedCrop(224), evaluate with Resize(256) then "
        "CenterCrop(224). Testing at a higher resolution on purpose (FixRes) is a choice: ignore MSD313 then.",
    )]


def _dtype(column: str, p_t: PipelineSignals, p_e: PipelineSignals, train: list[PipelineOp],
           evals: list[PipelineOp]) -> list[Finding]:
    d_t, d_e = p_t.dtypes.get(column), p_e.dtypes.get(column)
    casts = [op for op in train + evals if op.kind in ("cast", "affine")]
    if d_t is None or d_e is None or d_t == d_e or not casts:
        return []
    text_t = _chain_text([op for op in train if op.kind == "cast"], "no cast")
    text_e = _chain_text([op for op in evals if op.kind == "cast"], "no cast")
    return [_mismatch(
        column, "dtype",
        f"Eval `{column}` arrives as {d_e} but train `{column}` as {d_t} (train {text_t}, eval {text_e}).",
        {"train_dtype": d_t, "eval_dtype": d_e},
        "Cast to the same dtype in both pipelines (TypeCast/ToType after the same rescaling).",
    )]


@EVAL_PREPROCESSING_MISMATCH.judge
def eval_preprocessing_mismatch(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD313: per input column present in both MindSpore pipelines, the deterministic preprocessing compared:

    - normalisation: the per-channel a*x+b of the Rescale/Normalize/ToTensor steps (constants written on the
      0-255 or the 0-1 scale compare equal), unless a Python step differs (unknown) or the measured eval channels
      match train where the two chains say they would not (the eval data arrive already scaled);
    - the final spatial size of the first rows, when both pipelines resize or crop (an eval set at its native size
      is not judged); the standard Resize(256) + CenterCrop(224) against RandomResizedCrop(224) is the same size;
    - the layout (CHW in one, HWC in the other: HWC2CHW in one pipeline only);
    - the dtype the first rows arrive in, when a cast or normalisation is in either pipeline.
    """
    p_t, p_e = s.pipelines.get("train"), s.pipelines.get("eval")
    if p_t is None or p_e is None or s.eval is None:
        return []
    found: list[Finding] = []
    for t in s.train.features:
        column = t.column
        e = _feature(s, "eval", column)
        train, evals = p_t.chain(column), p_e.chain(column)
        if e is None or not (train or evals):
            continue
        found += _normalisation(s, column, train, evals)
        shape_t, shape_e = p_t.shapes.get(column), p_e.shapes.get(column)
        if t.kind == "image" and e.kind == "image" and not t.grid and not e.grid and shape_t and shape_e:
            layout = _layout(column, t, e, train, evals, shape_t, shape_e)
            found += layout or _size(column, t, e, train, evals, shape_t, shape_e)
        found += _dtype(column, p_t, p_e, train, evals)
    return found
