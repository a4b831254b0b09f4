"""MSD311: labels that confident learning says are wrong, judged on ``LabelReport``s (``analysis/labels.py``).

Unlike the other data rules this one does not read the ``DataSignals`` of a dataset sample: it reads the per-sample
probabilities the model produced once it has trained (the evaluation set at each evaluation, a fixed training sample
along training, or K-fold out-of-sample probabilities), turned into a ``LabelReport`` by cleanlab. So it is in the
catalog but not among the data checks' ``JUDGES``; ``label_error_findings`` is called where the reports are made.

Noise-aware: every real dataset has a few ambiguous samples that confident learning flags (scikit-learn's digits
as shipped: about 1.5 % estimated, 27 flagged by the anchor recipe), so the rule warns only when the estimated share
of wrong labels and the number of flagged samples both pass their thresholds, on enough scored samples.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mindspore_doctor._io import LABEL_ISSUES_FILE
from mindspore_doctor.analysis.labels import LabelReport
from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import Option, Rule, WARNING

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


SOURCES = {
    "eval": "the evaluation set",
    "train-sample": "the training sample scored along training",
    "folds": "the training set (out-of-fold probabilities)",
}

LABEL_NOISE_MIN_RATE = Option(
    "label_noise_min_rate", 0.03,
    "MSD311: warn only when cleanlab's estimated share of wrong labels is above this (the label-noise benchmark: "
    "digits, wine and breast_cancer as shipped estimate at most about 0.02, 5 % injected noise 0.05 or more).",
)
LABEL_NOISE_MIN_FLAGGED = Option(
    "label_noise_min_flagged", 10,
    "MSD311: and when at least this many samples are flagged.",
)
LABEL_NOISE_MIN_SAMPLES = Option(
    "label_noise_min_samples", 100,
    "MSD311: the least number of scored samples the estimate is judged on (fewer: no finding).",
)
LABEL_NOISE_MIN_SHARE = Option(
    "label_noise_min_share", 0.5,
    "MSD311: and when the estimated wrong labels account for at least this share of the samples whose most likely "
    "class is not their label (the rest is the model's own error): a weak or overconfident model's mistakes are "
    "not label errors (a clean 10-class set scored by a 66 %-accurate model: cleanlab estimates 15 %, 0.44 of its "
    "34 % disagreement; clean overlapping classes, 256 eval samples under an 89 %-accurate model: 0.19 to 0.40 over "
    "22 seeds on the mean of the evaluations' probabilities, up to 0.5 on the last evaluation's alone; 5 % flipped "
    "labels under a good model: 0.66, 10 %: 0.55 (wine) to 1).",
)
LABEL_NOISE_MIN_AGREEMENT = Option(
    "label_noise_min_agreement", 0.5,
    "MSD311: and when the model's agreement with the given labels (the share of samples whose most likely class is "
    "their label) covers at least this share of the way from the majority class's share to 1 (10 balanced classes: "
    "0.55, a balanced binary task: 0.75): a model no better than always predicting the majority class says nothing "
    "about labels (a linear model at chance on a binary task: cleanlab estimates 50 % of the labels wrong).",
)
LABEL_ERRORS = Rule(
    "MSD311", "label-errors", WARNING,
    "confident learning estimates that a share of the labels is wrong",
    options=(LABEL_NOISE_MIN_RATE, LABEL_NOISE_MIN_FLAGGED, LABEL_NOISE_MIN_SAMPLES, LABEL_NOISE_MIN_SHARE,
             LABEL_NOISE_MIN_AGREEMENT),
)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _least_agreement(report: LabelReport, share: float) -> float:
    """The agreement a model must reach to judge labels: ``share`` of the way from the majority class's share of
    the samples (what always predicting it agrees on) to 1."""
    supports = [c.support for c in report.per_class]
    majority = max(supports) / sum(supports) if supports and sum(supports) else 0.0
    return majority + share * (1.0 - majority)


@LABEL_ERRORS.judge
def label_errors(report: LabelReport, config: DoctorConfig) -> list[Finding]:
    """MSD311 on one report: a warning when at least ``label_noise_min_samples`` samples were scored, the estimated
    noise rate is above ``label_noise_min_rate``, at least ``label_noise_min_flagged`` samples are flagged, and the
    model is good enough for its probabilities to judge labels: its agreement with the given labels covers at least
    ``label_noise_min_agreement`` of the way from the majority class's share to 1, and the estimated wrong labels account for at least
    ``label_noise_min_share`` of its disagreements with the labels."""
    flagged = len(report.flagged)
    if (report.samples < config.label_noise_min_samples or report.noise_rate <= config.label_noise_min_rate
            or flagged < config.label_noise_min_flagged):
        return []
    if report.agreement is not None:
        disagreement = 1.0 - report.agreement
        if (report.agreement < _least_agreement(report, config.label_noise_min_agreement)
                or report.noise_rate < config.label_noise_min_share * disagreement):
            return []
    source = SOURCES.get(report.source, report.source)
    pairs = [p for p in report.swapped if p.count > 0][:3]
    swapped = "; most swapped: " + ", ".join(f"{p.given} -> {p.likely}: {p.count} samples" for p in pairs) if pairs \
        else ""
    worst = sorted(report.per_class, key=lambda c: -c.noise_rate)[:3]
    top = report.flagged[:5]
    evidence = {
        "source": report.source, "method": report.method, "samples": report.samples, "classes": report.classes,
        "noise_rate": report.noise_rate, "flagged": flagged, "flagged_rate": report.flagged_rate,
        "agreement": report.agreement,
        "swapped": [{"given": p.given, "likely": p.likely, "count": p.count, "rate": p.rate} for p in pairs],
        "noisiest_classes": [{"label": c.label, "support": c.support, "noise_rate": c.noise_rate} for c in worst],
        "top_suspects": [{"position": s.position, "given": s.given, "likely": s.likely, "quality": s.quality}
                         for s in top],
        "positions": report.positions, "file": LABEL_ISSUES_FILE,
        "label_noise_min_rate": config.label_noise_min_rate, "label_noise_min_flagged": config.label_noise_min_flagged,
    }
    first = ", ".join(f"{s.position} ({s.given}, likely {s.likely})" for s in top[:3])
    folds = "" if report.source == "folds" else (
        " `msdoctor labels pkg.module:build --data pkg.module:make_data --folds 5` scores the whole training set "
        "out of sample.")
    return [LABEL_ERRORS.finding(
        f"Labels of {source} look wrong: cleanlab estimates {_pct(report.noise_rate)} of its {report.samples} "
        f"labels wrong and flags {flagged}{swapped}. Most suspect positions ({report.positions}): {first}. "
        f"Every flagged sample is in {LABEL_ISSUES_FILE}.",
        location={"dataset": report.source, "check": "label-errors"}, evidence=evidence,
        suggestion=f"Look at the most suspect samples in {LABEL_ISSUES_FILE} (most suspect first) and fix or drop "
        "the wrong labels; a swapped pair that recurs points at a labelling rule to clarify. If the labels are "
        "right, these are the samples the model confuses (see the error analysis)." + folds,
    )]


def label_error_findings(reports: list[LabelReport], config: DoctorConfig) -> list[Finding]:
    """MSD311 over every report of a run (the eval set, the training sample, the folds)."""
    return [f for report in reports for f in label_errors(report, config)]
