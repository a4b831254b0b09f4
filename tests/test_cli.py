"""``msdoctor``: the real console script on files written here, plus in-process runs for flag combinations.

Subprocess runs prove the installed entry point, the exit codes and that no
traceback ever reaches the user; flag and config combinations run ``main()``
in-process to keep the suite fast (each subprocess imports MindSpore).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from mindspore_doctor.cli import main
from test_sarif import assert_valid_sarif

_SCRIPT = Path(sys.executable).parent / "msdoctor"
MSDOCTOR = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "mindspore_doctor.cli"]

BUGGY = textwrap.dedent(
    """\
    from mindspore import nn


    class Head(nn.Cell):
        def __init__(self, num_classes=4):
            super().__init__()
            self.fc = nn.Dense(8, num_classes)
            self.dropout = nn.Dropout(p=0.9)

        def construct(self, x):
            return self.dropout(self.fc(x))
    """
)
DROPOUT_LINE = 8


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*MSDOCTOR, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# --- subprocess: the real console script --------------------------------------------------------

BAD_INPUTS = {
    "missing_file": (None, "no such file: missing.py"),
    "syntax_error": ("def broken(:\n    pass\n", "bad.py:1: syntax error"),
    "import_error": ("import no_such_module_xyz\n", "cannot import bad.py: ModuleNotFoundError"),
    "constructor_raises": (
        "from mindspore import nn\n\nclass Net(nn.Cell):\n    def __init__(self):\n"
        "        super().__init__()\n        raise ValueError('bad width 0')\n",
        "Net() raised ValueError: bad width 0 at",
    ),
    "no_cells": ("def helper(x):\n    return x\n", "no nn.Cell subclass that builds without arguments"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_file_target_gives_one_line_and_exit_2(tmp_path, case):
    source, expected = BAD_INPUTS[case]
    name = "missing.py" if source is None else "bad.py"
    if source is not None:
        write(tmp_path, name, source)
    proc = run_cli("lint", name, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_target_attr_that_is_not_a_cell_gives_exit_2(tmp_path):
    write(tmp_path, "models/__init__.py", "")
    write(tmp_path, "models/consts.py", "WIDTH = 42\n")
    proc = run_cli("lint", "models.consts:WIDTH", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "msdoctor: models.consts:WIDTH is a int, not an nn.Cell, a Cell class or a factory "
        "returning a Cell or (net, loss, optimizer)"
    )


def test_buggy_file_exits_1_with_the_json_contract(tmp_path):
    write(tmp_path, "model.py", BUGGY)
    proc = run_cli("lint", "model.py", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["version"] == 1 and data["tool"] == "mindspore_doctor"
    dropout = [f for f in data["findings"] if f["code"] == "MSD104"]
    assert len(dropout) == 1
    location = dropout[0]["location"]
    assert {k: location.get(k) for k in ("cell", "file", "line", "target")} == {
        "cell": "dropout",
        "file": "model.py",
        "line": DROPOUT_LINE,
        "target": "Head",
    }
    assert dropout[0]["severity"] == "warning" and dropout[0]["rule"] == "dropout-rate-suspicious"


def test_module_attr_factory_target(tmp_path):
    write(tmp_path, "models/__init__.py", "")
    write(
        tmp_path,
        "models/nets.py",
        BUGGY
        + textwrap.dedent(
            """
            def build(num_classes=4):
                net = Head(num_classes)
                return net, nn.SoftmaxCrossEntropyWithLogits(sparse=True), nn.Adam(net.trainable_params(), 1e-3)
            """
        ),
    )
    proc = run_cli("lint", "models.nets:build", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    assert {(f["code"], f["location"]["target"]) for f in findings} >= {("MSD104", "build")}


def test_no_import_executes_nothing(tmp_path):
    write(tmp_path, "untrusted.py", "raise SystemExit('this file was executed')\n" + BUGGY)
    proc = run_cli("lint", "untrusted.py", "--no-import", "--format", "json", cwd=tmp_path)
    assert "executed" not in proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stderr  # the source-only Dropout check still sees p=0.9
    findings = json.loads(proc.stdout)["findings"]
    assert any(f["code"] == "MSD104" and f["location"]["line"] == DROPOUT_LINE + 1 for f in findings)
    skipped = [f for f in findings if f["code"] == "MSD002" and f["location"].get("check") == "no-import"]
    assert len(skipped) == 1 and "MSD101" in skipped[0]["message"]


# --- in-process: flags, configuration, formats -----------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "model.py", BUGGY)
    return tmp_path


@pytest.mark.parametrize(
    "flags, code",
    [
        ([], 1),
        (["--ignore", "MSD104"], 0),
        (["--ignore", "dropout-rate-suspicious"], 0),
        (["--select", "MSD110,MSD113"], 0),
        (["--select", "MSD1"], 1),
        (["--fail-on", "error"], 0),
    ],
)
def test_select_ignore_fail_on(project, capsys, flags, code):
    assert main(["lint", "model.py", *flags]) == code
    out = capsys.readouterr().out
    assert ("MSD104" in out) == ("--ignore" not in flags and "MSD110,MSD113" not in flags)


def test_inline_suppression_on_the_building_line(project, capsys):
    text = BUGGY.replace("nn.Dropout(p=0.9)", "nn.Dropout(p=0.9)  # msdoctor: ignore[MSD104]")
    write(project, "model.py", text)
    assert main(["lint", "model.py"]) == 0
    assert "MSD104" not in capsys.readouterr().out


def test_pyproject_sets_defaults_and_flags_override(project, capsys):
    write(project, "pyproject.toml", '[tool.msdoctor]\nfail-on = "error"\nmax_drop_rate = 0.95\n')
    assert main(["lint", "model.py", "--fail-on", "warning"]) == 0  # p=0.9 is fine under 0.95
    write(project, "pyproject.toml", '[tool.msdoctor]\nfail-on = "error"\n')
    assert main(["lint", "model.py"]) == 0
    assert main(["lint", "model.py", "--fail-on", "warning"]) == 1
    capsys.readouterr()
    write(project, "pyproject.toml", "[tool.msdoctor]\nno_such_option = 1\n")
    assert main(["lint", "model.py"]) == 2
    assert "unknown [tool.msdoctor] key 'no_such_option'" in capsys.readouterr().err


def test_usage_errors_exit_2(project, capsys):
    assert main(["lint", "model.py", "--select", "MSD999"]) == 2
    assert "unknown rule code or prefix: 'MSD999'" in capsys.readouterr().err
    assert main(["lint", "model.py", "--format", "xml"]) == 2
    assert main([]) == 2
    assert main(["report", str(project)]) == 2
    assert "has no doctor_report.json" in capsys.readouterr().err


def test_report_tensorboard_flag(project, capsys, monkeypatch):
    (project / "doctor_report.json").write_text("{}")
    assert main(["report", str(project)]) == 2
    assert "nothing to do: give --html OUT and/or --tensorboard" in capsys.readouterr().err

    def convert_run(run_dir):
        if not (run_dir / "doctor_history.json").exists():
            raise ModuleNotFoundError("No module named 'tensorboardX'", name="tensorboardX")
        return run_dir / "events.out.tfevents.1.host"

    # the writer itself is tested in its own module; here only the command around it
    monkeypatch.setitem(sys.modules, "mindspore_doctor.export.tensorboard", SimpleNamespace(convert_run=convert_run))
    assert main(["report", str(project), "--tensorboard"]) == 2
    assert capsys.readouterr().err == "msdoctor: the TensorBoard export needs tensorboardX: pip install tensorboardX\n"
    (project / "doctor_history.json").write_text("{}")
    assert main(["report", str(project), "--tensorboard"]) == 0
    assert capsys.readouterr().err == f"msdoctor: wrote {project / 'events.out.tfevents.1.host'}\n"


def test_sarif_output_file(project, capsys):
    assert main(["lint", "model.py", "--format", "sarif", "--output", "out/lint.sarif"]) == 1
    assert capsys.readouterr().out == ""
    log = json.loads((project / "out" / "lint.sarif").read_text())
    assert_valid_sarif(log)
    dropout = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "MSD104")
    assert dropout["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "model.py"
    assert dropout["locations"][0]["physicalLocation"]["region"]["startLine"] == DROPOUT_LINE


def test_rules_and_rule_docs(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert "MSD104  dropout-rate-suspicious" in out and "MSD503" in out
    assert main(["rule", "MSD002"]) == 0
    out = capsys.readouterr().out
    assert "## What it does" in out and "## Options" not in out
    assert main(["rule", "loss-diverging"]) == 0  # the options the rule reads, from its definition
    assert "- `diverge_factor` = 2.0: MSD202: loss at or above this multiple" in capsys.readouterr().out
    assert main(["rule", "MSD999"]) == 2


def test_unexpected_error_is_one_line_unless_debug(project, capsys, monkeypatch):
    def broken_render(report, fmt):
        raise RuntimeError("boom")

    monkeypatch.setattr("mindspore_doctor.cli.render", broken_render)
    assert main(["lint", "model.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("msdoctor: internal error: RuntimeError: boom") and "Traceback" not in err
    assert main(["lint", "model.py", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err
