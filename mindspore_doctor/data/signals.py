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
    pipelines: dict[str, "PipelineSignals"] = field(default_factory=dict)
    """"train" and "eval": the MindSpore pipelines' operations (MSD312, MSD313); empty when not read."""


@dataclass
class PipelineOp:
    """One operation of a dataset pipeline as the pipeline reader saw it (MSD312, MSD313)."""

    name: str
    """The class name (``RandomCrop``, ``Normalize``) or, for a Python callable, its qualified name."""
    stage: str
    """Where: "map 2 of 3 (input_columns=['image'])" or "batch (per_batch_map)"."""
    columns: tuple[str, ...]
    """The columns its output lands in (after a map's ``output_columns``); () when unknown."""
    kind: str
    """"size" (sets the spatial size), "affine" (Rescale, Normalize, ToTensor: a per-channel a*x+b), "layout"
    (HWC2CHW), "cast", "python" (a Python callable: what it does is unknown) or "other"."""
    text: str
    """How it reads in a message: ``Normalize(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))``."""
    random: bool = False
    """A MindSpore random op (``Random*``, AutoAugment, MixUpBatch, ...) that is not switched off (prob 0)."""
    random_name: bool = False
    """A Python callable whose name says augmentation (random, mixup, cutmix, augment, ...): random only if a
    replay shows it."""
    wrapper: str = ""
    """The wrappers it sits in, outermost first: "RandomApply(prob=0.5)"."""
    params: dict = field(default_factory=dict)
    """Plain numbers: size (h, w) or {"short": n}; rescale/shift; mean/std; dtype; prob."""
    key: str = ""
    """A Python callable's identity (module.qualname, id): the same function in two pipelines is the same step."""


@dataclass
class Replay:
    """One map (or batch) stage of the eval pipeline run again on one fixed input row, several times."""

    stage: str
    reads: int
    """How many times the same input went through the stage (0: the replay could not run, see ``why``)."""
    distinct: int = 0
    """Distinct outputs among them: 1 means the stage is deterministic on this input."""
    why: str = ""


@dataclass
class PipelineSignals:
    """One MindSpore dataset pipeline's operations (source first), and what its first row looked like."""

    name: str
    ops: list[PipelineOp] = field(default_factory=list)
    replays: list[Replay] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Per-sample shape of each column in the first row read (batch axis removed)."""
    dtypes: dict[str, str] = field(default_factory=dict)
    """dtype of each column in the first row read."""

    def chain(self, column: str) -> list[PipelineOp]:
        """The operations that produced ``column``, in order."""
        return [op for op in self.ops if column in op.columns]
