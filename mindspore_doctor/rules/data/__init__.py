"""MSD301-MSD313: judge the statistics the data probes measured on a dataset sample (and MSD311 the label reports).

Every rule is a pure function ``(DataSignals, DoctorConfig) -> list[Finding]`` over numpy numbers; nothing here
touches MindSpore. Rules that need something the probes could not measure raise ``CheckSkipped`` (reported as
MSD002). One module per concern:

- ``values.py``: NaN/Inf (MSD301) and constant features (MSD310);
- ``labels.py``: class imbalance (MSD302), unshuffled order (MSD305), labels out of range (MSD306);
- ``scale.py``: outliers (MSD303) and unnormalised inputs (MSD304);
- ``size.py``: too few samples for the network (MSD307);
- ``pairs.py``: the eval set against the training set (MSD308, MSD309);
- ``label_copy.py``: the regression target copied into an input, MSD205 proven from the data;
- ``eval_pipeline.py``: the eval pipeline's own operations: random augmentation (MSD312), preprocessing that
  differs from training (MSD313);
- ``label_errors.py``: labels confident learning says are wrong (MSD311), judged on ``LabelReport``s, not on the
  ``DataSignals`` (in ``RULES``, not in ``JUDGES``);
- ``common.py``: what they share.
"""
from __future__ import annotations

from mindspore_doctor.rule import Rule
from mindspore_doctor.rules.data.common import DataRule
from mindspore_doctor.rules.data.eval_pipeline import EVAL_PREPROCESSING_MISMATCH, EVAL_RANDOM_AUGMENTATION
from mindspore_doctor.rules.data.label_copy import label_in_inputs
from mindspore_doctor.rules.data.label_errors import LABEL_ERRORS, label_error_findings
from mindspore_doctor.rules.data.labels import CLASS_IMBALANCE, DATA_NOT_SHUFFLED, LABEL_OUT_OF_RANGE
from mindspore_doctor.rules.data.pairs import TRAIN_EVAL_LEAKAGE, TRAIN_EVAL_MISMATCH
from mindspore_doctor.rules.data.scale import INPUT_NOT_NORMALIZED, INPUT_OUTLIERS
from mindspore_doctor.rules.data.size import TOO_FEW_SAMPLES
from mindspore_doctor.rules.data.values import CONSTANT_FEATURE, NONFINITE_INPUT
from mindspore_doctor.rules.training import LOSS_SUSPICIOUSLY_LOW

RULES = (NONFINITE_INPUT, CLASS_IMBALANCE, INPUT_OUTLIERS, INPUT_NOT_NORMALIZED, DATA_NOT_SHUFFLED,
         LABEL_OUT_OF_RANGE, TOO_FEW_SAMPLES, TRAIN_EVAL_MISMATCH, TRAIN_EVAL_LEAKAGE, CONSTANT_FEATURE, LABEL_ERRORS,
         EVAL_RANDOM_AUGMENTATION, EVAL_PREPROCESSING_MISMATCH)
"""The data rules, in code order."""

PAIR_RULES = (TRAIN_EVAL_MISMATCH, TRAIN_EVAL_LEAKAGE, EVAL_RANDOM_AUGMENTATION, EVAL_PREPROCESSING_MISMATCH)
"""The rules the eval set is read for: ``pairs.py`` compares its sample with the training sample,
``eval_pipeline.py`` its pipeline with the training pipeline."""

REPORT_RULES = (LABEL_ERRORS,)
"""Rules judged on what the model says once trained (``LabelReport``s: ``label_error_findings``), not on the data
sample's ``DataSignals``: in the catalog, not among the data checks."""

JUDGES: tuple[tuple[Rule, DataRule], ...] = (
    (LOSS_SUSPICIOUSLY_LOW, label_in_inputs),
    *((rule, rule.judged_by) for rule in RULES if rule not in REPORT_RULES),
)
"""(rule, judge): the data checks in catalog order, first the one training rule the data can prove before any step
(MSD205: its ``judged_by`` reads the loss; ``label_in_inputs`` judges it on the data)."""
