"""End to end: train with the Doctor, serve the run with a real TensorBoard 2.21 (``scripts/tensorboard.sh``), read
it back over TensorBoard's HTTP data API and in a headless Chromium; TensorBoard and MindInsight side by side."""
from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mindspore_doctor.export import tensorboard as tb
from mindspore_doctor.findings import Report
from test_html_browser import ARTIFACTS, browser  # noqa: F401  (fixture)
from test_mindinsight_server import (ROOT, MindInsight, _assert_series, _read_run, mindinsight_server,  # noqa: F401
                                     train_tiny_net)

SCRIPT = ROOT / "scripts" / "tensorboard.sh"
EPOCHS = 3
ALL_STATUSES = ["STATUS_FAILURE", "STATUS_RUNNING", "STATUS_SUCCESS", "STATUS_UNKNOWN"]


class TensorBoard(MindInsight):
    """A TensorBoard server over one run base dir, on a free loopback port (MindInsight's HTTP helpers)."""

    def __init__(self, base_dir: Path) -> None:
        super().__init__(base_dir)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = base_dir / f".tensorboard-{self.port}.log"

    def start(self) -> None:
        out = subprocess.run(["bash", str(SCRIPT), "start", str(self.base_dir), str(self.port)], check=True,
                             timeout=120, capture_output=True, text=True).stdout
        assert out.strip() == self.url

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.base_dir), str(self.port)], timeout=60,
                       capture_output=True)

    def wait_for(self, fetch, ready, timeout: float = 90) -> Any:
        try:
            return super().wait_for(fetch, ready, timeout)
        except AssertionError as exc:  # say which server, and why
            raise AssertionError(f"TensorBoard: {exc}\n--- {self.log} ---\n{self.log.read_text()}") from None

    def scalars(self, run: str, tag: str, count: int) -> list[tuple[int, float]]:
        """The served series once it has ``count`` points (TensorBoard loads in the background)."""
        answer = self.wait_for(lambda: self.get("/data/plugin/scalars/scalars", run=run, tag=tag),
                               lambda a: len(a) >= count)
        return [(step, value) for _, step, value in answer]

    def errors(self) -> list[str]:
        """Error lines of the server's log (a file it could not read, a plugin that failed...)."""
        return [line for line in self.log.read_text().splitlines() if re.search(r"\bE\d{4}|ERROR|Traceback", line)]


@pytest.fixture
def tensorboard_server(request):
    """Factory: ``start(base_dir)``; every server started is stopped at teardown, also when the test fails."""

    def start(base_dir: Path) -> TensorBoard:
        server = TensorBoard(base_dir)
        request.addfinalizer(server.stop)
        server.start()
        return server

    return start


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """One training (3 epochs of 6 steps, a warning MSD104) shared by the read-back and the browser test."""
    run = tmp_path_factory.mktemp("tensorboard") / "runs" / "tiny"
    train_tiny_net(run, epochs=EPOCHS, tensorboard=True)
    return run


def plain_text(rendered: str) -> str:
    """What a reader sees of the Text plugin's HTML: tags dropped, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", rendered)).split())


def assert_findings_table(text: str, report: Report) -> None:
    """Every warning and error of the report has a row: severity, code, rule and location, as a reader sees them."""
    table = text[text.index("severity code location step message fix"):]
    for finding in report.findings:
        if finding.severity.value in ("error", "warning"):
            row = f"{finding.severity.value} {finding.code} {finding.rule} {' '.join(finding.where.split())} "
            assert row in table, (row, table)


def assert_serves_history(server: TensorBoard, run: str, run_dir: Path) -> None:
    _, history = _read_run(run_dir)
    _assert_series(server.scalars(run, "doctor/loss", len(history.losses)), history.losses)


def test_script_usage_errors_exit_2(tmp_path):
    for args in ([], ["restart", str(tmp_path)], ["start"], ["start", str(tmp_path), "http"], ["stop", "a", "1", "2"]):
        done = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and done.stderr.startswith("usage:"), args
    done = subprocess.run(["bash", str(SCRIPT), "stop", str(tmp_path), "6006"], capture_output=True, text=True)
    assert done.returncode == 0 and "none running" in done.stderr  # stopping twice is harmless


@pytest.mark.slow
def test_tensorboard_serves_scalars_text_histograms_hparams_and_layout(tiny_run, tensorboard_server):
    report, history = _read_run(tiny_run)
    server = tensorboard_server(tiny_run.parent)
    assert server.wait_for(lambda: server.get("/data/runs"), lambda a: a == ["tiny"]) == ["tiny"]
    plugins = server.get("/data/plugins_listing")
    assert all(plugins[p]["enabled"] for p in ("scalars", "custom_scalars", "histograms", "text", "hparams"))

    # Scalars: the loss at every step, the probes' series, finding counts ending at the report's.
    _assert_series(server.scalars("tiny", "doctor/loss", len(history.losses)), history.losses)
    tags = server.get("/data/plugin/scalars/tags")["tiny"]
    first = history.parameter_order[0]
    grads = [(s.step, s.grad_norm[first]) for s in history.probed()]
    assert len(grads) >= 3
    _assert_series(server.scalars("tiny", f"doctor/grad_norm/{first}", len(grads)), grads)
    for prefix in ("grad_norm/global", f"update_ratio/{first}", "dead_fraction/", "activation_mean_abs/"):
        assert any(t.startswith(f"doctor/{prefix}") for t in tags), prefix
    last_step = history.steps[-1].step
    for key, count in [*report.to_dict()["summary"].items(), *((f.code, None) for f in report.findings)]:
        assert f"doctor/findings/{key}" in tags
        if count is not None:
            assert server.scalars("tiny", f"doctor/findings/{key}", 1)[-1] == (last_step, count)

    # Text: one table per epoch end; the final one, at the last step too, replaces the last epoch's (TensorBoard
    # keeps the latest record of a step). Every warning and error with its location.
    steps_per_epoch = last_step // EPOCHS
    epoch_ends = list(range(steps_per_epoch, last_step + 1, steps_per_epoch))
    entries = server.wait_for(lambda: server.get("/data/plugin/text/text", run="tiny", tag=tb.FINDINGS_TAG),
                              lambda a: [e["step"] for e in a] == epoch_ends and "final" in a[-1]["text"])
    final = plain_text(entries[-1]["text"])
    assert "(final, end of training)" in final and "Diagnosis" in final
    assert "MSD104" in final
    assert_findings_table(final, report)

    # Histograms: the weights at each epoch end, the updates at probe steps; every element counted.
    histogram_tags = server.get("/data/plugin/histograms/tags")["tiny"]
    assert {f"doctor/weight/{first}", f"doctor/update/{first}"} <= set(histogram_tags)
    weights = server.get("/data/plugin/histograms/histograms", run="tiny", tag=f"doctor/weight/{first}")
    assert [step for _, step, _ in weights] == epoch_ends
    assert sum(count for _, _, count in weights[-1][2]) == np.prod(history.parameter_shapes[first])
    updates = server.get("/data/plugin/histograms/histograms", run="tiny", tag=f"doctor/update/{first}")
    assert updates and {step for _, step, _ in updates} <= {s.step for s in history.probed()}

    # HParams: the run's configuration and its final metrics, as the dashboard asks for them.
    experiment = server.wait_for(lambda: server.post("/data/plugin/hparams/experiment", {
        "experimentName": "", "hparamsLimit": 1000, "includeMetrics": True}), lambda a: a.get("metricInfos"))
    expected = tb.hparam_values(report.meta["run"])
    assert {h["name"] for h in experiment["hparamInfos"]} == set(expected)
    assert [m["name"]["tag"] for m in experiment["metricInfos"]] == list(tb.HPARAM_METRICS)
    groups = server.post("/data/plugin/hparams/session_groups", {
        "experimentName": "", "allowedStatuses": ALL_STATUSES, "startIndex": 0, "sliceSize": 1000,
        "colParams": [*({"hparam": h["name"], "includeInResult": True} for h in experiment["hparamInfos"]),
                      *({"metric": m["name"], "includeInResult": True} for m in experiment["metricInfos"])],
        "includeMetrics": True})["sessionGroups"]
    (group,) = groups
    assert group["name"] == "tiny" and group["sessions"][0]["status"] == "STATUS_SUCCESS"
    assert group["hparams"] == expected
    assert expected["optimizer"] == "Momentum" and expected["learning_rate"] == pytest.approx(0.05)
    metrics = {m["name"]["tag"]: (m["trainingStep"], m["value"]) for m in group["metricValues"]}
    counts = report.counts()
    assert metrics == {"doctor/loss": (last_step, pytest.approx(history.losses[-1][1], rel=1e-6)),
                       "doctor/findings/error": (last_step, counts["error"]),
                       "doctor/findings/warning": (last_step, counts["warning"])}

    # Custom scalars: the Doctor's categories, in order.
    layout = server.get("/data/plugin/custom_scalars/layout")
    assert [c["title"] for c in layout["category"]] == list(tb.CUSTOM_SCALARS)
    assert server.errors() == []


@pytest.mark.slow
def test_text_tab_shows_the_findings_table_in_chromium(tiny_run, tensorboard_server, browser):  # noqa: F811
    from selenium.webdriver.support.ui import WebDriverWait

    server = tensorboard_server(tiny_run.parent)
    browser.set_window_size(1400, 1000)
    browser.get(f"{server.url}/#text")
    # Polymer dashboards nest shadow roots: search them all for the rendered table holding the finding.
    find_table = """
        const code = arguments[0];
        function find(root) {
          for (const el of root.querySelectorAll('*')) {
            if (el.tagName === 'TABLE' && el.tHead && el.textContent.includes(code)) return el;
            if (el.shadowRoot) { const hit = find(el.shadowRoot); if (hit) return hit; }
          }
          return null;
        }
        return find(document);"""
    table = WebDriverWait(browser, 60, poll_frequency=0.5).until(
        lambda driver: driver.execute_script(find_table, "MSD104"))
    assert [h.text for h in table.find_elements("css selector", "th")] == [
        "severity", "code", "location", "step", "message", "fix"]
    assert table.size["width"] > 400 and table.size["height"] > 40
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", table)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "tensorboard_text.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000


@pytest.mark.slow
def test_tensorboard_and_mindinsight_share_a_run_with_summary_collector(tmp_path, tensorboard_server,
                                                                        mindinsight_server):  # noqa: F811
    """Doctor (TensorBoard + MindInsight files) and MindSpore's SummaryCollector write into one directory:
    each dashboard reads its own files and is not confused by the others'."""
    run = tmp_path / "runs" / "both"
    train_tiny_net(run, with_collector=True, tensorboard=True)
    _, history = _read_run(run)
    board, insight = tensorboard_server(run.parent), mindinsight_server(run.parent)

    assert board.wait_for(lambda: board.get("/data/runs"), lambda a: a == ["both"]) == ["both"]
    assert_serves_history(board, "both", run)
    assert all(t.startswith("doctor/") for t in board.get("/data/plugin/scalars/tags")["both"])
    assert board.get("/data/plugin/text/tags") == {"both": [tb.FINDINGS_TAG]}

    jobs = insight.wait_for(lambda: insight.get("/datavisual/train-jobs"), lambda a: a.get("total") == 1)
    assert [j["train_id"] for j in jobs["train_jobs"]] == ["./both"]
    _assert_series(insight.scalars("./both", "doctor/loss/scalar", len(history.losses)), history.losses)
    plugins = insight.get("/datavisual/plugins", train_id="./both")["plugins"]
    assert "loss/auto/scalar" in plugins["scalar"]  # the collector's own series still there
    assert board.errors() == []
