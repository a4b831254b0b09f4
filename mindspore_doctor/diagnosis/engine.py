"""Rank the causes of the knowledge base by the findings of a report.

The engine only evaluates the data in ``knowledge.py``: a symptom matches when
its code is in the report and its named predicate holds on that code's
findings; a cause's score is the sum of its matched symptom weights. A cause proposed that way and naming the
error-budget term that dominates the run's budget (``report.meta["error_budget"]``) gains ``BUDGET_WEIGHT`` and the
guide's remedies for that term. Only a measured term dominates (``analysis.budget``): a bound (the avoidable bias
without ``target_error``) supports no cause.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from mindspore_doctor.catalog import RULES
from mindspore_doctor.diagnosis.knowledge import CAUSES, Cause, Symptom
from mindspore_doctor.findings import Finding, Report, diagnosis_text

NOT_SYMPTOMS = ("MSD001", "MSD002", "MSD003")
BUDGET_WEIGHT = 2.0
"""What a dominant error-budget term adds to the cause that explains it (``Cause.budget_term``)."""
BUDGET_EVIDENCE = "error budget"
"""The ``code`` of the evidence entry a dominant budget term adds (not a finding code)."""


@dataclass
class _Context:
    by_code: dict[str, list[Finding]]
    weight_layers: list[str] | None
    """Names of the trainable weight parameters (denominator of layer fractions), when known."""
    budget: dict[str, Any] | None = None
    """The run's error budget (``analysis.budget.error_budget``), when there is one."""


def _cell_of(finding: Finding) -> str | None:
    loc = finding.location
    if loc.get("cell"):
        return str(loc["cell"])
    parameter = loc.get("parameter")
    return str(parameter).rsplit(".", 1)[0] if parameter else None


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# --- predicates: (findings of the code, argument, context) -> detail when it holds, else None ---------


def _step_at_most(found: list[Finding], limit: int, ctx: _Context) -> str | None:
    steps = [f.step for f in found if f.step is not None]
    return f"at step {min(steps)}" if steps and min(steps) <= limit else None


def _step_after(found: list[Finding], limit: int, ctx: _Context) -> str | None:
    steps = [f.step for f in found if f.step is not None]
    return f"at step {min(steps)}" if steps and min(steps) > limit else None


def _layer_fraction_at_least(found: list[Finding], fraction: float, ctx: _Context) -> str | None:
    flagged = {str(f.location.get("parameter")) for f in found if f.location.get("parameter")}
    if ctx.weight_layers:
        total = set(ctx.weight_layers)
        share = len(flagged & total) / len(total)
        return f"on {share:.0%} of the weight layers ({len(flagged & total)}/{len(total)})" if share >= fraction else None
    return f"on {len(flagged)} layers" if len(flagged) >= 2 else None  # denominator unknown: several layers


def _cells_at_most(found: list[Finding], limit: int, ctx: _Context) -> str | None:
    cells = {c for c in (_cell_of(f) for f in found) if c is not None}
    if not cells or len(cells) > limit:
        return None
    return "on " + ", ".join(f"`{c}`" for c in sorted(cells))


def _range_bound(found: list[Finding], key: str, index: int, below: bool) -> str | None:
    for f in found:
        value, bounds = _number(f.evidence.get(key)), f.evidence.get("range")
        bound = _number(bounds[index]) if isinstance(bounds, (list, tuple)) and len(bounds) == 2 else None
        if value is not None and bound is not None and (value < bound if below else value > bound):
            return f"{key}={value:g} {'below' if below else 'above'} {bound:g}"
    return None


def _evidence_below_range(found: list[Finding], key: str, ctx: _Context) -> str | None:
    return _range_bound(found, key, 0, below=True)


def _evidence_above_range(found: list[Finding], key: str, ctx: _Context) -> str | None:
    return _range_bound(found, key, 1, below=False)


def _evidence_greater(found: list[Finding], keys: tuple[str, str], ctx: _Context) -> str | None:
    left, right = keys
    for f in found:
        a, b = _number(f.evidence.get(left)), _number(f.evidence.get(right))
        if a is not None and b is not None and a > b:
            return f"{left}={a:.3g} > {right}={b:.3g}"
    return None


def _evidence_ratio_at_least(found: list[Finding], spec: tuple[str, str, float], ctx: _Context) -> str | None:
    top, bottom, factor = spec
    for f in found:
        a, b = _number(f.evidence.get(top)), _number(f.evidence.get(bottom))
        if a is not None and b is not None and b > 0 and a / b >= factor:
            return f"{top}={a:.3g} is {a / b:.3g}x {bottom}={b:.3g}"
    return None


PREDICATES: dict[str, Callable[[list[Finding], Any, _Context], str | None]] = {
    "step_at_most": _step_at_most,
    "step_after": _step_after,
    "layer_fraction_at_least": _layer_fraction_at_least,
    "cells_at_most": _cells_at_most,
    "evidence_below_range": _evidence_below_range,
    "evidence_above_range": _evidence_above_range,
    "evidence_greater": _evidence_greater,
    "evidence_ratio_at_least": _evidence_ratio_at_least,
}


def _match(symptom: Symptom, ctx: _Context, still_open: bool = False) -> str | None:
    """A short description of how the symptom showed, or None when it did not. ``still_open``: judge only the
    findings whose condition still held at the end (not those the finding lifecycle resolved)."""
    found = [f for f in ctx.by_code.get(symptom.code, []) if not (still_open and f.resolved)]
    if not found:
        return None
    if symptom.predicate is None:
        detail = f"{len(found)} finding(s)" if len(found) > 1 else "present"
    else:
        detail = PREDICATES[symptom.predicate](found, symptom.argument, ctx)
    if detail is not None and all(f.resolved for f in found):
        detail += f" (resolved by step {max(f.evidence['resolved_step'] for f in found)})"
    return detail


# --- results ------------------------------------------------------------------------------------------


@dataclass
class RankedCause:
    id: str
    title: str
    category: str
    score: float
    confidence: float
    """Matched weight over the cause's total positive weight (0..1)."""
    explanation: str
    evidence: list[dict[str, Any]]
    """Matched symptoms: code, weight, detail (negative weights spoke against the cause)."""
    remedies: list[str]

    @property
    def evidence_codes(self) -> list[str]:
        return sorted({e["code"] for e in self.evidence if e["weight"] > 0 and e["code"] != BUDGET_EVIDENCE})

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "title": self.title, "category": self.category, "score": round(self.score, 3),
            "confidence": round(self.confidence, 3), "explanation": self.explanation,
            "evidence_codes": self.evidence_codes, "evidence": self.evidence, "remedies": self.remedies,
        }


@dataclass
class Diagnosis:
    symptoms: list[dict[str, Any]] = field(default_factory=list)
    causes: list[RankedCause] = field(default_factory=list)

    @property
    def top(self) -> RankedCause | None:
        return self.causes[0] if self.causes else None

    def cause_ids(self) -> list[str]:
        return [c.id for c in self.causes]

    def to_dict(self) -> dict[str, Any]:
        return {"symptoms": self.symptoms, "causes": [c.to_dict() for c in self.causes]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Diagnosis":
        """Back from ``to_dict`` (e.g. the ``diagnosis`` section of a saved report)."""
        names = RankedCause.__dataclass_fields__.keys()
        causes = [RankedCause(**{k: v for k, v in c.items() if k in names}) for c in data.get("causes", [])]
        return cls(symptoms=list(data.get("symptoms", [])), causes=causes)

    def to_text(self, width: int = 100, limit: int = 5) -> str:
        return diagnosis_text(self.to_dict(), width, limit)

    def __str__(self) -> str:
        return self.to_text()


def _symptoms(by_code: dict[str, list[Finding]]) -> list[dict[str, Any]]:
    out = []
    for code, found in sorted(by_code.items()):
        steps = [f.step for f in found if f.step is not None]
        out.append({
            "code": code,
            "rule": RULES[code].slug if code in RULES else found[0].rule,
            "count": len(found),
            "resolved": sum(1 for f in found if f.resolved),
            "first_step": min(steps) if steps else None,
            "locations": sorted({f.where for f in found})[:8],
        })
    return out


def _score(cause: Cause, ctx: _Context) -> RankedCause | None:
    matched = [(s, detail) for s in cause.symptoms if (detail := _match(s, ctx)) is not None]
    # A cause needs a key symptom that still holds: one that passed (a warm-up spike the loss recovered from)
    # supports a cause, but is not one on its own.
    if not any(s.key and s.weight > 0 and _match(s, ctx, still_open=True) is not None for s, _ in matched):
        return None
    score = sum(s.weight for s, _ in matched)
    possible = sum(s.weight for s in cause.symptoms if s.weight > 0)
    evidence = [{"code": s.code, "weight": s.weight, "detail": detail} for s, detail in matched]
    remedies = list(cause.remedies)
    if cause.budget_term is not None and ctx.budget and _measured_row(cause.budget_term, ctx.budget):
        possible += BUDGET_WEIGHT  # a term the budget could not measure (a bound, no holdout) costs no confidence
        support = _budget_support(cause.budget_term, ctx.budget)
        if support is not None:
            weight, detail = support
            score += weight
            evidence.append({"code": BUDGET_EVIDENCE, "weight": weight, "detail": detail})
            guide = [str(r) for r in ctx.budget.get("remedies") or ()]
            remedies = guide + [r for r in remedies if r not in guide]
    if score <= 0:
        return None
    return RankedCause(
        id=cause.id, title=cause.title, category=cause.category, score=round(score, 3),
        confidence=max(0.0, min(1.0, score / possible)), explanation=cause.explanation,
        evidence=evidence, remedies=remedies,
    )


def _measured_row(term: str, budget: dict[str, Any]) -> dict[str, Any] | None:
    """The budget's row of ``term`` when it is measured (a value, not a bound): only then can it dominate."""
    row = next((r for r in budget.get("rows", ()) if r.get("term") == term), {})
    return row if row.get("bound") is None and _number(row.get("value")) is not None else None


def _budget_support(term: str, budget: dict[str, Any]) -> tuple[float, str] | None:
    """(``BUDGET_WEIGHT``, detail) when ``term`` dominates the budget with a measured value; None otherwise. A
    bound (a budget written before bounds stopped dominating) is no evidence: "at most the train error" holds for a
    healthy run too."""
    row = _measured_row(term, budget)
    if budget.get("dominant") != term or row is None:
        return None
    value = _number(row["value"])
    shown = f"{value:.1%}" if budget.get("metric") == "error" else f"{value:.4g}"
    return BUDGET_WEIGHT, f"{term} dominates the error budget ({shown})"


def weight_layers_of(history: Any) -> list[str] | None:
    """Weight (rank >= 2) parameters of a ``TrainingHistory``, in network order; None when unknown."""
    order = list(getattr(history, "parameter_order", None) or [])
    if not order:
        return None
    shapes = getattr(history, "parameter_shapes", None) or {}
    return [n for n in order if len(shapes.get(n, (0, 0))) >= 2]


def diagnose(report: Report | Iterable[Finding], history: Any = None,
             weight_layers: Sequence[str] | None = None, causes: Sequence[Cause] = CAUSES,
             budget: dict[str, Any] | None = None) -> Diagnosis:
    """Symptoms of ``report`` and the causes they point to, best-supported first.

    ``history`` (a ``TrainingHistory``) or ``weight_layers`` gives the weight
    layers, so "MSD210 on >= 80 % of the layers" can be judged; without them a
    symptom on several layers counts as widespread. ``budget``: the run's error
    budget (default: ``report.meta["error_budget"]``); its dominant term
    supports the causes that explain it.
    """
    findings = report.findings if isinstance(report, Report) else list(report)
    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        if f.code not in NOT_SYMPTOMS:
            by_code.setdefault(f.code, []).append(f)
    layers = list(weight_layers) if weight_layers is not None else weight_layers_of(history)
    if budget is None and isinstance(report, Report):
        budget = report.meta.get("error_budget")
    ctx = _Context(by_code, layers, budget if isinstance(budget, dict) else None)
    ranked = [r for r in (_score(c, ctx) for c in causes) if r is not None]
    ranked.sort(key=lambda r: (-r.score, -r.confidence, r.id))
    return Diagnosis(symptoms=_symptoms(by_code), causes=ranked)
