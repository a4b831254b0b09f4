"""MSD301 and MSD310: the values themselves, NaN/Inf anywhere, or a feature that never changes.

An integer column of ids is judged as ids: a fixed id at a fixed position is by design (a marker, padding) unless
it is the unknown-word id a broken tokeniser puts there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mindspore_doctor.data.signals import DataSignals, FeatureStats
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Rule, WARNING
from mindspore_doctor.rules.data.common import _datasets, _g, _where

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


NONFINITE_INPUT = Rule(
    "MSD301", "nonfinite-input", ERROR,
    "NaN/Inf in inputs or labels",
)


@NONFINITE_INPUT.judge
def nonfinite_input(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD301: NaN/Inf anywhere in a sampled input or label column."""
    found = []
    for ds in _datasets(s):
        for f in ds.features:
            bad = np.flatnonzero(f.nonfinite)
            if bad.size:
                total = int(f.nonfinite.sum())
                found.append(NONFINITE_INPUT.finding(
                    f"{ds.name} input {f.feature_label(int(bad[0]))} holds {total} NaN/Inf values in "
                    f"{ds.samples} sampled samples ({bad.size} {f.feature_name}(s) affected).",
                    location=_where(ds, f.column),
                    evidence={"nonfinite_values": total, "features": bad[:20].tolist(), "samples": ds.samples},
                    suggestion="Find where the NaN/Inf come from (missing values, log/division in a .map()) and "
                    "impute or drop them before training; one NaN input turns the loss NaN.",
                ))
        if ds.label is not None and ds.label.nonfinite:
            found.append(NONFINITE_INPUT.finding(
                f"{ds.name} label `{ds.label.column}` holds {ds.label.nonfinite} NaN/Inf values in {ds.samples} sampled samples.",
                location=_where(ds, ds.label.column),
                evidence={"nonfinite_values": ds.label.nonfinite, "samples": ds.samples},
                suggestion="Drop or fix the samples with non-finite targets.",
            ))
    return found


ONE_VOCABULARY_OVERLAP = 0.5
"""An integer vector is a sequence of ids from one vocabulary when its positions each span at least this
fraction of the range all its positions span together (tokens: ~0.9); an integer table's columns (an age, a
count, an income) or a CTR row's per-field id ranges each span a small part of it."""


def _varying(f: FeatureStats) -> np.ndarray:
    return (f.max > f.min) | (f.nonfinite > 0)


def _one_vocabulary(f: FeatureStats) -> bool:
    varying = np.flatnonzero(_varying(f))
    if varying.size < 2:
        return False
    span = float(f.max[varying].max() - f.min[varying].min())
    return span > 0 and float(np.median(f.max[varying] - f.min[varying])) / span >= ONE_VOCABULARY_OVERLAP


def _id_value_pairs(features: list[FeatureStats]) -> list[tuple[FeatureStats, FeatureStats]]:
    """(ids, values) column pairs of a CTR-style input: same width, and at some position one of the two is fixed
    by design while the other varies (a numeric field keeps its id, a one-hot field its value 1)."""
    pairs = []
    for ids in features:
        if ids.kind != "tokens" or not ids.rows_are_values:
            continue
        for values in features:
            if values is ids or values.kind != "tabular" or values.num_features != ids.num_features:
                continue
            if (_varying(ids) != _varying(values)).any():
                pairs.append((ids, values))
    return pairs


def _id_evidence(f: FeatureStats, s: DataSignals, paired: set[str]) -> str:
    """Why an integer column holds ids (looked up, not measured), or "" when nothing says so."""
    if f.kind != "tokens" or not f.rows_are_values or f.layout == "":
        return ""
    if f.column in paired:
        return "field ids paired with a value column"
    if s.network.embeddings:
        return "ids the network's embedding looks up"
    return "ids from one vocabulary" if _one_vocabulary(f) else ""


def _position_text(f: FeatureStats, j: int) -> str:
    if j == 0:
        return f"Every sequence of `{f.column}` starts with"
    if j == f.num_features - 1:
        return f"Every sequence of `{f.column}` ends with"
    return f"Every sequence of `{f.column}` has, at position {j},"


def _suspicious_constant_id(f: FeatureStats, constant: np.ndarray, s: DataSignals) -> Finding | None:
    """A position of an id column that always holds the same id is by design (a BOS/CLS/SEP marker, a numeric
    field's fixed id, padding) unless the id sits at the rare end of the vocabulary, above every id the other
    positions hold: where a hand-built vocabulary appends its unknown-word id (``vocab.get(word, len(vocab))``),
    which a tokeniser missing every text's first word puts at position 0. Special ids are conventionally the
    smallest (and a ``padding_idx`` is known to be special)."""
    varying = _varying(f)
    if not varying.any():
        return None
    others = f.per_sample[:, varying]
    largest_other = float(np.nanmax(others))
    suspects = [int(j) for j in constant
                if f.min[j] > largest_other and int(f.min[j]) not in s.network.padding_ids]
    if not suspects:
        return None
    j = suspects[0]
    value = int(f.min[j])
    return CONSTANT_FEATURE.finding(
        f"{_position_text(f, j)} id {value} over {s.train.samples} sampled samples, and {value} is above every id "
        f"at the other positions (largest there {largest_other:.0f}): the rare end of the vocabulary, where a "
        f"hand-built vocabulary appends its unknown-word id. A tokeniser that misses the same word of every text "
        f"(case, punctuation, a marker not in the vocabulary) produces this; special ids (BOS/CLS) are normally "
        f"among the smallest.",
        severity="warning",
        location=_where(s.train, f.column),
        evidence={"features": suspects[:50], "value": value, "largest_other_id": largest_other,
                  "samples": s.train.samples, "kind": "ids"},
        suggestion="Decode a few sequences back to words: if this is the unknown-word id, fix the tokeniser "
        "(lower-casing, punctuation, a BOS marker missing from the vocabulary); if it is a marker you add on "
        "purpose, give it a small reserved id or ignore MSD310 for this column.",
    )


def _constant_values(f: FeatureStats, s: DataSignals, constant: np.ndarray) -> Finding:
    """The finding for constant features of a quantity column (tabular, image)."""
    names = ", ".join(str(i) for i in constant[:10]) + (", ..." if constant.size > 10 else "")
    plural = constant.size > 1
    label = f"`{f.column}`" if f.layout == "" else f"`{f.column}` {f.feature_name}{'s' if plural else ''} {names}"
    value = float(f.min[constant[0]])
    whole = s.train.total_samples is not None and s.train.samples >= s.train.total_samples
    # A sparse/one-hot column can be all zeros in a partial sample; a constant channel, a non-zero
    # constant or a constant over the whole training set is a broken pipeline.
    certain = f.layout in ("CHW", "HWC") or value != 0.0 or whole
    return CONSTANT_FEATURE.finding(
        f"{label} {'are' if plural else 'is'} constant over {'all ' if whole else ''}{s.train.samples} "
        f"{'training' if whole else 'sampled'} samples (value {_g(value)}); {constant.size} of {f.num_features} "
        f"{f.feature_name}s carry no information.",
        severity="warning" if certain else "info",
        location=_where(s.train, f.column),
        evidence={"features": constant[:50].tolist(), "value": value, "samples": s.train.samples},
        suggestion="Drop constant features (or check the pipeline that produced them: a failed join, a "
        "channel zeroed by a transform); standardising them divides by a zero std.",
    )


CONSTANT_FEATURE = Rule(
    "MSD310", "constant-feature", WARNING,
    "a feature or channel with a single value",
)


@CONSTANT_FEATURE.judge
def constant_feature(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD310: a feature (tabular) or channel (image) with a single value over the training sample.

    Id columns are judged as ids: a fixed id at a fixed position is by design (see
    ``_suspicious_constant_id``), and so is the fixed value 1 of a one-hot field beside its varying id.
    """
    found = []
    if s.train.samples < 2:
        return found
    pairs = _id_value_pairs(s.train.features)
    fixed_by_design: dict[str, np.ndarray] = {}  # column -> positions whose partner column varies there
    for ids, values in pairs:
        fixed_by_design[ids.column] = fixed_by_design.get(ids.column, False) | _varying(values)
        fixed_by_design[values.column] = fixed_by_design.get(values.column, False) | _varying(ids)
    paired = {ids.column for ids, _ in pairs}
    for f in s.train.features:
        is_constant = (f.min == f.max) & (f.nonfinite == 0)
        constant = np.flatnonzero(is_constant & ~fixed_by_design.get(f.column, np.zeros_like(is_constant)))
        if not constant.size:
            continue
        if _id_evidence(f, s, paired) and _varying(f).any():
            finding = _suspicious_constant_id(f, constant, s)
            found.extend([finding] if finding else [])
            continue
        found.append(_constant_values(f, s, constant))
    return found
