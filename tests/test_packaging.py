"""The package as users get it: an sdist, the wheel pip builds from it, installed non-editable, run from elsewhere.

The rule pages live at the repository's root (docs/rules), outside the package: these tests check that the
build ships them and that ``msdoctor rule`` and the reports' links find them in the installed copy.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RULE_PAGES = sorted(page.name for page in (ROOT / "docs" / "rules").glob("*.md"))
BUILD_INPUTS = ("setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "mindspore_doctor", "docs/rules")
"""What the build reads; copied out so that building leaves no egg-info or build folder in the checkout."""
REPORT_LINKS = """
import json, re
import mindspore_doctor
from mindspore_doctor.catalog import make_finding
from mindspore_doctor.export.html import render_html
from mindspore_doctor.export.sarif import to_sarif
from mindspore_doctor.findings import Report

report = Report()
report.add(make_finding("MSD104", "`head.dropout` drops 90 % of its inputs"))
rules = to_sarif(report)["runs"][0]["tool"]["driver"]["rules"]
print(json.dumps({
    "package": mindspore_doctor.__file__,
    "sarif": next(rule["helpUri"] for rule in rules if rule["id"] == "MSD104"),
    "html": re.findall(r'href="([^"]*MSD104[^"]*)"', render_html(report)),
}))
"""


def _run(*command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(the wheel built from the project's sdist, the folder it is installed into with ``pip --target``)."""
    work = tmp_path_factory.mktemp("packaging")
    source, dist, installed = work / "source", work / "dist", work / "installed"
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    _run(sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})",
         cwd=source)
    (sdist,) = dist.glob("*.tar.gz")
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check")
    _run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(sdist), cwd=work)
    (wheel,) = dist.glob("*.whl")
    _run(*pip, "install", "--no-deps", "--no-index", "--target", str(installed), str(wheel), cwd=work)
    return wheel, installed


def _run_installed(installed: Path, *command: str) -> str:
    """``command`` with the installed copy first on the path, from a folder outside the checkout."""
    env = {**os.environ, "PYTHONPATH": str(installed)}
    return _run(*command, cwd=installed.parent, env=env).stdout


def test_the_wheel_ships_every_rule_page(built):
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        shipped = sorted(Path(name).name for name in archive.namelist()
                         if name.startswith("mindspore_doctor/docs/rules/"))
    assert RULE_PAGES and shipped == RULE_PAGES


def test_the_wheel_ships_the_typing_of_the_config(built):
    """``DoctorConfig`` is built at import time; its stub is what type checkers and editors read."""
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"mindspore_doctor/config.pyi", "mindspore_doctor/py.typed"} <= names


def test_msdoctor_rule_prints_the_installed_page(built):
    _, installed = built
    out = _run_installed(installed, str(installed / "bin" / "msdoctor"), "rule", "MSD104")
    page, options = out.split("\n## Options", 1)  # the page, then the options its definition reads
    assert page.strip() == (ROOT / "docs" / "rules" / "MSD104.md").read_text(encoding="utf-8").strip()
    assert "`max_drop_rate` = 0.5" in options


def test_report_links_resolve_to_the_installed_page(built):
    _, installed = built
    links = json.loads(_run_installed(installed, sys.executable, "-c", REPORT_LINKS))
    assert Path(links["package"]).parent == installed / "mindspore_doctor"  # not the checkout's
    page = installed / "mindspore_doctor" / "docs" / "rules" / "MSD104.md"
    assert links["html"] and set(links["html"]) == {links["sarif"]} == {page.as_uri()}
    assert Path(unquote(urlparse(links["sarif"]).path)).is_file()
