"""Rules over parameters, initialisation and the optimizer (MSD101-103, 108, 109, 111, 112, 116, 117).

Pure functions: they read the plain signals of ``static/signals.py`` (names, paths, shapes, numbers)
that ``static/parameters.py`` and ``static/optimizer_settings.py`` measure, plus ``DoctorConfig``; they never touch
MindSpore, so each one is unit-testable with hand-built signals. One module per family, each rule defined above
the function that judges it: ``sharing`` (MSD101), ``ownership`` (MSD102, MSD103), ``initialization`` (MSD108,
MSD109), ``optimizer`` (MSD111, MSD112, MSD116, MSD117).
"""
from __future__ import annotations

from mindspore_doctor.rules.parameters.initialization import (
    EMBEDDING_STD_USUAL_MAX,
    INIT_STD_FACTOR,
    POOR_INITIALIZATION,
    ZERO_INITIALIZED_WEIGHT,
    poor_initialization,
    zero_initialized_weight,
)
from mindspore_doctor.rules.parameters.optimizer import (
    ADAM_LR_RANGE,
    ADAM_WEIGHT_DECAY_MAX,
    FP16_MAX,
    LEARNING_RATE_OUT_OF_RANGE,
    LOSS_SCALE_MISCONFIGURED,
    MAX_FIXED_LOSS_SCALE,
    MAX_MOMENTUM,
    MOMENTUM_OUT_OF_RANGE,
    SGD_LR_RANGE,
    SGD_WEIGHT_DECAY_MAX,
    WEIGHT_DECAY_FACTOR,
    WEIGHT_DECAY_OUT_OF_RANGE,
    learning_rate_out_of_range,
    loss_scale_misconfigured,
    momentum_out_of_range,
    weight_decay_out_of_range,
)
from mindspore_doctor.rules.parameters.ownership import (
    FOREIGN_OPTIMIZER_PARAMETER,
    FROZEN_PARAMETER,
    foreign_optimizer_parameter,
    frozen_parameter,
)
from mindspore_doctor.rules.parameters.sharing import ALLOW_SHARED, SHARED_PARAMETER, shared_parameter

RULES = (SHARED_PARAMETER, FROZEN_PARAMETER, FOREIGN_OPTIMIZER_PARAMETER, ZERO_INITIALIZED_WEIGHT, POOR_INITIALIZATION,
         LEARNING_RATE_OUT_OF_RANGE, LOSS_SCALE_MISCONFIGURED, WEIGHT_DECAY_OUT_OF_RANGE, MOMENTUM_OUT_OF_RANGE)
"""The family's rules, in code order."""

__all__ = [
    "ADAM_LR_RANGE", "ADAM_WEIGHT_DECAY_MAX", "ALLOW_SHARED", "EMBEDDING_STD_USUAL_MAX", "FOREIGN_OPTIMIZER_PARAMETER",
    "FP16_MAX", "FROZEN_PARAMETER", "INIT_STD_FACTOR", "LEARNING_RATE_OUT_OF_RANGE", "LOSS_SCALE_MISCONFIGURED",
    "MAX_FIXED_LOSS_SCALE", "MAX_MOMENTUM", "MOMENTUM_OUT_OF_RANGE", "POOR_INITIALIZATION", "RULES", "SGD_LR_RANGE",
    "SGD_WEIGHT_DECAY_MAX", "SHARED_PARAMETER", "WEIGHT_DECAY_FACTOR", "WEIGHT_DECAY_OUT_OF_RANGE",
    "ZERO_INITIALIZED_WEIGHT", "foreign_optimizer_parameter", "frozen_parameter", "learning_rate_out_of_range",
    "loss_scale_misconfigured", "momentum_out_of_range", "poor_initialization", "shared_parameter",
    "weight_decay_out_of_range", "zero_initialized_weight",
]
