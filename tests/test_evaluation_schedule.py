"""Which epochs the Doctor evaluates at (``training/evaluation_schedule.py``): every ``eval_every``-th, thinned by
``eval_budget`` after the first ``DENSE`` evaluations, the last epoch always."""
from __future__ import annotations

import pytest

from mindspore_doctor.training.evaluation_schedule import DENSE, EvaluationSchedule


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(schedule: EvaluationSchedule, clock: Clock, epochs: int, epoch_s: float, eval_s: float) -> list[int]:
    """Epochs of ``epoch_s`` seconds each, an evaluation of ``eval_s`` seconds wherever it is due."""
    for epoch in range(1, epochs + 1):
        clock.now += epoch_s
        if schedule.due(epoch):
            clock.now += eval_s
            schedule.record(epoch, eval_s)
    return schedule.evaluated


def test_an_evaluation_longer_than_the_epoch_is_thinned_to_the_budget():
    clock = Clock()
    schedule = EvaluationSchedule(1, 0.05, last_epoch=1000, clock=clock)
    evaluated = _run(schedule, clock, 1000, epoch_s=0.015, eval_s=0.035)
    assert evaluated[:DENSE] == list(range(1, DENSE + 1)) and evaluated[-1] == 1000
    later = evaluated[DENSE:-1]
    # 35 ms against 5 % of 15 ms epochs: one evaluation in about 47 epochs, evenly spread
    assert 18 <= len(later) <= 21, later
    assert all(45 <= b - a <= 49 for a, b in zip(later, later[1:])), later
    assert schedule.skipped == 1000 - len(evaluated)
    assert 0.035 * len(later) <= 0.05 * (1000 - DENSE) * 0.015


def test_a_cheap_evaluation_runs_at_every_epoch():
    clock = Clock()
    schedule = EvaluationSchedule(1, 0.05, clock=clock)
    assert _run(schedule, clock, 60, epoch_s=10.0, eval_s=0.2) == list(range(1, 61))


def test_no_budget_evaluates_every_eval_every_epochs():
    clock = Clock()
    schedule = EvaluationSchedule(3, None, last_epoch=100, clock=clock)
    assert _run(schedule, clock, 100, epoch_s=0.001, eval_s=1.0) == list(range(3, 100, 3))  # 100: not a 3rd epoch


@pytest.mark.parametrize("budget", [0.0, 0.05])
def test_a_short_run_is_evaluated_as_before(budget):
    clock = Clock()
    schedule = EvaluationSchedule(1, budget, last_epoch=DENSE, clock=clock)
    assert _run(schedule, clock, DENSE, epoch_s=0.001, eval_s=1.0) == list(range(1, DENSE + 1))


def test_zero_budget_keeps_the_dense_evaluations_and_the_last_epoch():
    clock = Clock()
    schedule = EvaluationSchedule(1, 0.0, last_epoch=40, clock=clock)
    assert _run(schedule, clock, 40, epoch_s=1.0, eval_s=0.001) == [*range(1, DENSE + 1), 40]
    assert schedule.to_dict() == {"eval_every": 1, "eval_budget": 0.0, "dense": DENSE,
                                  "evaluated_epochs": [*range(1, DENSE + 1), 40], "skipped": 40 - DENSE - 1}
