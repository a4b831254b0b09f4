"""What a rule is: one definition per finding code, read by everything else.

A rule module (``rules/*``) defines each of its codes once, as a ``Rule``: the stable code and slug, the default
severity, a one-line summary, the options (thresholds) it reads with their defaults and docs, and the function that
judges it. The catalog (``catalog.RULES``, ``msdoctor rules``), the configuration (``DoctorConfig``'s fields and the
``[tool.msdoctor]`` keys), the training registries and the lint and data checks are all derived from these
definitions; ``tests/test_rule_consistency.py`` holds the docs pages and the knowledge base to them.

This module sits at the bottom of the package: plain data, no MindSpore.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from mindspore_doctor.findings import Finding, Severity

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


class CheckSkipped(Exception):
    """Raised by a check or a rule that cannot judge here; the message says why (it becomes MSD002)."""


@dataclass(frozen=True)
class Option:
    """One field of ``DoctorConfig``: its name, default and the sentence that documents it."""

    name: str
    default: Any
    doc: str
    type: Any = None
    """The field's annotation; None: the default's type."""

    @property
    def annotation(self) -> Any:
        return self.type if self.type is not None else type(self.default)


@dataclass(eq=False)
class Rule:
    """One finding code, defined once.

    ``options``: the ``DoctorConfig`` fields the rule reads (an option several rules read is defined once, by the
    first of them, and listed by the others). ``probe``: which in-graph probe a training rule reads, ``"optimizer"``
    (gradients and updates), ``"activations"`` or ``"any"``; a rule that needs one is skipped (MSD002) where the
    probes cannot run. ``probes_needed``: how many probed steps, step 1 included, it needs before it can judge.
    ``transient``: its condition can pass, and ``current`` reports which of its findings still hold at the end.
    """

    code: str
    slug: str
    severity: Severity
    summary: str
    options: tuple[Option, ...] = ()
    probe: str | None = None
    probes_needed: Callable[[Any], int] | None = None
    transient: bool = False
    _judge: Callable[..., list[Finding]] | None = field(default=None, repr=False)
    _current: Callable[..., list[Finding]] | None = field(default=None, repr=False)

    @property
    def doc_path(self) -> str:
        return f"docs/rules/{self.code}.md"

    def judge(self, function: Callable[..., list[Finding]]) -> Callable[..., list[Finding]]:
        """Decorator: ``function`` judges this rule."""
        self._judge = function
        return function

    def judge_current(self, function: Callable[..., list[Finding]]) -> Callable[..., list[Finding]]:
        """Decorator: ``function`` reports which of this transient rule's findings still hold at the end of a run
        (by default, its judge does)."""
        self._current = function
        return function

    @property
    def judged_by(self) -> Callable[..., list[Finding]]:
        if self._judge is None:
            raise LookupError(f"{self.code} has no judge")
        return self._judge

    @property
    def current(self) -> Callable[..., list[Finding]] | None:
        return self._current or (self._judge if self.transient else None)

    def finding(
        self,
        message: str,
        *,
        location: dict[str, Any] | None = None,
        evidence: dict[str, Any] | None = None,
        suggestion: str = "",
        step: int | None = None,
        severity: "Severity | str | None" = None,
    ) -> Finding:
        """A finding of this rule (its slug and, unless given, its default severity)."""
        return Finding(
            code=self.code,
            rule=self.slug,
            severity=Severity.parse(severity) if severity is not None else self.severity,
            message=message,
            location={k: v for k, v in (location or {}).items() if v is not None},
            step=step,
            evidence=dict(evidence or {}),
            suggestion=suggestion,
        )


# The doctor's own codes: every layer reports them, so they are defined at the bottom.
INTERNAL_ERROR = Rule("MSD001", "internal-error", WARNING, "a check raised; it is disabled, training continues")
CHECK_SKIPPED = Rule("MSD002", "check-skipped", INFO, "a check could not run in this setting")
TRAINING_INTERRUPTED = Rule("MSD003", "training-interrupted", ERROR,
                            "training ended by an exception or a signal; the report holds what was seen up to then")
DOCTOR_RULES = (INTERNAL_ERROR, CHECK_SKIPPED, TRAINING_INTERRUPTED)
