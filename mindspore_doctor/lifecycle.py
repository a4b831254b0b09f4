"""The finding lifecycle: a transient training finding whose condition passes ends the run as resolved.

The Doctor logs a finding, and ``stop_on`` acts on it, when it is first detected. Some conditions pass: a
warm-up spike the loss recovers from, an initial plateau the loss leaves, a layer whose updates pick up. At
every rule evaluation the Doctor tells the lifecycle which findings of the transient codes still hold; at the
end of training those that no longer do are kept, as ``info``, with ``evidence.resolved_step`` and
``evidence.original_severity`` (``Finding.resolve``). Pure bookkeeping over findings: no MindSpore here.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from mindspore_doctor.findings import Finding, Report


class Lifecycle:
    """Which transient findings still hold, observed at each rule evaluation and applied to the report at the end."""

    def __init__(self, transient: Iterable[str]) -> None:
        """``transient``: the codes whose conditions can pass (``rules.training.CURRENT_RULES``)."""
        self.transient = frozenset(transient)
        self._since: dict[tuple, int] = {}
        """Finding key -> first evaluated step of its current stretch of not holding."""
        self._acted: set[tuple] = set()
        """Findings that stopped training: they keep the severity that was acted on."""
        self._changes = 0
        self._episodes: tuple[tuple[int, int], dict[str, float]] = ((-1, -1), {})

    def observe(self, step: int, findings: Iterable[Finding], holding: Mapping[str, Iterable[Finding]]) -> None:
        """``holding``: for each code judged at ``step``, its findings whose condition holds there."""
        held = {f.key for found in holding.values() for f in found}
        self._changes += 1
        for f in findings:
            if f.code not in self.transient or f.code not in holding:
                continue  # not transient, or not judged this time (rule switched off): unchanged
            if f.key in held:
                self._since.pop(f.key, None)
            else:
                self._since.setdefault(f.key, step)

    def acted_on(self, finding: Finding) -> None:
        """``finding`` stopped training (``stop_on``): it is never resolved afterwards."""
        self._acted.add(finding.key)
        self._changes += 1

    def resolved_at(self, finding: Finding) -> int | None:
        """The step from which ``finding``'s condition no longer held, or None while it holds (or cannot pass)."""
        if finding.key in self._acted or finding.code not in self.transient:
            return None
        return self._since.get(finding.key)

    def episodes(self, report: Report) -> dict[str, float]:
        """``findings/<code>/open`` and ``findings/<code>/resolved``: per transient code, its findings that hold
        now and those that passed (MindInsight series of the episodes). Cached: called on every step."""
        if self._episodes[0] == (len(report.findings), self._changes):
            return self._episodes[1]
        scalars: dict[str, float] = {}
        for f in report.findings:
            if f.code not in self.transient:
                continue
            passed = f.resolved or self.resolved_at(f) is not None
            for state in ("open", "resolved"):
                scalars.setdefault(f"findings/{f.code}/{state}", 0.0)
            scalars[f"findings/{f.code}/{'resolved' if passed else 'open'}"] += 1.0
        self._episodes = ((len(report.findings), self._changes), scalars)
        return scalars

    def close(self, report: Report) -> list[Finding]:
        """Resolve every transient finding of ``report`` whose condition no longer held at the last evaluation."""
        resolved = []
        for f in report.findings:
            step = self.resolved_at(f)
            if step is not None and not f.resolved:
                f.resolve(step)
                resolved.append(f)
        self._changes += 1
        return resolved
