"""MSD304 judged on what the network receives, not only on what the dataset yields.

A hand-written loop may transform the batch between the iterator and the step (``image / 127.5 - 1``): the
dataset then holds raw 0-255 pixels while the network sees [-1, 1]. The data checks run before the first step
and see only the dataset, so the training session holds their MSD304 findings back and, at the first step that
hands over its batch (``run.step(loss, *batch)``; ``Model.train`` always does), compares that batch with the
dataset's sample:

- the same distribution: the network sees the dataset as it is, the finding stands;
- a different one (means or stds beyond their standard errors): the loop transforms the inputs, so MSD304 is judged
  again on the step's batch; if the batch is normalised, what is left is an ``info`` note that the dataset
  differs from what the network sees.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.data.signals import DatasetSignals, DataSignals, FeatureStats
from mindspore_doctor.data.stats import FeatureAccumulator, UnsupportedColumn, channel_view
from mindspore_doctor.findings import Finding, Severity
from mindspore_doctor.rules.data.pairs import feature_kurtosis
from mindspore_doctor.rules.data.scale import input_not_normalized

PASS_THE_BATCH = (" In a hand-written loop that transforms the batch before the network, pass the batch the "
                  "network receives to `run.step(loss, *batch)` so the Doctor judges that instead.")


def _arrays(batch: Any) -> list[np.ndarray]:
    """The step's batch as numpy arrays, nested tuples/lists flattened in order; non-arrays dropped."""
    out: list[np.ndarray] = []
    for item in batch if isinstance(batch, (tuple, list)) else (batch,):
        if isinstance(item, (tuple, list)):
            out.extend(_arrays(item))
        elif hasattr(item, "asnumpy"):
            out.append(item.asnumpy())
        elif isinstance(item, np.ndarray):
            out.append(item)
    return out


TRANSFORMED_SIGMAS = 5.0
"""The step's batch differs from the dataset sample when a feature's mean or log std is this many standard
errors away (errors under "same data": the dataset's spread and tails for both). A batch drawn from the
dataset stays within ~3.5 over hundreds of features; ``x / 2`` on 32 images is ~5.5, ``x / 127.5 - 1`` hundreds."""


def _same_distribution(dataset: FeatureStats, received: FeatureStats, dataset_samples: int, received_samples: int) -> bool:
    """Whether the step's batch can be a draw from the dataset as it is (no transform in between).

    No minimum effect size, unlike MSD308: the two come from the same data, so any transform shows, and a
    batch the dataset's own zeros leave constant (a sparse feature) is judged by the dataset's spread.
    """
    spread = np.sqrt(1 / dataset_samples + 1 / received_samples)
    with np.errstate(all="ignore"):
        z_shift = np.abs(received.mean - dataset.mean) / (dataset.std * spread)
        both = (dataset.std > 0) & (received.std > 0)
        log_noise = np.sqrt((feature_kurtosis(dataset) - 1) / 4) * spread
        z_ratio = np.where(both, np.abs(np.log(received.std / dataset.std)) / log_noise, 0.0)
    constant_moved = (dataset.std == 0) & (received.mean != dataset.mean)
    moved = np.nan_to_num(z_shift, posinf=0.0) > TRANSFORMED_SIGMAS
    return not (moved | (np.nan_to_num(z_ratio) > TRANSFORMED_SIGMAS) | constant_moved).any()


def _fits(sample_shape: tuple[int, ...], other: tuple[int, ...], exact: bool) -> bool:
    """``other`` (one sample's shape) is ``sample_shape``, or, not ``exact``, holds as many values in as many axes."""
    if exact:
        return tuple(other) == tuple(sample_shape)
    return len(other) == len(sample_shape) and int(np.prod(other)) == int(np.prod(sample_shape))


def _moments(prefix: str, stats: FeatureStats) -> dict[str, list[float]]:
    """Per-feature means and stds for the evidence (the first 16)."""
    return {f"{prefix}_mean": stats.mean.round(4).tolist()[:16], f"{prefix}_std": stats.std.round(4).tolist()[:16]}


@dataclasses.dataclass
class NetworkInputCheck:
    """MSD304 findings held back until the first training step shows what the network receives."""

    held: list[Finding]
    dataset_features: dict[str, FeatureStats]
    """The train sample's statistics per input column (flattened images already viewed per channel)."""
    sample_shapes: dict[str, tuple[int, ...]]
    """Per-sample shape of each input column as the dataset yields it."""
    dataset_samples: int
    config: DoctorConfig

    def judge(self, batch: Any) -> list[Finding]:
        """The held findings, judged on ``batch`` (the step's inputs; None when the step did not pass them)."""
        arrays = _arrays(batch) if batch is not None else []
        if not arrays:
            for finding in self.held:
                finding.suggestion += PASS_THE_BATCH
            return self.held
        return [self._judge_one(finding, arrays) for finding in self.held]

    def _received(self, column: str, arrays: list[np.ndarray]) -> np.ndarray | None:
        """The step's array for ``column``: the same per-sample shape (else, transposed, the same size), taken in
        the order the dataset's input columns of that shape come."""
        for exact in (True, False):
            rivals = [c for c, shape in self.sample_shapes.items() if _fits(self.sample_shapes[column], shape, exact)]
            candidates = [a for a in arrays if a.ndim and _fits(self.sample_shapes[column], a.shape[1:], exact)]
            if rivals.index(column) < len(candidates):
                return candidates[rivals.index(column)]
        return None

    def _judge_one(self, finding: Finding, arrays: list[np.ndarray]) -> Finding:
        column = finding.location.get("column")
        dataset = self.dataset_features.get(column)
        array = self._received(column, arrays) if dataset is not None else None
        if array is None or array.dtype.kind not in "iufb":
            return finding
        accumulator = FeatureAccumulator(column)
        try:
            accumulator.add(array)
        except UnsupportedColumn:
            return finding
        received = accumulator.result()
        if dataset.grid is not None and received.num_features != dataset.num_features:
            received = channel_view(received, dataset.grid, dataset.layout)
        if received.num_features != dataset.num_features or _same_distribution(
                dataset, received, self.dataset_samples, array.shape[0]):
            return finding  # the network sees the dataset's values: the finding stands
        evidence = {**_moments("dataset", dataset), **_moments("received", received),
                    "judged_on": "the batch passed to the training step"}
        summary = (f"mean {_span(received.mean)} / std {_span(received.std)} as the training step receives it, "
                   f"mean {_span(dataset.mean)} / std {_span(dataset.std)} as the dataset yields it")
        rejudged = input_not_normalized(DataSignals(DatasetSignals("train", array.shape[0], features=[received])),
                                        self.config)
        if rejudged:
            again = rejudged[0]
            again.message += f" Judged on the batch the training step receives ({summary})."
            again.evidence.update(evidence)
            return again
        return dataclasses.replace(
            finding,
            severity=Severity.parse("info"),
            message=f"Input `{column}` differs between the dataset and the network: {summary}; the loop transforms "
                    f"it between the iterator and the step, and what the network receives is normalised. "
                    f"(On the dataset alone: {finding.message})",
            evidence={**finding.evidence, **evidence},
            suggestion="Nothing to change for training. Evaluation and inference must apply the same transform: "
                       "moving it into the dataset (`.map(...)`) keeps the two in step.",
        )


def _span(values: np.ndarray) -> str:
    """One number when all features agree to 3 digits, else "lo..hi"."""
    lo, hi = float(np.min(values)), float(np.max(values))
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}..{hi:.3g}"
