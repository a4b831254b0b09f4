"""A progress line on stderr for the long workflows (``sanity()``'s phases, ``tune``'s trials)."""
from __future__ import annotations

import sys
import time


class Progress:
    """A plain ``\\r`` progress bar on stderr; where stderr is not a terminal, one line per phase."""

    def __init__(self, label: str, total: int, enabled: bool = True) -> None:
        self.label, self.total, self.enabled = label, max(1, total), enabled
        self._tty = enabled and sys.stderr.isatty()
        self._start = time.perf_counter()

    def update(self, done: int, note: str = "") -> None:
        if self._tty:
            filled = int(20 * done / self.total)
            sys.stderr.write(f"\r{self.label:<18}[{'#' * filled}{'.' * (20 - filled)}] {done}/{self.total} {note}  ")
            sys.stderr.flush()

    def close(self, note: str = "") -> None:
        if self.enabled:
            prefix = "\r" if self._tty else ""
            sys.stderr.write(f"{prefix}{self.label:<18}done in {time.perf_counter() - self._start:.1f}s {note}"
                             f"{' ' * 24}\n")
            sys.stderr.flush()
