"""SIGTERM, whose default ends the process at once, before any ``finally``: while a run is on, the Doctor ends the run
first (cells restored, report written, MSD003), then the process dies by the same signal, as it would without it."""
from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable


class TrainingTerminated(BaseException):
    """What ended training when a signal did: named in MSD003, never raised to the user."""


class SigtermReport:
    """``catch()`` when a run starts, ``release()`` when it has ended. ``end_run(error)`` ends the run (a no-op when
    it is ending already: the signal is then sent again by ``release()``)."""

    def __init__(self, end_run: Callable[[BaseException], None]) -> None:
        self._end_run = end_run
        self._installed = False
        self._pending: int | None = None

    def catch(self) -> None:
        """Only where SIGTERM is at its default (a handler of the user's or MindSpore's stays theirs) and only in the
        main thread (the only one Python lets set a handler)."""
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_signal)
            self._installed = True

    def release(self) -> None:
        """SIGTERM's default back; a SIGTERM that came while the run was on is sent again now."""
        if self._installed:
            self._installed = False
            if signal.getsignal(signal.SIGTERM) == self._on_signal:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if self._pending is not None:
            signum, self._pending = self._pending, None
            os.kill(os.getpid(), signum)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._pending = signum
        self._end_run(TrainingTerminated(f"signal {signal.Signals(signum).name}"))
