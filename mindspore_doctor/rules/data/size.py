"""MSD307: too few training samples for the network's capacity, overall or in a class."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mindspore_doctor.data.signals import DataSignals
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import CheckSkipped, Option, Rule, WARNING
from mindspore_doctor.rules.data.common import _class_ids, _g, _where
from mindspore_doctor.rules.data.labels import _order_problem

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def _capacity(s: DataSignals) -> tuple[dict[str, float], str]:
    """The network's trainable parameters with a weight-shared one (``shared_params``) counted 1 / positions
    ("effective_params": a convolution kernel is fitted at every position of every sample, a dense weight once
    per sample), as evidence; and a note on how they were counted ("" when nothing is shared)."""
    params = s.network.trainable_params or 0
    positions = max((f.positions for f in s.train.features), default=1)
    shared = min(s.network.shared_params, params)
    effective = params - shared + shared / positions
    note = "" if effective == params else (
        f" (the {shared:,} in convolutions, recurrent cells and embeddings counted once per position: "
        f"{positions:,} per sample, {effective:,.0f} in all)")
    return {"trainable_params": params, "shared_params": shared, "positions": positions,
            "effective_params": effective}, note


PARAMS_PER_SAMPLE_MAX = Option(
    "params_per_sample_max", 1000.0,
    "MSD307: trainable parameters per training sample above this: too few samples. A weight-shared parameter "
    "(convolution, recurrent cell, embedding) counts 1 / the input's positions per sample (H x W, steps): it is "
    "fitted at each, so RegNet's 2.3M parameters on 1024 32x32 images count 24 per sample, not 2263.",
)
MIN_SAMPLES_PER_CLASS = Option(
    "min_samples_per_class", 100,
    "MSD307: a class with fewer (estimated) training samples than this may have too few (see "
    "``params_per_class_sample_max``).",
)
PARAMS_PER_CLASS_SAMPLE_MAX = Option(
    "params_per_class_sample_max", 100.0,
    "MSD307: a class below ``min_samples_per_class`` is too small only for a network with more than this many "
    "trainable parameters per class (params / classes) per sample of that class: wine's 36-sample class under a "
    "547-parameter MLP (5) is normal, 40 samples per class under a 540k-parameter MLP (3375) are not.",
)
TOO_FEW_SAMPLES = Rule(
    "MSD307", "too-few-samples", WARNING,
    "too few samples for the model size",
    options=(PARAMS_PER_SAMPLE_MAX, MIN_SAMPLES_PER_CLASS, PARAMS_PER_CLASS_SAMPLE_MAX),
)


@TOO_FEW_SAMPLES.judge
def too_few_samples(s: DataSignals, config: DoctorConfig) -> list[Finding]:
    """MSD307: trainable parameters far above the sample count, or classes too small for the network's capacity.

    Capacity is measured in parameters per fitted value: a weight applied at every position (a convolution
    kernel at each pixel, a recurrent cell at each step) counts 1 / positions of a parameter.
    """
    if s.train.total_samples is None:
        raise CheckSkipped("the training set's size is unknown (a generator without __len__ that was not read to the end)")
    if s.train.total_samples == 1:
        # a whole graph (its nodes are the samples, their labels often outside the pipeline) or a full batch
        raise CheckSkipped("the training set is one element (a whole graph or one full batch): its samples cannot be "
                           "counted from the pipeline")
    total = s.train.total_samples * s.train.shards  # the model sees every shard, one per rank
    found = []
    params = s.network.trainable_params
    capacity, counted = _capacity(s)
    effective = capacity["effective_params"]
    column = s.train.label.column if s.train.label else ""
    if params and effective / total > config.params_per_sample_max:
        found.append(TOO_FEW_SAMPLES.finding(
            f"The network has {params:,} trainable parameters{counted} for {total:,} training samples "
            f"({effective / total:.0f} per sample > {_g(config.params_per_sample_max)}): it can memorise the data.",
            location=_where(s.train, column),
            evidence={**capacity, "samples": total, "params_per_sample": effective / total},
            suggestion="Collect more data, augment it, or use a smaller / pretrained model with regularisation.",
        ))
    ids = _class_ids(s.train.label)
    if not params or ids is None or not ids.size or _order_problem(s.train, s.network.num_outputs, config):
        return found  # without the network there is no capacity to judge a class's size against
    classes, counts = np.unique(ids, return_counts=True)
    estimated = counts / ids.size * total
    per_class = effective / max(classes.size, s.network.num_outputs or 0)
    few = np.flatnonzero((estimated < config.min_samples_per_class)
                         & (per_class / np.maximum(estimated, 1) > config.params_per_class_sample_max))
    if few.size:
        k = int(few[np.argmin(estimated[few])])
        found.append(TOO_FEW_SAMPLES.finding(
            f"{few.size} of {classes.size} classes are small for the network's capacity: class {int(classes[k])} "
            f"has about {estimated[k]:.0f} of {total:,} training samples for {per_class:,.0f} trainable parameters "
            f"per class{counted} ({per_class / max(estimated[k], 1):.0f} per sample > "
            f"{_g(config.params_per_class_sample_max)}).",
            location={**_where(s.train, column), "classes": "small"},  # its own key beside the model-size finding
            evidence={**capacity, "classes_below": classes[few].tolist(),
                      "estimated_counts": dict(zip(classes.tolist(), np.round(estimated).tolist())),
                      "samples": total, "params_per_class": per_class},
            suggestion="Collect or augment samples of the rare classes, merge classes, or use a smaller / "
            "pretrained model.",
        ))
    return found
