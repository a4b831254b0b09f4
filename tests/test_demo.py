"""``msdoctor demo`` trains its buggy model with the Doctor, finds every planted bug and says where to look."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mindspore_doctor import cli, demo


def test_demo_finds_the_planted_bugs(tmp_path, capsys):
    run = tmp_path / "demo-run"
    assert demo.main(["--summary-dir", str(run)]) == 0
    out = capsys.readouterr().out
    found = {f["code"] for f in json.loads((run / "doctor_report.json").read_text())["findings"]}
    assert {"MSD102", "MSD104", "MSD106", "MSD201", "MSD206"} <= found
    assert "MSD201" in out and (run / "repro_step9.npz").exists()
    assert (run / "doctor_report.html").is_file()
    assert f"HTML report:  {run / 'doctor_report.html'}" in out
    assert f"scripts/tensorboard.sh start {tmp_path}  (then open the URL it prints, port 6006)" in out
    assert f"scripts/mindinsight.sh start {tmp_path}  (then open the URL it prints, port 8080)" in out


def test_cli_demo_takes_its_options_and_writes_under_runs_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    trained = []
    monkeypatch.setattr(demo, "train", lambda summary_dir, epochs: trained.append((summary_dir, epochs)))
    assert cli.main(["demo", "--epochs", "1"]) == 0
    assert cli.main(["demo", "--summary-dir", "mine", "--epochs", "3"]) == 0
    (default_dir, epochs), explicit = trained
    assert re.fullmatch(r"runs/demo-\d{8}-\d{6}", default_dir.as_posix()) and epochs == 1
    assert explicit == (Path("mine"), 3)
    assert "start runs  " in capsys.readouterr().out


def test_demo_help_shows_the_demo_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["demo", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "msdoctor demo" in out and "--summary-dir DIR" in out and "--epochs" in out


def test_without_the_repository_scripts_the_plain_commands_are_shown(tmp_path, monkeypatch):
    monkeypatch.setattr(demo, "_SCRIPTS", tmp_path / "no-scripts")
    text = demo.how_to_view(Path("runs/demo-1"))
    assert len(text.splitlines()) <= 6
    assert "tensorboard --logdir runs --host 127.0.0.1" in text and "docs/reports.md" in text
