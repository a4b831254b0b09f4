"""The stable finding codes (mirror of shared/CATALOG.md).

Codes and slugs are a public contract: tests, ``--select/--ignore``,
suppressions and dashboards key on them. Never renumber or reuse a code; add
new ones at the end of their group.
"""
from __future__ import annotations

from dataclasses import dataclass

from typing import Any

from mindspore_doctor.findings import Finding, Severity


@dataclass(frozen=True)
class Rule:
    code: str
    slug: str
    severity: Severity
    summary: str

    @property
    def doc_path(self) -> str:
        return f"docs/rules/{self.code}.md"


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

RULES: dict[str, Rule] = {
    r.code: r
    for r in (
        # MSD0xx: the doctor itself
        Rule("MSD001", "internal-error", _W, "a check raised; it is disabled, training continues"),
        Rule("MSD002", "check-skipped", _I, "a check could not run in this setting"),
        Rule("MSD003", "training-interrupted", _E, "training ended by an exception or a signal; the report holds "
             "what was seen up to then"),
        # MSD1xx: static
        Rule("MSD101", "shared-parameter", _W, "one Parameter reachable under several cell paths"),
        Rule("MSD102", "frozen-parameter", _W, "weight frozen or not held by the optimizer"),
        Rule("MSD103", "foreign-optimizer-parameter", _E, "optimizer holds parameters not in the network"),
        Rule("MSD104", "dropout-rate-suspicious", _W, "Dropout drops more than half its inputs"),
        Rule("MSD105", "train-mode-misuse", _W, "train/eval mode wrong for the phase, or BatchNorm fixed against it"),
        Rule("MSD106", "unsafe-division", _W, "division whose denominator can be zero"),
        Rule("MSD107", "loss-activation-mismatch", _E, "probabilities fed to a logits loss, or the reverse"),
        Rule("MSD108", "zero-initialized-weight", _E, "weight all zeros or constant at init"),
        Rule("MSD109", "poor-initialization", _W, "weight init scale far from He/Glorot"),
        Rule("MSD110", "disconnected-cell", _W, "cell or parameter not on the path to the loss"),
        Rule("MSD111", "learning-rate-out-of-range", _W, "learning rate outside a sane range"),
        Rule("MSD112", "loss-scale-misconfigured", _W, "loss scale inconsistent with mixed precision"),
        Rule("MSD113", "softmax-wrong-axis", _E, "Softmax over the batch axis"),
        Rule("MSD114", "silent-broadcast", _E, "loss inputs broadcast to a larger shape"),
        Rule("MSD115", "redundant-parameter", _I, "bias/beta whose effect a following normalization removes"),
        Rule("MSD116", "weight-decay-out-of-range", _W, "weight decay far outside the usual range"),
        # MSD2xx: training signals
        Rule("MSD201", "nonfinite-loss", _E, "loss is NaN or Inf"),
        Rule("MSD202", "loss-diverging", _E, "loss grows far above its running minimum"),
        Rule("MSD203", "loss-not-decreasing", _W, "loss does not improve over a window"),
        Rule("MSD204", "loss-oscillating", _W, "large sign-alternating loss swings"),
        Rule("MSD205", "loss-suspiciously-low", _W, "loss near zero within the first steps"),
        Rule("MSD206", "nonfinite-tensor", _E, "NaN/Inf in a gradient, weight or activation"),
        Rule("MSD207", "vanishing-gradient", _W, "gradients vanish in a layer"),
        Rule("MSD208", "exploding-gradient", _E, "global gradient norm explodes"),
        Rule("MSD209", "weights-not-updating", _W, "weight unchanged across steps"),
        Rule("MSD210", "update-ratio-too-small", _W, "updates tiny relative to weights"),
        Rule("MSD211", "update-ratio-too-large", _W, "updates large relative to weights"),
        Rule("MSD212", "dead-relu", _W, "ReLU outputs almost all zero"),
        Rule("MSD213", "saturated-activation", _W, "Sigmoid/Tanh outputs in the flat tails"),
        Rule("MSD214", "loss-scale-overflow", _W, "loss-scale overflow on many steps"),
        Rule("MSD215", "unexpected-initial-loss", _W, "first loss far from ln(num_classes)"),
        Rule("MSD216", "activation-exploding", _W, "activations large and growing through the network"),
        Rule("MSD217", "discriminator-overpowers-generator", _W, "a GAN's discriminator loss collapses to ~0 while "
             "the generator's grows: the generator gets no useful signal"),
        Rule("MSD218", "real-fake-range-mismatch", _W, "a GAN's real samples and the generator's output span different "
             "ranges: the discriminator can tell them apart by range alone"),
        # MSD3xx: data
        Rule("MSD301", "nonfinite-input", _E, "NaN/Inf in inputs or labels"),
        Rule("MSD302", "class-imbalance", _W, "largest/smallest class count ratio too high"),
        Rule("MSD303", "input-outliers", _I, "samples far outside the bulk"),
        Rule("MSD304", "input-not-normalized", _W, "inputs not normalised"),
        Rule("MSD305", "data-not-shuffled", _W, "label order correlated with position"),
        Rule("MSD306", "label-out-of-range", _E, "labels outside the model output range"),
        Rule("MSD307", "too-few-samples", _W, "too few samples for the model size"),
        Rule("MSD308", "train-eval-mismatch", _W, "train and eval inputs differ in distribution"),
        Rule("MSD309", "train-eval-leakage", _E, "the same samples in train and eval"),
        Rule("MSD310", "constant-feature", _W, "a feature or channel with a single value"),
        # MSD4xx: evaluation and sanity
        Rule("MSD401", "overfitting", _W, "eval loss rising while train loss falls"),
        Rule("MSD402", "underfitting", _W, "train metric close to a trivial baseline"),
        Rule("MSD403", "cannot-overfit-batch", _E, "model cannot fit one small batch"),
        Rule("MSD404", "worse-than-baseline", _E, "metric not better than a trivial predictor"),
        Rule("MSD405", "mode-switch-inconsistency", _W, "outputs change drastically between modes"),
        Rule("MSD406", "tuning-optimistic-best", _W, "best of many trials scored on one small validation set"),
        # MSD5xx: distributed
        Rule("MSD501", "rank-init-mismatch", _E, "initial parameters differ across ranks"),
        Rule("MSD502", "rank-divergence", _E, "parameters drift apart across ranks"),
        Rule("MSD503", "rank-data-duplication", _W, "ranks read the same samples"),
    )
}


def rule(code: str) -> Rule:
    """The catalog entry for ``code`` (KeyError for an unknown code)."""
    return RULES[code]


def resolve_codes(selectors: list[str] | tuple[str, ...]) -> set[str]:
    """Expand selectors like ``MSD104``, ``MSD1`` (prefix) or ``dropout-rate-suspicious``."""
    out: set[str] = set()
    for sel in selectors:
        sel = sel.strip()
        if not sel:
            continue
        matched = {c for c, r in RULES.items() if c.startswith(sel.upper()) or r.slug == sel}
        if not matched:
            raise ValueError(f"unknown rule code or prefix: {sel!r}")
        out |= matched
    return out


def make_finding(
    code: str,
    message: str,
    *,
    location: dict[str, Any] | None = None,
    evidence: dict[str, Any] | None = None,
    suggestion: str = "",
    step: int | None = None,
    severity: "Severity | str | None" = None,
) -> Finding:
    """Build a Finding whose slug and default severity come from the catalog."""
    entry = RULES[code]
    return Finding(
        code=code,
        rule=entry.slug,
        severity=Severity.parse(severity) if severity is not None else entry.severity,
        message=message,
        location={k: v for k, v in (location or {}).items() if v is not None},
        step=step,
        evidence=dict(evidence or {}),
        suggestion=suggestion,
    )
