"""Which due probe steps run on a long run of fast steps: at the default ``probe_every``, the probe steps take at
most ``probe_budget`` of the training time once the probe rules have had their first probes.

Why: a probe step's cost is nearly fixed (reading the weights, the statistics, the rules: ~2 ms on CPU for a small
MLP), while a step can take well under a millisecond (the corpus's diabetes MLP: 0.5 ms a step stepped bare, 1 ms
under ``Model.train``; a GPU step of a small model). At one probe in 50 steps such a run spends 5-10 % of its time
in probes, however long it runs; on a ResNet-sized step the same probe is a fraction of a percent.

What is kept: step 1 and the first ``dense`` regular probes after it always run (4: what the probe rule needing the
most probes, MSD210, needs), as do a forced probe (after a non-finite loss) and a short run's final one: a run of
up to ``dense * probe_every`` steps is probed as without the budget, and so is every rule's earliest verdict (the
fault benchmark's programs are all detected by step 150). After them a due probe runs only when the probe steps
since the first regular one, it included (estimated at the last one's cost), take at most ``share`` of the time
since that one began (the graphs have compiled by then): evenly spaced on the regular grid, fewer the shorter the
step. A probe step's cost is its wall time, from its ``step_begin`` to the end of its ``step_end``, beyond the mean
step of the steps between (timed from the same clock: nothing a step but the step number). An explicit
``probe_every`` probes exactly every N steps; so does ``probe_budget=None``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class ProbeBudget:
    """``allows(step)`` at a due probe step's begin; ``began(step)``/``ended()`` around each probe step."""

    share: float
    dense: int = 4
    """Probes after step 1 that run before the budget applies."""
    clock: Callable[[], float] = time.perf_counter
    skipped: int = field(default=0, init=False)
    _start: tuple[int, float] | None = field(default=None, init=False, repr=False)  # (step, when it began)
    _probes: int = field(default=0, init=False, repr=False)  # probe steps ended since _start, its own included
    _probe_seconds: float = field(default=0.0, init=False, repr=False)  # their wall time
    _last_seconds: float = field(default=0.0, init=False, repr=False)
    _began: float = field(default=0.0, init=False, repr=False)

    def allows(self, step: int) -> bool:
        if self._start is None or self._probes < self.dense:  # step 1, or the first probes after it
            return True
        first, since = self._start
        elapsed = self.clock() - since
        mean_step = max(0.0, elapsed - self._probe_seconds) / max(1, step - first - self._probes)
        spent = self._probe_seconds - self._probes * mean_step
        if spent + max(0.0, self._last_seconds - mean_step) <= self.share * elapsed:
            return True
        self.skipped += 1
        return False

    def began(self, step: int) -> None:
        self._began = self.clock()
        if self._start is None and step > 1:  # the graphs compiled before it: the clock starts here
            self._start = (step, self._began)

    def ended(self) -> None:
        if self._start is not None:
            self._last_seconds = self.clock() - self._began
            self._probe_seconds += self._last_seconds
            self._probes += 1

    def to_dict(self) -> dict[str, Any]:
        mean = self._probe_seconds / self._probes if self._probes else None
        return {"probe_budget": self.share, "skipped": self.skipped,
                "probe_step_ms": None if mean is None else round(mean * 1e3, 3)}
