"""MSD201-MSD216 and MSD115: judge training signals (plain numbers) against DoctorConfig thresholds.

Every rule is a pure function ``(TrainingHistory, DoctorConfig) -> list[Finding]``; none touches MindSpore. Rules
re-run on every probed step over a bounded tail of the history, so a finding appears at the step its condition first
holds. Each module of the package defines its rules (``rule.Rule``, with the options they read) above the functions
that judge them; this module gathers them and derives, from their fields, the registries the training session runs
them by: the order they run in, the probes they need, which findings can pass.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Rule
from mindspore_doctor.rules.training.probes import not_judged
from mindspore_doctor.signals import TrainingHistory

# The definitions and judges, re-exported: other rule families, the runners and the tests name them from here.
from mindspore_doctor.rules.training.common import (CONVERGED_LOSS_FRACTION, PERSISTENT_PROBES,  # noqa: F401
                                                    TrainingRule, shared_work)
from mindspore_doctor.rules.training.nonfinite import (NONFINITE_LOSS, NONFINITE_TENSOR, nonfinite_loss,  # noqa: F401
                                                       nonfinite_tensor)
from mindspore_doctor.rules.training.loss import (DIVERGE_FACTOR, DIVERGE_MIN_RISE, DIVERGE_NOISE,  # noqa: F401
                                                  DIVERGE_SMOOTHING, DIVERGE_TREND, DIVERGE_TREND_UP, LOSS_DIVERGING,
                                                  LOSS_NOT_DECREASING, LOSS_OSCILLATING, LOSS_WINDOW, MIN_IMPROVEMENT,
                                                  OSCILLATION_ALTERNATION, OSCILLATION_AMPLITUDE, PLATEAU_WINDOWS,
                                                  loss_diverging, loss_not_decreasing, loss_oscillating,
                                                  loss_still_diverged)
from mindspore_doctor.rules.training.first_steps import (EARLY_STEPS, INITIAL_LOSS_FACTOR,  # noqa: F401
                                                         LABEL_COPY_TOLERANCE, LOSS_SUSPICIOUSLY_LOW, LOW_LOSS,
                                                         UNEXPECTED_INITIAL_LOSS, loss_suspiciously_low,
                                                         unexpected_initial_loss)
from mindspore_doctor.rules.training.gradients import (EXPLODING_GRADIENT, EXPLODING_GRAD_GROWTH,  # noqa: F401
                                                       EXPLODING_GRAD_RATIO, NO_GRADIENT_FRACTION,
                                                       VANISHING_GRADIENT, VANISHING_GRAD_MEAN, VANISHING_GRAD_RATIO,
                                                       VANISHING_UPDATE_FRACTION, exploding_gradient,
                                                       vanishing_gradient)
from mindspore_doctor.rules.training.frozen import (FROZEN_UPDATE_ATOL, FROZEN_UPDATE_RTOL,  # noqa: F401
                                                    REDUNDANT_GRAD_RATIO, REDUNDANT_PARAMETER, WEIGHTS_NOT_UPDATING,
                                                    redundant_parameter, weights_not_updating)
from mindspore_doctor.rules.training.updates import (UPDATE_RATIO_BURST, UPDATE_RATIO_MAX,  # noqa: F401
                                                     UPDATE_RATIO_MIN, UPDATE_RATIO_PEER_FRACTION,
                                                     UPDATE_RATIO_TOO_LARGE, UPDATE_RATIO_TOO_SMALL,
                                                     update_ratio_too_large, update_ratio_too_small)
from mindspore_doctor.rules.training.activations import (ACTIVATION_EXPLODE, ACTIVATION_EXPLODING,  # noqa: F401
                                                         DEAD_RELU, DEAD_RELU_FRACTION, DEAD_UNIT_FRACTION,
                                                         DEAD_UNIT_Z, SATURATED_ACTIVATION, SATURATED_FRACTION,
                                                         activation_exploding, dead_relu, saturated_activation)
from mindspore_doctor.rules.training.loss_scale import (LOSS_SCALE_OVERFLOW, OVERFLOW_RATE,  # noqa: F401
                                                        loss_scale_overflow)
from mindspore_doctor.rules.training.mode import train_mode_off  # noqa: F401

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

RULES = (REDUNDANT_PARAMETER, NONFINITE_LOSS, LOSS_DIVERGING, LOSS_NOT_DECREASING, LOSS_OSCILLATING,
         LOSS_SUSPICIOUSLY_LOW, NONFINITE_TENSOR, VANISHING_GRADIENT, EXPLODING_GRADIENT, WEIGHTS_NOT_UPDATING,
         UPDATE_RATIO_TOO_SMALL, UPDATE_RATIO_TOO_LARGE, DEAD_RELU, SATURATED_ACTIVATION, LOSS_SCALE_OVERFLOW,
         UNEXPECTED_INITIAL_LOSS, ACTIVATION_EXPLODING)
"""The family's rules, in code order."""

_RUN_ORDER: tuple[Rule, ...] = tuple(sorted(RULES, key=lambda r: (not r.code.startswith("MSD2"), r.code)))
"""The training-signal codes (MSD2xx) in code order, then the dynamic part of a layer code (MSD115)."""

#: (codes, rule) in the order they run; the callback disables one pair if it raises (MSD001).
TRAINING_RULES: list[tuple[tuple[str, ...], TrainingRule]] = [((r.code,), r.judged_by) for r in _RUN_ORDER]

#: Rules that need the in-graph probes (skipped, MSD002, in sink mode or when probes cannot be installed).
PROBE_CODES = tuple(r.code for r in _RUN_ORDER if r.probe is not None)
#: The probe rules that read the optimizer's probe (gradients, updates), and those that read the activation samples.
PARAMETER_PROBE_CODES = tuple(r.code for r in _RUN_ORDER if r.probe == "optimizer")
ACTIVATION_PROBE_CODES = tuple(r.code for r in _RUN_ORDER if r.probe == "activations")


def probes_needed(config: DoctorConfig) -> dict[str, int]:
    """How many probed steps, step 1 included, each probe rule needs before it can judge anything (MSD206/216 judge
    a single probe)."""
    return {r.code: r.probes_needed(config) for r in _RUN_ORDER if r.probes_needed is not None}


def too_few_probes(history: TrainingHistory, config: DoctorConfig, codes: Iterable[str]) -> list[Finding]:
    """MSD002 at the end of training: the probe rules among ``codes`` that never judged, because the run took fewer
    probed steps than they need (``probes.not_judged``)."""
    wanted = set(codes)
    return not_judged(history, config, {code: n for code, n in probes_needed(config).items() if code in wanted})


#: The finding lifecycle: each transient code and the rule that reports which of its findings still hold at the
#: end of a history. The probe rules judge the latest probes already; the loss rules, which report the first
#: window anywhere, get their "now" form (``Rule.judge_current``).
CURRENT_RULES: dict[str, TrainingRule] = {r.code: r.current for r in _RUN_ORDER if r.current is not None}
