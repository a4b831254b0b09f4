"""Cheap, backend-neutral fingerprints: of every parameter, and of the samples a rank trains on.

A parameter's fingerprint is (sum, sum of squares, three strided samples),
computed on the device by one compiled cell and read back as one small vector
(5 floats per parameter), so ranks compare their weights without moving them.
"""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np
from mindspore import Parameter, nn, ops
import mindspore as ms

FINGERPRINT_WIDTH = 5
"""Numbers per parameter: sum, sum of squares, first, middle and last element."""
SAMPLE_DIGEST_BYTES = 8


class ParameterFingerprint(nn.Cell):
    """One graph computing every parameter's fingerprint; reading it never changes a weight."""

    def __init__(self, parameters: Sequence[Parameter]) -> None:
        super().__init__(auto_prefix=False)
        self._parameters = tuple(parameters)
        self.names = [p.name for p in self._parameters]

    def construct(self) -> Any:
        rows = []
        for param in self._parameters:
            flat = ops.stop_gradient(param).astype(ms.float32).reshape(-1)
            size = flat.shape[0]
            rows.append(ops.stack([flat.sum(), (flat * flat).sum(), flat[0], flat[size // 2], flat[size - 1]]))
        return ops.stack(rows)

    def measure(self) -> np.ndarray:
        """A (parameters, 5) float64 array; an empty one for a network without parameters."""
        if not self._parameters:
            return np.zeros((0, FINGERPRINT_WIDTH))
        return np.asarray(self().asnumpy(), np.float64)


def sample_digests(batch: Sequence[Any]) -> list[str]:
    """One short hash per sample (row along axis 0) of a batch, over all its columns."""
    columns = [np.asarray(t.asnumpy() if hasattr(t, "asnumpy") else t) for t in batch]
    columns = [c for c in columns if c.ndim >= 1]
    if not columns:
        return []
    rows = min(c.shape[0] for c in columns)
    digests = []
    for i in range(rows):
        h = hashlib.blake2b(digest_size=SAMPLE_DIGEST_BYTES)
        for column in columns:
            h.update(np.ascontiguousarray(column[i]).tobytes())
        digests.append(h.hexdigest())
    return digests
