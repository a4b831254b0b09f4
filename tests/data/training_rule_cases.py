"""Varied training histories, and what every training rule (and its lifecycle form) finds on them.

``python tests/data/training_rule_cases.py`` records the findings into ``training_rule_outputs.json``;
``tests/test_rule_speed.py`` builds the same histories and checks that the rules still find exactly that (code, step,
message, location, evidence, suggestion), so a rule made faster (issue 26) cannot drift. The fixture was recorded
from the rules as they were before issue 26 made them faster (commit 1e63648; rules as at d324ee0):
``PYTHONPATH=<that checkout> python tests/data/training_rule_cases.py`` records from another checkout. Every history is drawn from ``random.Random(SEED + i)``
with pure-Python arithmetic, so the same histories come back on any platform.

Two kinds of case:

* ``direct``: each rule of ``TRAINING_RULES`` and each form of ``CURRENT_RULES`` called on the whole history, under
  a few configs;
* ``replay``: a ``DoctorSession`` fed the history step by step, judging on its probe steps as it does in training
  (``_evaluate`` over ``_recent_history``, the single-step MSD201 check on a non-finite loss, the full-history
  judgement and the lifecycle at the end): the report it ends with, ``occurrences`` and ``resolved_step`` included.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import math
import random
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

SEED = 20260126
"""The base seed: history ``i`` is drawn from ``random.Random(SEED + i)``."""

FIXTURE = Path(__file__).with_name("training_rule_outputs.json")

PARAMS = {  # name -> shape, network order
    "fc1.weight": [128, 64], "fc1.bias": [128],
    "bn.gamma": [128], "bn.beta": [128],
    "fc2.weight": [64, 128], "fc2.bias": [64],
    "fc3.weight": [10, 64], "fc3.bias": [10],
}
ACTIVATIONS = {"relu1": ("relu", 0), "relu2": ("relu", 1), "sig": ("sigmoid", 2), "tanh": ("tanh", 3)}

CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "small": {"loss_window": 5, "diverge_smoothing": 1},
    "even": {"loss_window": 8, "diverge_smoothing": 4, "persistent_probes": 3, "plateau_windows": 2},
}


# --- loss curves -------------------------------------------------------------------------------------------------

def _healthy(rng: random.Random, n: int, start: float = 2.3, tau: float = 150.0, noise: float = 0.05) -> list:
    return [start * math.exp(-t / tau) * (1 + noise * rng.gauss(0, 1)) + 0.05 for t in range(n)]


def _walk(rng: random.Random, n: int, start: float = 2.3, step: float = 0.05) -> list:
    out, v = [], start
    for _ in range(n):
        v = abs(v + step * rng.gauss(0, 1))
        out.append(v)
    return out


def _oscillating(rng: random.Random, n: int, at: int, amp: float = 0.8) -> list:
    base = _healthy(rng, n)
    return [v if t < at else v + (amp if t % 2 else -amp * 0.5) * (1 + 0.1 * rng.random()) for t, v in enumerate(base)]


def _diverging(rng: random.Random, n: int, at: int, rate: float = 1.03) -> list:
    base = _healthy(rng, n)
    return [v if t < at else v * rate ** (t - at) for t, v in enumerate(base)]


def _rising(rng: random.Random, n: int, at: int, slope: float = 0.02) -> list:
    base = _healthy(rng, n, noise=0.01)
    return [v if t < at else base[at] + slope * (t - at) * (1 + 0.01 * rng.gauss(0, 1)) for t, v in enumerate(base)]


def _spike(rng: random.Random, n: int, at: int, length: int = 40, factor: float = 4.0) -> list:
    base = _healthy(rng, n)
    return [v * factor if at <= t < at + length else v for t, v in enumerate(base)]


def _plateau(rng: random.Random, n: int, level: float = 2.3, noise: float = 0.002, drop_at: int | None = None) -> list:
    return [(level if drop_at is None or t < drop_at else level * 0.3) * (1 + noise * rng.gauss(0, 1))
            for t in range(n)]


def _quantised(rng: random.Random, n: int) -> list:
    """Few distinct values: ties everywhere in the rolling medians."""
    return [rng.choice((0.5, 0.75, 1.0, 1.25, 2.0)) for _ in range(n)]


LOSS_CURVES: dict[str, Callable[[random.Random, int], list]] = {
    "healthy": lambda r, n: _healthy(r, n),
    "noisy": lambda r, n: _healthy(r, n, noise=0.4),
    "walk": lambda r, n: _walk(r, n),
    "oscillating": lambda r, n: _oscillating(r, n, n // 3),
    "oscillating_small": lambda r, n: _oscillating(r, n, n // 4, amp=0.3),
    "diverging": lambda r, n: _diverging(r, n, n // 2),
    "rising": lambda r, n: _rising(r, n, n // 3),
    "spike": lambda r, n: _spike(r, n, n // 4),
    "plateau": lambda r, n: _plateau(r, n),
    "plateau_then_drop": lambda r, n: _plateau(r, n, drop_at=n // 2),
    "flat_exact": lambda r, n: [1.5] * n,
    "quantised": _quantised,
    "negative": lambda r, n: [v - 1.0 for v in _walk(r, n, start=0.5)],
    "zero_start": lambda r, n: [0.0] + _healthy(r, n - 1),
    "near_zero_early": lambda r, n: [1e-6, 5e-5] + _healthy(r, n - 2),
    "huge_first": lambda r, n: [1e4] + _healthy(r, n - 1),
    "tiny": lambda r, n: [v * 1e-9 for v in _walk(r, n)],
    "decay_to_zero": lambda r, n: [2.3 * math.exp(-t / 20) for t in range(n)],
    # sums past float64's largest (inf, silently), signed zeros, subnormals
    "huge": lambda r, n: [r.choice((1.7e308, -1.7e308, 1e308)) if t % 3 else r.choice((0.0, -0.0, 5e-324))
                          for t in range(n)],
    "signed_zeros": lambda r, n: [r.choice((0.0, -0.0, 0.0, 1e-3)) for _ in range(n)],
}


def _with_nonfinite(values: list, at: int, value: float, rest: str) -> list:
    """``value`` at index ``at``; after it, NaN (``rest="nan"``) or the curve going on (``"go_on"``)."""
    return [v if t < at else value if t == at or rest == "nan" else v for t, v in enumerate(values)]


# --- probes ------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ProbePlan:
    every: int = 10
    grads: str = "healthy"  # healthy | exploding | vanishing_first | no_gradient | first_last | nonfinite_norm
    updates: str = "healthy"  # healthy | small | large | burst | lagging | frozen | scheduled | groups | blown
    activations: str = "healthy"  # healthy | dead | dying_units | saturated | exploding | none
    broken_at: int | None = None  # grad/weight/activation non-finite from this step
    broken_kind: str = "grad"  # grad | weight | activation | activation_mean
    redundant_beta: bool = False
    lag: str | None = None  # a parameter whose updates lag 1e-5x behind the rest
    overflow: float | None = None  # loss-scale overflow rate (None: no loss-scale cell)


def _probe(rng: random.Random, step: int, k: int, plan: ProbePlan, s: Any) -> None:
    from mindspore_doctor.signals import ActivationStats

    jitter = lambda: math.exp(0.2 * rng.gauss(0, 1))  # noqa: E731
    s.probed()
    for i, (name, shape) in enumerate(PARAMS.items()):
        size = math.prod(shape)
        norm = 0.5 * jitter() * (0.7 ** i + 0.1)
        if plan.grads == "exploding" and k >= 3:
            norm *= 3.0 ** (k - 2)
        if plan.grads == "slow_growth":
            norm *= 1.6 ** k
        if plan.grads == "vanishing_first" and name.startswith("fc1"):
            norm *= 1e-9
        if plan.grads == "first_last" and name == "fc1.weight":
            norm *= 1e-4
        if plan.grads == "no_gradient" and name == "fc2.weight":
            norm = 0.0 if k % 2 else 1e-14
        if plan.redundant_beta and name == "bn.beta":
            norm *= 1e-8
        s.grad_norm[name] = norm
        s.grad_rms[name] = norm / math.sqrt(size)
        s.grad_nonfinite[name] = 0
        s.weight_nonfinite[name] = 0
        ratio = 1e-3 * jitter()
        if plan.updates == "small":
            ratio *= 1e-3
        elif plan.updates == "large":
            ratio *= 300
        elif plan.updates == "burst" and step == 1:
            ratio = 0.8 * jitter()
        elif plan.updates == "lagging" and name == "fc2.weight":
            ratio *= 1e-5
        elif plan.updates == "blown" and name == "fc1.weight":
            ratio = 0.5 if k == 2 else ratio * 1e-4
        elif plan.updates == "groups" and name.endswith("bias"):
            ratio *= 1e-4
        if name == plan.lag:
            ratio *= 1e-5
        mean_abs = 0.05 * (1 + 0.1 * i)
        s.update_ratio[name] = ratio
        s.update_abs[name] = 0.0 if plan.updates == "frozen" and name == "fc2.weight" else ratio * mean_abs * 3
        s.weight_mean_abs[name] = mean_abs
    if plan.grads == "nonfinite_norm" and k == 4:
        s.grad_norm["fc1.weight"] = math.inf
    if plan.updates == "scheduled":
        s.learning_rate = 0.1 * min(1.0, step / 50) * (0.5 ** (step // 200)) or 1e-6
    elif plan.updates == "groups":
        s.group_learning_rates = [0.01 * min(1.0, step / 30), 0.1 / (1 + step / 30)]
        s.learning_rate = max(s.group_learning_rates)
    else:
        s.learning_rate = 0.01
    if plan.activations != "none":
        for path, (kind, order) in ACTIVATIONS.items():
            a = ActivationStats(kind=kind, mean_abs=0.5 * jitter(), order=order)
            if kind == "relu":
                a.dead_fraction = 0.5 * rng.random()
                a.dead_unit_fraction = 0.1 * rng.random()
                a.units = 64
                if plan.activations == "dead" and path == "relu2":
                    a.dead_fraction = 0.9995
                if plan.activations == "dying_units" and path == "relu1":
                    a.dead_unit_fraction = 0.62 + 0.1 * rng.random()
                    a.units = rng.choice((8, 64, 256))
            else:
                a.saturated_fraction = 0.2 * rng.random()
                if plan.activations == "saturated" and kind == "sigmoid":
                    a.saturated_fraction = 0.9999
            if plan.activations == "exploding":
                a.mean_abs = 3.0 * 4 ** order * (1 + 0.01 * k)
            s.activations[path] = a
    if plan.broken_at is not None and step >= plan.broken_at:
        if plan.broken_kind == "grad":
            s.grad_nonfinite["fc2.weight"] = 3
            s.grad_nonfinite["fc3.bias"] = 1
        elif plan.broken_kind == "weight":
            s.weight_nonfinite["fc3.weight"] = 7
            s.weight_nonfinite["fc1.bias"] = 2
        elif plan.broken_kind == "activation" and s.activations:
            s.activations["relu2"].nonfinite = 5
        elif s.activations:
            s.activations["sig"].mean_abs = math.nan


@dataclasses.dataclass
class Plan:
    curve: str
    n: int = 300
    probes: ProbePlan | None = None
    num_classes: int | None = 10
    fresh: bool | None = True
    adversarial: bool = False
    nonfinite: tuple[int, float, str] | None = None  # (index, value, "nan" | "go_on")
    unread_every: int = 0  # every this many steps the loss is None (not read)
    replay_every: int | None = None  # probe_every of the replay (None: probes.every, 50 without probes)


def build(i: int, plan: Plan) -> Any:
    """History ``i`` of ``plan``, drawn from ``random.Random(SEED + i)``."""
    from mindspore_doctor.signals import StartState, StepSignals, TrainingHistory

    rng = random.Random(SEED + i)
    values = LOSS_CURVES[plan.curve](rng, plan.n)
    if plan.nonfinite is not None:
        values = _with_nonfinite(values, *plan.nonfinite)
    history = TrainingHistory(parameter_order=list(PARAMS), num_classes=plan.num_classes,
                              parameter_shapes={k: list(v) for k, v in PARAMS.items()},
                              adversarial=plan.adversarial)
    if plan.fresh is not None or i % 3 == 0:
        history.start = StartState(fresh=plan.fresh, reason=f"case {i}")
    probes = plan.probes
    k = 0
    for t, v in enumerate(values):
        step = t + 1
        s = StepSignals(step=step, epoch=1 + t // 100,
                        loss=None if plan.unread_every and step % plan.unread_every == 0 else v)
        if probes is not None and probes.overflow is not None:
            s.overflow = rng.random() < probes.overflow or step <= 3
            s.loss_scale = 2.0 ** (16 - min(step, 10))
        if probes is not None and (step == 1 or step % probes.every == 0 or step == plan.n):
            k += 1
            _probe(rng, step, k, probes, s)
        history.append(s)
    if probes is not None:
        history.peak_learning_rate = max((s.learning_rate for s in history.steps if s.learning_rate), default=None)
        if probes.updates == "groups":
            history.lr_groups = {name: int(name.endswith("bias")) for name in PARAMS}
            history.group_peak_learning_rates = [0.01, 0.1]
    return history


P = ProbePlan
PLANS: list[Plan] = [
    Plan("healthy", probes=P()),
    Plan("healthy", n=600, probes=P(every=50)),
    Plan("healthy", n=200, probes=P(every=1)),
    Plan("noisy", probes=P(every=5)),
    Plan("walk", probes=P(every=7)),
    Plan("walk", n=900, replay_every=50),
    Plan("oscillating", probes=P(every=3)),
    Plan("oscillating", n=500, replay_every=50),
    Plan("oscillating_small", probes=P()),
    Plan("oscillating", adversarial=True, probes=P()),
    Plan("diverging", probes=P(every=5, grads="exploding")),
    Plan("diverging", n=700, replay_every=25),
    Plan("rising", probes=P(every=4)),
    Plan("rising", n=400, replay_every=50),
    Plan("spike", probes=P(every=5)),
    Plan("spike", n=600, probes=P(every=50)),
    Plan("plateau", probes=P(every=10, updates="frozen")),
    Plan("plateau_then_drop", n=400, probes=P(every=20)),
    Plan("flat_exact", n=120, probes=P(every=6)),
    Plan("quantised", probes=P(every=5)),
    Plan("negative", probes=P(every=10)),
    Plan("zero_start", probes=P(every=10)),
    Plan("near_zero_early", probes=P(every=10)),
    Plan("near_zero_early", fresh=False, probes=P(every=10)),
    Plan("huge_first", probes=P(every=10)),
    Plan("huge_first", num_classes=None, fresh=None),
    Plan("tiny", probes=P(every=10)),
    Plan("decay_to_zero", probes=P(every=5, grads="vanishing_first", updates="small")),
    Plan("healthy", nonfinite=(150, math.nan, "nan"), probes=P(every=10, broken_at=141, broken_kind="grad")),
    Plan("healthy", nonfinite=(90, math.inf, "go_on"), probes=P(every=10, broken_at=85, broken_kind="weight")),
    Plan("healthy", nonfinite=(120, -math.inf, "nan"),
         probes=P(every=5, broken_at=100, broken_kind="activation")),
    Plan("healthy", probes=P(every=10, broken_at=200, broken_kind="activation_mean")),
    Plan("healthy", probes=P(every=5, grads="exploding")),
    Plan("healthy", probes=P(every=5, grads="slow_growth")),
    Plan("healthy", probes=P(every=10, grads="vanishing_first")),
    Plan("walk", probes=P(every=10, grads="vanishing_first", lag="fc1.weight")),
    Plan("healthy", probes=P(every=10, grads="first_last", updates="lagging")),
    Plan("walk", probes=P(every=10, grads="first_last", lag="fc1.weight")),
    Plan("healthy", probes=P(every=10, grads="no_gradient")),
    Plan("plateau", probes=P(every=10, grads="no_gradient", lag="fc2.weight")),
    Plan("healthy", probes=P(every=10, grads="nonfinite_norm")),
    Plan("healthy", probes=P(every=10, updates="small")),
    Plan("healthy", probes=P(every=10, updates="large")),
    Plan("healthy", probes=P(every=10, updates="burst")),
    Plan("healthy", probes=P(every=10, updates="blown")),
    Plan("healthy", probes=P(every=10, updates="scheduled")),
    Plan("healthy", probes=P(every=10, updates="groups")),
    Plan("healthy", probes=P(every=10, activations="dead")),
    Plan("healthy", probes=P(every=10, activations="dying_units")),
    Plan("healthy", probes=P(every=10, activations="saturated")),
    Plan("healthy", probes=P(every=10, activations="exploding")),
    Plan("healthy", probes=P(every=10, activations="none", redundant_beta=True)),
    Plan("healthy", probes=P(every=1, overflow=0.3)),
    Plan("healthy", probes=P(every=10, overflow=0.02)),
    Plan("healthy", unread_every=3, probes=P(every=10)),
    Plan("oscillating", unread_every=4, probes=P(every=10)),
    Plan("healthy", n=2, probes=P(every=1)),
    Plan("walk", n=25, probes=P(every=2)),
    Plan("healthy", n=0),
    Plan("huge", n=150, probes=P(every=10)),
    Plan("signed_zeros", n=150),
]


# --- recording ---------------------------------------------------------------------------------------------------

def finding_record(f: Any) -> dict[str, Any]:
    evidence = dict(f.evidence)
    if isinstance(evidence.get("traceback"), str):  # MSD001: the exception, not the files and lines it passed
        evidence["traceback"] = evidence["traceback"].strip().splitlines()[-1]
    return {"code": f.code, "rule": f.rule, "severity": f.severity.value, "step": f.step, "message": f.message,
            "location": f.location, "evidence": evidence, "suggestion": f.suggestion}


def direct(history: Any, config: Any) -> dict[str, Any]:
    """Each training rule and each lifecycle form on the whole history; an exception is recorded as its type."""
    from mindspore_doctor.rules import training as rules

    out: dict[str, Any] = {}

    def run(key: str, fn: Callable) -> None:
        try:
            out[key] = [finding_record(f) for f in fn(history, config)]
        except Exception as error:  # noqa: BLE001 - recorded: a change must raise the same
            out[key] = f"raised {type(error).__name__}"

    for codes, rule in rules.TRAINING_RULES:
        run(codes[0], rule)
    for code, rule in rules.CURRENT_RULES.items():
        run(f"{code}/current", rule)
    return out


def replay(history: Any, config: Any) -> list[dict[str, Any]]:
    """What a ``DoctorSession`` reports when it sees ``history`` step by step (see the module docstring)."""
    from mindspore_doctor.signals import TrainingHistory
    from mindspore_doctor.training.session import DoctorSession

    session = DoctorSession(config)
    live = session.history
    for field in ("parameter_order", "num_classes", "parameter_shapes", "peak_learning_rate", "lr_groups",
                  "group_peak_learning_rates", "start", "adversarial"):
        setattr(live, field, getattr(history, field))
    seen_nonfinite = False
    for s in history.steps:
        live.append(s)
        if s.loss is not None and not math.isfinite(s.loss) and not seen_nonfinite:
            seen_nonfinite = True
            session._evaluate(TrainingHistory(steps=[s]), codes=("MSD201",))
        if s.step == 1 or s.step % config.probe_every == 0:
            session._evaluate(session._recent_history())
    session._evaluate(live, count=False)
    session._lifecycle.close(session.report)
    return [finding_record(f) for f in session.report.findings]


def cases() -> Iterator[tuple[str, str, Callable[[], Any]]]:
    """(case id, kind, thunk computing its outputs), in a fixed order."""
    from mindspore_doctor.config import DoctorConfig

    for i, plan in enumerate(PLANS):
        name = f"{i:02d}-{plan.curve}-n{plan.n}"
        for cname, overrides in CONFIGS.items():
            yield f"{name}/direct/{cname}", "direct", (
                lambda i=i, plan=plan, o=overrides: direct(build(i, plan), DoctorConfig(**o)))
        every = plan.replay_every or (plan.probes.every if plan.probes else 50)
        for cname in ("default", "small"):
            yield f"{name}/replay/{cname}", "replay", (
                lambda i=i, plan=plan, o=CONFIGS[cname], e=every: replay(build(i, plan),
                                                                         DoctorConfig(probe_every=e, **o)))


def canonical(value: Any) -> str:
    """One case's outputs as text: floats by repr (exact), NaN/Infinity spelt out, keys sorted."""
    return json.dumps(value, sort_keys=True, allow_nan=True)


def main() -> None:
    logging.getLogger("mindspore_doctor").setLevel(logging.ERROR)
    out = {case: json.loads(canonical(thunk())) for case, _, thunk in cases()}
    FIXTURE.write_text(json.dumps({"seed": SEED, "cases": out}, sort_keys=True, indent=None, separators=(",", ":"))
                       + "\n")
    found = sum(len(v) if isinstance(v, list) else sum(len(x) for x in v.values() if isinstance(x, list))
                for v in out.values())
    print(f"{len(out)} cases, {found} findings -> {FIXTURE}")


if __name__ == "__main__":
    if importlib.util.find_spec("mindspore_doctor") is None:  # PYTHONPATH=<an older checkout> records that one
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main()
