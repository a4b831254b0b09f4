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

import numpy as np
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


@pytest.mark.parametrize("case, kind, thunk", [c for c in CASES if c[1] == "direct"],
                         ids=[c[0] for c in CASES if c[1] == "direct"])
def test_rules_that_share_their_work_find_the_same(case, kind, thunk):
    """Inside ``shared_work`` (as the session judges) each derived quantity is computed once for all the rules: the
    same findings as each rule deriving its own."""
    from mindspore_doctor.rules.training import shared_work

    with shared_work():
        got = thunk()
    assert cases_module.canonical(json.loads(cases_module.canonical(got))) == \
        cases_module.canonical(FIXTURE["cases"][case])


def test_shared_work_derives_once_per_history_and_only_while_open():
    from mindspore_doctor.rules.training import shared_work
    from mindspore_doctor.rules.training.common import finite_losses, recent_probes
    from mindspore_doctor.signals import StepSignals, TrainingHistory

    history = TrainingHistory(steps=[StepSignals(step=i, loss=1.0 / i) for i in range(1, 6)])
    assert finite_losses(history) is not finite_losses(history)  # outside: every rule derives its own
    with shared_work():
        assert finite_losses(history) is finite_losses(history)
        assert recent_probes(history, 2) is recent_probes(history, 2)
        other = TrainingHistory(steps=history.steps[:2])
        assert finite_losses(other) == finite_losses(history)[:2]  # another history object: its own
        with shared_work():  # nested: a fresh memo
            assert finite_losses(history) is not None
    history.steps[0].loss = math.nan  # changed after the block closed: judged afresh
    assert finite_losses(history) == [(i, 1.0 / i) for i in range(2, 6)]


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 10, 20])
def test_window_medians_are_statistics_median_bit_for_bit(width):
    """Even widths average the two middle values as ``statistics.median`` does; ties and signed zeros sort stably
    as ``sorted`` does, so a window of -0.0 and 0.0 has the same median, sign included."""
    import random
    import statistics

    from mindspore_doctor.rules.training.common import median, window_medians

    rng = random.Random(cases_module.SEED)
    series = [[rng.gauss(0, 1) for _ in range(300)], [rng.choice((0.0, -0.0, 1.0, -1.0, 0.5)) for _ in range(300)],
              [rng.choice((1e308, -1e308, 1.7e308, 5e-324)) for _ in range(100)],
              [abs(rng.gauss(0, 1e-3)) for _ in range(50)]]
    for values in series:
        want = [statistics.median(values[i : i + width]) for i in range(len(values) - width + 1)]
        with np.errstate(over="ignore"):  # 1e308 + 1.7e308 is inf, as in Python
            got = window_medians(values, width).tolist()
            assert repr(median(values[:width])) == repr(statistics.median(values[:width]))
        assert [repr(v) for v in got] == [repr(v) for v in want]


def test_huge_losses_judge_without_numpy_warnings():
    """A loss near float64's largest overflows the medians' sums and the changes to inf, silently in Python: the
    vectorised windows must not warn either (under ``-W error`` a warning would switch the rule off, MSD001)."""
    import warnings

    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.rules import training as rules
    from mindspore_doctor.signals import StepSignals, TrainingHistory

    values = [1.7e308 if i % 2 else -1.7e308 for i in range(80)] + [5e-324, 0.0, -0.0] * 10
    history = TrainingHistory(steps=[StepSignals(step=i + 1, loss=v) for i, v in enumerate(values)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for config in (DoctorConfig(), DoctorConfig(loss_window=4, diverge_smoothing=2)):
            for codes, rule in rules.TRAINING_RULES:
                rule(history, config)
            for rule in rules.CURRENT_RULES.values():
                rule(history, config)
