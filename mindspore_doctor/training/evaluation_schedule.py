"""Which epoch ends the Doctor evaluates at: every ``eval_every``-th, thinned on a long run so that the evaluations
stay a small share of its time (``eval_budget``).

Why thin them: an evaluation (the eval set and the training sample, forward passes only) costs the same whatever the
epoch, and on a small dataset it takes longer than the epoch itself. The corpus's wine MLP (142 training samples, 8
steps an epoch) trained 200 epochs: 3.85 s plain, 11.56 s under ``Doctor()`` evaluating every epoch, 4.48 s with no
evaluation at all (2026-12-04, one fresh process each): at ~35 ms an evaluation against ~15 ms an epoch, evaluating
every epoch tripled the run, however long it was.

What is kept: the first ``DENSE`` evaluations run at every ``eval_every``-th epoch, wherever the budget stands: MSD311's
label trajectory finds its early-learning plateau there (after 3 to 9 evaluations in the label-noise benchmark,
``analysis/labels.Trajectory``), and a short run (up to ``DENSE`` evaluations) is evaluated as before. After them, an
evaluation runs only when the evaluations since the dense ones, it included (estimated at the last one's time), take
at most ``budget`` of the time spent training since then: evenly spaced, fewer the shorter the epoch. The run's last
epoch is always evaluated (MSD402/404 judge the trained network) when its number is known.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

DENSE = 10
"""Evaluations that run at every ``eval_every``-th epoch before the budget applies."""


@dataclass
class EvaluationSchedule:
    """``due(epoch)`` at each epoch end; ``record(epoch, seconds)`` after each evaluation that ran."""

    every: int
    budget: float | None
    """Share of the training time the evaluations after the first ``DENSE`` may take; None: no thinning."""
    last_epoch: int | None = None
    clock: Callable[[], float] = time.perf_counter
    evaluated: list[int] = field(default_factory=list, init=False)
    skipped: int = field(default=0, init=False)
    _since: float | None = field(default=None, init=False, repr=False)  # when the DENSE-th evaluation ended
    _spent: float = field(default=0.0, init=False, repr=False)  # seconds in evaluations since then
    _last_cost: float = field(default=0.0, init=False, repr=False)

    def due(self, epoch: int) -> bool:
        if self.every < 1 or epoch % self.every:
            return False
        if self.budget is None or self._since is None or epoch == self.last_epoch:
            return True
        training = self.clock() - self._since - self._spent
        if self._spent + self._last_cost <= self.budget * training:
            return True
        self.skipped += 1
        return False

    def record(self, epoch: int, seconds: float) -> None:
        self.evaluated.append(epoch)
        self._last_cost = seconds
        if self._since is not None:
            self._spent += seconds
        elif len(self.evaluated) >= DENSE:
            self._since = self.clock()

    def to_dict(self) -> dict[str, Any]:
        return {"eval_every": self.every, "eval_budget": self.budget, "dense": DENSE,
                "evaluated_epochs": list(self.evaluated), "skipped": self.skipped}
