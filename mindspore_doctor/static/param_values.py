"""Parameter values on the host, and their statistics: what MSD108/MSD109 judge of an init (all equal, std, a
table's fresh random draw) and the kurtosis that tells a random draw from written or trained values.

Tensors are copied to the host only for the parameters whose init is judged, and for frozen ones.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from mindspore_doctor.static.signals import EMBEDDING, INIT_CHECKED, WEIGHT


def host_array(param: Any, limit: int | None = None) -> np.ndarray | None:
    """float32 host copy, of its first ``limit`` elements only when given (a sample: a big weight is not copied
    whole); None for a parameter whose data is not initialised yet (lazy init)."""
    import mindspore as ms

    if getattr(param, "has_init", False):
        return None
    if limit is not None and math.prod(param.shape) > limit:
        param = param.reshape(-1)[:limit]
    if param.dtype == ms.bfloat16:
        param = param.astype(ms.float32)
    return np.asarray(param.asnumpy(), dtype=np.float32)


def init_statistics(param: Any, role: str, fan_in: int | None) -> dict[str, Any]:
    if role not in INIT_CHECKED or math.prod(param.shape) <= 1:
        return {}
    values = host_array(param)
    if values is None or values.size == 0:
        return {}
    low, high = values.min(), values.max()
    equal = bool(low == high)
    stats: dict[str, Any] = {"all_equal": equal, "constant": float(low) if equal else None}
    if role == WEIGHT and fan_in and not equal:
        stats["std"] = float(values.std(dtype=np.float64))
    elif role == EMBEDDING and not equal:
        stats["std"] = float(values.std(dtype=np.float64))
        stats["fresh_draw"] = _fresh_draw(values.reshape(-1)[:_DRAW_SAMPLE])
    return stats


_DRAW_SAMPLE = 100_000
"""Values of a table read to tell a fresh random draw from loaded rows (its first ones, in memory order)."""
_DRAW_KURTOSIS = (1.5, 4.5)
"""Kurtosis of the initializers' draws: uniform 1.8, truncated normal 2.4-2.9, normal 3. Trained or loaded
embedding rows are heavy-tailed or off-centre."""


def _fresh_draw(values: np.ndarray) -> bool:
    """Values shaped like an initializer's draw: centred on zero, with a uniform's or a normal's tails."""
    spread = float(values.std(dtype=np.float64))
    low, high = _DRAW_KURTOSIS
    return spread > 0 and abs(float(values.mean(dtype=np.float64))) < 0.1 * spread and low < kurtosis(values) < high


def kurtosis(values: np.ndarray) -> float:
    centred = values.astype(np.float64) - values.mean(dtype=np.float64)
    variance = float(np.mean(centred**2))
    return float(np.mean(centred**4)) / variance**2 if variance > 0 else 0.0
