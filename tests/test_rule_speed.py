"""Issue 26: the training rules made cheap per probe step still find exactly what they found before.

``tests/data/training_rule_outputs.json`` holds what every rule of ``TRAINING_RULES`` and ``CURRENT_RULES`` found on
varied histories (random-walk, oscillating, diverging, plateaued losses, NaN at a step, exploding and vanishing
gradients, frozen, tiny, large updates, dead and saturated activations, ...), and what a ``DoctorSession`` replaying
them reported, lifecycle included; it was recorded from the rules before issue 26 by
``tests/data/training_rule_cases.py`` (seed ``SEED`` there). Here the same histories are judged again: same codes,
steps, messages, locations, evidence (every float to the last bit), suggestions, occurrences and resolutions.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import math
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).parent / "data" / "training_rule_cases.py"
_spec = importlib.util.spec_from_file_location("training_rule_cases", _PATH)
cases_module = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("training_rule_cases", cases_module)
_spec.loader.exec_module(cases_module)

FIXTURE = json.loads(cases_module.FIXTURE.read_text())
CASES = list(cases_module.cases())


def _plain(value, where="evidence"):
    """Evidence holds plain Python numbers, as before: no numpy scalar leaks out of a vectorised rule."""
    if isinstance(value, dict):
        for k, v in value.items():
            _plain(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _plain(v, f"{where}[{i}]")
    else:
        assert type(value) in (int, float, bool, str, type(None)), f"{where}: {type(value).__name__}"


def test_the_fixture_covers_every_training_rule_and_its_lifecycle_form():
    from mindspore_doctor.rules import training as rules

    assert FIXTURE["seed"] == cases_module.SEED
    assert len(FIXTURE["cases"]) == len(CASES)
    found = {key for case in FIXTURE["cases"].values() if isinstance(case, dict)
             for key, findings in case.items() if findings}
    wanted = {codes[0] for codes, _ in rules.TRAINING_RULES} | {f"{c}/current" for c in rules.CURRENT_RULES}
    assert wanted <= found, sorted(wanted - found)
    replayed = [f for case in FIXTURE["cases"].values() if isinstance(case, list) for f in case]
    assert any("resolved_step" in f["evidence"] for f in replayed)
    assert any("occurrences" in f["evidence"] for f in replayed)


@pytest.mark.parametrize("case, kind, thunk", CASES, ids=[c[0] for c in CASES])
def test_the_rules_find_what_they_found_before(case, kind, thunk, caplog):
    caplog.set_level(logging.ERROR, logger="mindspore_doctor")
    outputs = thunk()
    findings = outputs if kind == "replay" else [f for v in outputs.values() if isinstance(v, list) for f in v]
    for f in findings:
        _plain(f["evidence"])
        assert type(f["step"]) in (int, type(None))
    got = json.loads(cases_module.canonical(outputs))
    want = FIXTURE["cases"][case]
    if kind == "direct":  # rule by rule, for a readable failure
        for key in want:
            assert cases_module.canonical(got[key]) == cases_module.canonical(want[key]), key
    assert cases_module.canonical(got) == cases_module.canonical(want)


def test_nan_evidence_compares_by_its_text():
    """The fixture spells NaN out; comparing by canonical text makes NaN equal NaN (and 0.0 differ from -0.0)."""
    assert cases_module.canonical({"x": math.nan}) == cases_module.canonical(json.loads('{"x": NaN}'))
    assert cases_module.canonical(0.0) != cases_module.canonical(-0.0)
