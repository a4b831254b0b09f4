"""The stable finding codes, gathered from the rule definitions (mirror of shared/CATALOG.md).

Each code is defined once, by its rule (``mindspore_doctor.rule.Rule`` in a ``rules/`` module); this module only
collects them. Codes and slugs are a public contract: tests, ``--select/--ignore``, suppressions and dashboards key
on them. Never renumber or reuse a code; add new ones at the end of their group.
"""
from __future__ import annotations

from typing import Any

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import DOCTOR_RULES, Option, Rule
from mindspore_doctor.rules import (adversarial, data, distributed, evaluation, graph, layers, parameters, training,
                                    tuning)

FAMILIES = (parameters, layers, graph, training, adversarial, data, evaluation, tuning, distributed)
"""The rule modules, each defining its codes in ``RULES``."""

RULES: dict[str, Rule] = {r.code: r for r in sorted(DOCTOR_RULES + tuple(r for m in FAMILIES for r in m.RULES),
                                                     key=lambda r: r.code)}


def _rule_options() -> dict[str, Option]:
    """Every option a rule reads, once, in code order; an option shared by several rules is one object."""
    options: dict[str, Option] = {}
    for entry in RULES.values():
        for option in entry.options:
            if options.setdefault(option.name, option) is not option:
                raise RuntimeError(f"option {option.name} is defined twice ({entry.code})")
    return options


RULE_OPTIONS = _rule_options()


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


def make_finding(code: str, message: str, **details: Any) -> Finding:
    """A finding of the rule ``code`` (see ``Rule.finding``): for the runners, which report several codes."""
    return RULES[code].finding(message, **details)

