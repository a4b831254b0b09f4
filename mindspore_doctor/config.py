"""Every option and threshold of the doctor, in one dataclass with documented defaults.

Defaults come from shared/CATALOG.md (and the tools it cites). ``lint(**options)``,
``Doctor(**options)`` and ``[tool.msdoctor]`` in pyproject.toml all fill this one
dataclass, so an option means the same thing everywhere.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class DoctorConfig:
    # --- selection and behaviour -------------------------------------------------
    select: tuple[str, ...] = ()
    """Only report these codes/prefixes/slugs (empty: all)."""
    ignore: tuple[str, ...] = ()
    """Never report these codes/prefixes/slugs."""
    allow_shared: tuple[str, ...] = ()
    """Parameter names (or cell-path prefixes) whose sharing is intentional (MSD101)."""

    # --- static (MSD1xx) -----------------------------------------------------------
    max_drop_rate: float = 0.5
    """MSD104: a Dropout dropping more than this fraction of its inputs is suspicious."""
    init_std_factor: float = 10.0
    """MSD109: init std off from the He/Glorot recommendation by more than this factor."""
    sgd_lr_range: tuple[float, float] = (1e-6, 1.0)
    """MSD111: sane learning-rate range for SGD/Momentum-family optimizers."""
    adam_lr_range: tuple[float, float] = (1e-7, 1e-2)
    """MSD111: sane learning-rate range for Adam-family optimizers."""

    # --- training signals (MSD2xx) -------------------------------------------------
    stop_on: str | None = None
    """Ask training to stop at a finding of this severity or worse ("error"); None: never stop."""
    probe_every: int = 10
    """Read the in-graph gradient/update/activation statistics every N steps (loss: every step)."""
    loss_window: int = 20
    """MSD202/203/204: number of loss checks in a trend window."""
    diverge_factor: float = 2.0
    """MSD202: loss at or above this multiple of its running minimum for a window."""
    min_improvement: float = 0.05
    """MSD203: relative loss improvement expected over a window."""
    low_loss: float = 1e-4
    """MSD205: a loss below this within the first ``early_steps`` steps is suspicious."""
    early_steps: int = 3
    """MSD205/215: what counts as "the first steps"."""
    vanishing_grad_mean: float = 1e-7
    """MSD207: mean |g| of a layer below this is vanishing."""
    vanishing_grad_ratio: float = 1e-3
    """MSD207: first-layer / last-layer gradient-norm ratio below this is vanishing."""
    exploding_grad_growth: float = 2.0
    """MSD208: global gradient norm growing more than this per window."""
    exploding_grad_ratio: float = 70.0
    """MSD208: last / first gradient-norm ratio above this is exploding."""
    frozen_update_atol: float = 1e-8
    """MSD209: |dw| <= atol + rtol*|w| counts as not updated."""
    frozen_update_rtol: float = 1e-5
    update_ratio_min: float = 1e-4
    """MSD210: mean|dw| / mean|w| below this is too small."""
    update_ratio_max: float = 1e-1
    """MSD211: mean|dw| / mean|w| above this is too large."""
    dead_relu_fraction: float = 0.999
    """MSD212: fraction of ReLU outputs <= 0 above which the layer is dead."""
    saturated_fraction: float = 0.999
    """MSD213: fraction of Sigmoid/Tanh outputs in the flat tails."""
    overflow_rate: float = 0.1
    """MSD214: fraction of loss-scale overflow steps that is too many."""
    initial_loss_factor: float = 3.0
    """MSD215: first loss off ln(num_classes) by more than this factor."""
    activation_explode: float = 10.0
    """MSD216: mean |activation| at or above this and growing through the network."""

    # --- data (MSD3xx) ---------------------------------------------------------------
    data_max_samples: int = 2048
    """Bound on samples read from a dataset by the data checks."""
    data_max_seconds: float = 2.0
    """Bound on seconds spent by the data checks."""
    imbalance_ratio: float = 10.0
    """MSD302: largest / smallest class count above this is imbalanced."""

    # --- export --------------------------------------------------------------------
    summary_dir: str | None = None
    """Where doctor_report.json (and summaries, HTML) are written; None: nowhere."""

    @classmethod
    def from_options(cls, options: dict[str, Any] | None = None, base: "DoctorConfig | None" = None) -> "DoctorConfig":
        """Build from keyword options; unknown names raise one clear TypeError."""
        options = dict(options or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown mindspore_doctor option(s): {', '.join(unknown)}")
        for key in ("select", "ignore", "allow_shared"):
            if isinstance(options.get(key), str):
                options[key] = tuple(s.strip() for s in options[key].split(",") if s.strip())
            elif key in options:
                options[key] = tuple(options[key])
        return dataclasses.replace(base or cls(), **options)

