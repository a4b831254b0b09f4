"""Rank identity and a collective that can never hang the Doctor.

Every exchange is two ``AllGather`` calls on the world group (payload lengths,
then the payloads padded to the longest), entered by every rank in the same
order. A rank whose own measurement failed still enters them, with an empty
payload, so its peers never wait for it. The collectives run in a helper
thread; if they do not finish within ``timeout_s`` (a peer died or stalls),
the Doctor stops waiting, marks the channel broken and never enters another
collective of its own. MindSpore cannot cancel a collective that has started:
the helper thread stays blocked until the backend itself gives up (MCCL on CPU
raises after about 30 s), but training continues.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RankInfo:
    rank: int = 0
    world_size: int = 1
    backend: str | None = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def rank_info() -> RankInfo:
    """This process's rank; a single process when ``mindspore.communication.init()`` was not called."""
    try:
        from mindspore.communication import get_group_size, get_rank
        from mindspore.communication.management import GlobalComm

        if not GlobalComm.INITED:
            return RankInfo()
        return RankInfo(int(get_rank()), int(get_group_size()), str(GlobalComm.BACKEND))
    except Exception:  # noqa: BLE001 - "not initialised" comes in several exception types across versions
        return RankInfo()


@dataclass
class GatherResult:
    """What every rank sent (None for a rank that sent nothing) and how long the exchange took."""

    payloads: list[bytes | None]
    seconds: float


@dataclass
class RankChannel:
    """Exchanges small byte strings between all ranks, under a timeout."""

    info: RankInfo
    timeout_s: float
    broken: str | None = None
    """Why this rank stopped taking part in the Doctor's collectives; None while healthy."""
    seconds: list[float] = field(default_factory=list)
    """Wall time of every completed exchange (cost per check, for the report)."""
    waited_s: float = 0.0
    """Seconds the exchange that broke the channel was waited for."""

    def all_gather(self, payload: bytes | None) -> GatherResult | None:
        """Every rank's payload, in rank order; None once the channel is broken (then never again)."""
        if self.broken is not None:
            return None
        outcome: dict[str, object] = {}

        def exchange() -> None:
            try:
                outcome["payloads"] = _all_gather_bytes(payload, self.info.world_size)
            except Exception as exc:  # noqa: BLE001 - reported through the caller as a broken channel
                outcome["error"] = _first_line(exc)

        started = time.perf_counter()
        worker = threading.Thread(target=exchange, name="mindspore_doctor-collective", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        waited = time.perf_counter() - started
        if worker.is_alive():
            self.broken = (f"a collective did not complete within collective_timeout_s={self.timeout_s:g} s "
                           f"(waited {waited:.1f} s): a rank died or stalls")
        elif "error" in outcome:
            self.broken = f"a collective failed after {waited:.1f} s: {outcome['error']}"
        if self.broken is not None:
            self.waited_s = waited
            return None
        self.seconds.append(waited)
        return GatherResult(outcome["payloads"], waited)  # type: ignore[arg-type]


def _all_gather_bytes(payload: bytes | None, world_size: int) -> list[bytes | None]:
    """Lengths first (-1: this rank has nothing), then the payloads padded to the longest.

    Bytes travel packed in int32, the integer type every backend's AllGather accepts
    (MCCL on CPU rejects uint8).
    """
    from mindspore import Tensor, ops

    gather = ops.AllGather()
    length = -1 if payload is None else len(payload)
    lengths = gather(Tensor(np.array([length], np.int32))).asnumpy().reshape(world_size)
    words = max(1, (int(lengths.max()) + 3) // 4)
    buffer = np.zeros(4 * words, np.uint8)
    if payload:
        buffer[: len(payload)] = np.frombuffer(payload, np.uint8)
    rows = gather(Tensor(buffer.view("<i4").reshape(1, words))).asnumpy().reshape(world_size, words)
    return [None if n < 0 else rows[i].astype("<i4").tobytes()[:n] for i, n in enumerate(lengths)]


def _first_line(exc: BaseException) -> str:
    """MindSpore errors start with banners of dashes; keep the first line that says something."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip().strip("-")]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
