"""MSD5xx: rules over what the ranks of a data-parallel run exchanged.

Pure functions: parameter fingerprints (one ``(parameters, 5)`` array per rank:
sum, sum of squares, three strided elements) and per-sample digests, plus the
config. Ranks are compared with the lowest rank that has data.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import ERROR, Option, Rule, WARNING

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

_NAMED = 3
"""Parameters named in a message; the evidence lists more."""
_LISTED = 20


def differing_parameters(
    names: Sequence[str], fingerprints: Mapping[int, np.ndarray | None], config: DoctorConfig
) -> dict[str, dict[str, Any]]:
    """Parameters whose fingerprint differs between ranks beyond tolerance, in network order.

    Each maps to the ranks that differ from the reference rank and the largest relative difference.
    """
    ranks = sorted(r for r, fp in fingerprints.items() if fp is not None and np.shape(fp) == (len(names), 5))
    if len(ranks) < 2:
        return {}
    reference = np.asarray(fingerprints[ranks[0]], np.float64)
    found: dict[str, dict[str, Any]] = {}
    for rank in ranks[1:]:
        other = np.asarray(fingerprints[rank], np.float64)
        gap = np.abs(other - reference)
        scale = np.maximum(np.abs(other), np.abs(reference))
        bad = ~(gap <= config.rank_atol + config.rank_rtol * scale)  # NaN counts as different
        relative = np.where(scale > 0, gap / np.where(scale > 0, scale, 1.0), gap)
        for index in np.flatnonzero(bad.any(axis=1)):
            entry = found.setdefault(names[index], {"ranks": [ranks[0]], "max_relative_difference": 0.0})
            entry["ranks"].append(rank)
            entry["max_relative_difference"] = max(entry["max_relative_difference"],
                                                   float(np.nan_to_num(relative[index].max(), nan=np.inf)))
    order = {name: i for i, name in enumerate(names)}
    return dict(sorted(found.items(), key=lambda item: order[item[0]]))


def _summary(differing: dict[str, dict[str, Any]], total: int) -> tuple[str, dict[str, Any], list[int], str]:
    first = next(iter(differing))
    ranks = sorted({r for entry in differing.values() for r in entry["ranks"]})
    named = ", ".join(f"`{n}`" for n in list(differing)[:_NAMED])
    more = f" and {len(differing) - _NAMED} more" if len(differing) > _NAMED else ""
    evidence = {
        "parameters": list(differing)[:_LISTED],
        "differing_parameters": len(differing),
        "total_parameters": total,
        "max_relative_difference": max(e["max_relative_difference"] for e in differing.values()),
        "per_parameter": {n: e for n, e in list(differing.items())[:_LISTED]},
    }
    return first, evidence, ranks, f"{named}{more}"


RANK_RTOL = Option(
    "rank_rtol", 1e-5,
    "MSD501/502: fingerprints within rank_atol + rank_rtol * |value| count as equal across ranks.",
)
RANK_ATOL = Option(
    "rank_atol", 1e-7,
    "MSD501/502: absolute part of the cross-rank tolerance.",
)
RANK_INIT_MISMATCH = Rule(
    "MSD501", "rank-init-mismatch", ERROR,
    "initial parameters differ across ranks",
    options=(RANK_RTOL, RANK_ATOL),
)


@RANK_INIT_MISMATCH.judge
def rank_init_mismatch(
    names: Sequence[str], fingerprints: Mapping[int, np.ndarray | None], config: DoctorConfig
) -> list[Finding]:
    """MSD501: at train begin every rank must hold the same weights."""
    differing = differing_parameters(names, fingerprints, config)
    if not differing:
        return []
    first, evidence, ranks, named = _summary(differing, len(names))
    return [RANK_INIT_MISMATCH.finding(
        f"{len(differing)} of {len(names)} parameters start with different values on ranks {ranks}: {named} "
        f"(largest relative difference {evidence['max_relative_difference']:.3g}). Data-parallel training "
        "all-reduces gradients, so the ranks would train different models forever.",
        location={"parameter": first, "ranks": ranks},
        evidence=evidence,
        suggestion="Call `mindspore.set_seed(<same value>)` on every rank before building the network, or load "
                   "the same checkpoint on every rank before training.",
        step=0,
    )]


RANK_CHECK_EVERY = Option(
    "rank_check_every", 50,
    "MSD502: compare parameter fingerprints across ranks every N steps (and at train end).",
)
RANK_DIVERGENCE = Rule(
    "MSD502", "rank-divergence", ERROR,
    "parameters drift apart across ranks",
    options=(RANK_CHECK_EVERY, RANK_RTOL, RANK_ATOL),
)


@RANK_DIVERGENCE.judge
def rank_divergence(
    names: Sequence[str],
    fingerprints: Mapping[int, np.ndarray | None],
    already_differing: set[str],
    step: int | None,
    config: DoctorConfig,
) -> list[Finding]:
    """MSD502: parameters that were equal across ranks and now are not."""
    differing = {n: e for n, e in differing_parameters(names, fingerprints, config).items()
                 if n not in already_differing}
    if not differing:
        return []
    first, evidence, ranks, named = _summary(differing, len(names))
    return [RANK_DIVERGENCE.finding(
        f"{named} drifted apart across ranks {ranks} by step {step} (largest relative difference "
        f"{evidence['max_relative_difference']:.3g}, {len(differing)} of {len(names)} parameters): the ranks "
        "apply different updates, so gradients are not all-reduced.",
        location={"parameter": first, "ranks": ranks},
        evidence=evidence,
        suggestion="Set `mindspore.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, "
                   "gradients_mean=True)` before building the model; a hand-written train step must pass its "
                   "gradients through `nn.DistributedGradReducer` before the optimizer.",
        step=step,
    )]


RANK_BATCH_STEPS = Option(
    "rank_batch_steps", 2,
    "MSD503: the first N batches of each rank are hashed per sample and compared across ranks.",
)
RANK_DUPLICATE_FRACTION = Option(
    "rank_duplicate_fraction", 0.5,
    "MSD503: two ranks sharing at least this fraction of those samples read the same data.",
)
RANK_DATA_DUPLICATION = Rule(
    "MSD503", "rank-data-duplication", WARNING,
    "ranks read the same samples",
    options=(RANK_BATCH_STEPS, RANK_DUPLICATE_FRACTION),
)


@RANK_DATA_DUPLICATION.judge
def rank_data_duplication(digests: Mapping[int, Sequence[str] | None], step: int | None,
                          config: DoctorConfig) -> list[Finding]:
    """MSD503: pairs of ranks whose first sampled batches share most of their samples (judged at ``step``)."""
    sets = {r: set(d) for r, d in sorted(digests.items()) if d}
    if len(sets) < 2:
        return []
    duplicated: dict[int, set[int]] = defaultdict(set)
    worst = 0.0
    ranks = sorted(sets)
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            shared = len(sets[a] & sets[b]) / max(1, min(len(sets[a]), len(sets[b])))
            if shared >= config.rank_duplicate_fraction:
                duplicated[a].add(b)
                duplicated[b].add(a)
                worst = max(worst, shared)
    if not duplicated:
        return []
    involved = sorted(duplicated)
    samples = min(len(sets[r]) for r in involved)
    return [RANK_DATA_DUPLICATION.finding(
        f"ranks {involved} trained on the same samples: {worst:.0%} of the {samples} samples of their first "
        f"{config.rank_batch_steps} batches are identical. Each rank must read its own shard, otherwise the "
        "run sees every sample world_size times per epoch and gains nothing from the extra devices.",
        location={"dataset": "train", "ranks": involved},
        evidence={"shared_fraction": worst, "samples_compared": samples, "batches": config.rank_batch_steps},
        suggestion="Shard the dataset: pass `num_shards=get_group_size(), shard_id=get_rank()` to the "
                   "dataset (or a `DistributedSampler`).",
        step=step,
    )]


def merge_rank_findings(per_rank: Mapping[int, Sequence[Finding]]) -> list[Finding]:
    """One finding per (code, location) across ranks; ``location["ranks"]`` says where it was seen.

    The finding lifecycle merges too: a transient finding still open on any rank is open (that rank's copy, with
    ``evidence["resolved_on_ranks"]`` when others saw it pass); it is resolved only when it resolved on every rank
    that raised it, from the latest ``resolved_step`` among them.
    """
    copies: dict[tuple, list[tuple[int, Finding]]] = {}
    for rank, findings in sorted(per_rank.items()):
        for finding in findings:
            key = (finding.code, tuple(sorted((k, str(v)) for k, v in finding.location.items() if k != "ranks")))
            copies.setdefault(key, []).append((rank, finding))
    merged = []
    for found in copies.values():
        still_open = [f for _, f in found if not f.resolved]
        chosen = still_open[0] if still_open else max((f for _, f in found), key=lambda f: f.evidence["resolved_step"])
        finding = Finding.from_dict(chosen.to_dict())
        finding.location["ranks"] = sorted({r for rank, f in found for r in f.location.get("ranks", [rank])})
        passed = sorted({rank for rank, f in found if f.resolved})
        if still_open and passed:
            finding.evidence["resolved_on_ranks"] = passed
        merged.append(finding)
    return merged


RULES = (RANK_INIT_MISMATCH, RANK_DIVERGENCE, RANK_DATA_DUPLICATION)
