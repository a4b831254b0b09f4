"""What the data probes measured: plain numpy statistics, the only input of the MSD3xx rules.

Nothing here imports MindSpore, so rules and their tests run on hand-made numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class FeatureStats:
    """Statistics of one input column over the sample, per feature.

    A "feature" is a channel for images (per-pixel statistics would flag every
    constant MNIST border pixel) and a column entry for tabular vectors.
    """

    column: str
    kind: str
    """"image", "tabular" or "tokens" (integer ids: no scale statistics)."""
    feature_name: str
    """How a feature is called in messages: "channel" or "feature"."""
    layout: str
    """Per-sample layout: "CHW", "HWC", "HW", "F" (vector) or "" (scalar)."""
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    nonfinite: np.ndarray
    """Count of NaN/Inf values per feature."""
    per_sample: np.ndarray
    """(samples, features): the row (tabular) or the per-sample channel mean (image); outlier scan."""
    grid: tuple[int, int, int] | None = None
    """(channels, height, width) of an image column that arrived flattened to a vector; None otherwise."""
    positions: int = 1
    """Positions per sample a weight-shared layer (convolution, recurrent cell, embedding) is applied at:
    height x width of an image, the steps of a sequence or token column, 1 for a tabular vector (MSD307)."""

    @property
    def num_features(self) -> int:
        return int(self.mean.shape[0])

    def feature_label(self, index: int) -> str:
        """``image`` channel 2 / ``x`` feature 7 / ``x`` for a scalar column."""
        if self.layout == "":
            return f"`{self.column}`"
        return f"`{self.column}` {self.feature_name} {index}"

    @property
    def rows_are_values(self) -> bool:
        """``per_sample`` holds the values themselves (tabular vectors, scalars), not per-sample means."""
        return self.layout in ("F", "")


@dataclass
class LabelStats:
    """The label column over the sample, in the order the dataset yields it."""

    column: str
    kind: str
    """"class" (integer ids), "onehot", "regression" or "sequence" (per-sample integer ids)."""
    values: np.ndarray
    """Class ids (class/onehot: argmax) or targets (regression) in stream order; all ids for sequences."""
    nonfinite: int = 0
    width: int | None = None
    """One-hot width."""


@dataclass
class DatasetSignals:
    """One dataset (train or eval) as the data probes saw it."""

    name: str
    samples: int
    """Samples read into the statistics."""
    batch_size: int = 1
    total_samples: int | None = None
    """get_dataset_size() x batch size: the whole epoch, not just the sample (this rank's shard of it)."""
    shards: int = 1
    """The source's ``num_shards``: under data parallelism every rank reads 1/shards of the data."""
    truncated_by_time: bool = False
    features: list[FeatureStats] = field(default_factory=list)
    label: LabelStats | None = None
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    """One 64-bit hash per sample of its input bytes (constant inputs left out; repeats kept, they are the
    dataset's own duplicate rate): leakage scan."""
    shuffle_ignored: bool = False
    """A GeneratorDataset asked to shuffle a source without random access (it silently does not)."""
    skipped_columns: dict[str, str] = field(default_factory=dict)
    """Column -> why its statistics could not be computed (strings, ragged shapes)."""


@dataclass
class NetworkSignals:
    trainable_params: int | None = None
    shared_params: int = 0
    """Trainable parameters of convolutions, recurrent cells and embeddings: applied with the same weights at
    every position of a sample, each is fitted to samples x positions values (MSD307)."""
    num_outputs: int | None = None
    """Class count the network predicts (last axis of its output); None when unknown."""
    outputs_unknown_why: str = ""
    ignore_index: int | None = None
    """The label value the loss skips (``nn.CrossEntropyLoss(ignore_index=...)``); None when it has none."""
    custom_loss: bool = False
    """The loss is the user's own Cell: it may mask labels (e.g. -1 for unlabelled samples) itself."""
    embeddings: int = 0
    """Embedding tables (``nn.Embedding``, ``mint.nn.Embedding``, lookups) in the network: integer input columns
    are then ids it looks up, not quantities (MSD310)."""
    padding_ids: tuple[int, ...] = ()
    """The embeddings' ``padding_idx`` values: the vocabulary's one id known to be special (MSD310)."""


@dataclass
class DataSignals:
    """Everything the MSD3xx rules look at."""

    train: DatasetSignals
    eval: DatasetSignals | None = None
    network: NetworkSignals = field(default_factory=NetworkSignals)
