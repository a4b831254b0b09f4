"""Atomic writes give the usual file mode: a dashboard running as another user can read the reports."""
from __future__ import annotations

import os
import stat

import pytest

from mindspore_doctor._io import atomic_write_text


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o027, 0o640)])
def test_a_new_file_gets_the_umask_mode(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        path = atomic_write_text(tmp_path / "report.json", "{}")
    finally:
        os.umask(old)
    assert _mode(path) == expected and path.read_text() == "{}"


def test_a_replaced_file_keeps_its_mode(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old")
    path.chmod(0o600)
    old = os.umask(0o022)
    try:
        atomic_write_text(path, "new")
    finally:
        os.umask(old)
    assert _mode(path) == 0o600 and path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
