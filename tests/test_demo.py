"""``msdoctor demo`` trains its buggy model with the Doctor and finds every planted bug."""
from __future__ import annotations

import json

from mindspore_doctor import demo


def test_demo_finds_the_planted_bugs(tmp_path, capsys):
    assert demo.main(["--summary-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    found = {f["code"] for f in json.loads((tmp_path / "doctor_report.json").read_text())["findings"]}
    assert {"MSD102", "MSD104", "MSD106", "MSD201", "MSD206"} <= found
    assert "MSD201" in out and (tmp_path / "repro_step9.npz").exists()
