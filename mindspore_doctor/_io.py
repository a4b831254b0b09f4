"""A run directory's files, and atomic writes: a reader (or a crash) never sees a half-written report."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

REPORT_FILE = "doctor_report.json"
HISTORY_FILE = "doctor_history.json"
HTML_FILE = "doctor_report.html"
LABEL_ISSUES_FILE = "doctor_label_issues.csv"
"""Every sample MSD311's sources flag (``export/labels.py``), most suspect first."""
LABEL_SUSPECTS_FILE = "doctor_label_suspects.npz"


def _umask() -> int:
    """The process umask, read without setting it: the ``os.umask`` pair briefly changes it for every thread."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _file_mode(target: Path) -> int:
    """The mode ``target`` keeps if it exists, else the one ``open()`` would give it (mkstemp's is 0600)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write to a temp file in the same directory, fsync, then rename over ``path``.

    The file gets the usual mode (umask-based, or the replaced file's) so that a
    dashboard running as another user can read it, as it reads the event files.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), _file_mode(target))
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno and not exc.filename:  # a write: say which file it was for
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        raise
    return target


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))
