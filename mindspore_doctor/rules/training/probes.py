"""MSD002 at the end of training: the probe rules a run took too few probed steps to judge."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from mindspore_doctor.findings import Finding
from mindspore_doctor.rule import CHECK_SKIPPED
from mindspore_doctor.signals import TrainingHistory

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig


def not_judged(history: TrainingHistory, config: DoctorConfig, needed: Mapping[str, int]) -> list[Finding]:
    """MSD002 for the probe rules of ``needed`` (code -> probed steps, step 1 included, it needs) that never judged,
    because the run took fewer probed steps than they need (a 16-step run at ``probe_every=50`` probes step 1 and its
    last step only): silence there is not a clean bill of health."""
    probed = [s.step for s in history.probed()]
    missing = {code: n for code, n in needed.items() if n > len(probed)}
    if not missing:
        return []
    most, steps = max(missing.values()), len(history.steps)
    by_count: dict[int, list[str]] = {}
    for code, n in sorted(missing.items()):
        by_count.setdefault(n, []).append(code)
    need = (f"they need {most}" if len(by_count) == 1 else
            " and ".join(f"{', '.join(c)} need {n}" for n, c in sorted(by_count.items())))
    advice = (f"pass probe_every={max(1, steps // most)} (or train longer) to judge them" if steps >= most else
              f"train at least {most} steps to judge them")
    shown = f" (step{'s' if len(probed) > 1 else ''} {', '.join(map(str, probed))})" if probed else ""
    return [CHECK_SKIPPED.finding(
        f"{', '.join(sorted(missing))} not judged: {need} probed steps, and this run of {steps} "
        f"step{'s' if steps != 1 else ''} took {len(probed)}{shown} at probe_every={config.probe_every}; {advice}.",
        location={"check": "probe-count"},
        evidence={"codes": sorted(missing), "probed_steps": len(probed), "steps": steps, "needed": missing,
                  "probe_every": config.probe_every},
        suggestion=f"Doctor(probe_every={max(1, steps // most)}) probes often enough for a run this short; "
        "probing does not change the training, it costs time on the probed steps only.")]

