"""End to end: train with the Doctor, serve the runs with a real MindInsight 2.3.1, read them back over REST.

MindInsight runs from its own virtualenv (``.venv-mindinsight``, created by
``scripts/mindinsight.sh`` on first use: a few minutes on a clean machine).
"""
from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from mindspore_doctor.export.mindinsight import lineage_values
from mindspore_doctor.findings import Report
from mindspore_doctor.signals import TrainingHistory

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "mindinsight.sh"
VENV_STAMP = ROOT / ".venv-mindinsight" / ".msdoctor-installed"
API = "/v1/mindinsight"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MindInsight:
    """A MindInsight server over one summary base dir, on a free loopback port."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir, self.port = base_dir, free_port()
        self.url = f"http://127.0.0.1:{self.port}{API}"

    def start(self) -> None:
        if not VENV_STAMP.exists():
            subprocess.run(["bash", str(SCRIPT), "install"], check=True, timeout=1200)
        out = subprocess.run(["bash", str(SCRIPT), "start", str(self.base_dir), str(self.port)], check=True,
                             timeout=120, capture_output=True, text=True).stdout
        assert out.strip() == f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.base_dir), str(self.port)], timeout=120,
                       capture_output=True)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        query = "&".join(f"{k}={urllib.parse.quote(str(v), safe='')}" for k, v in params.items())
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as response:
            return json.load(response)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def wait_for(self, fetch: Callable[[], Any], ready: Callable[[Any], bool], timeout: float = 90) -> Any:
        """MindInsight loads summaries in the background: poll until the answer is complete."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                last = fetch()
                if ready(last):
                    return last
            except (OSError, ValueError) as exc:  # not listening yet, or 4xx while the job is still loading
                last = exc
            time.sleep(0.5)
        raise AssertionError(f"MindInsight did not serve the expected data in {timeout}s; last answer: {last!r}")

    def scalars(self, train_id: str, tag: str, count: int) -> list[tuple[int, float]]:
        answer = self.wait_for(lambda: self.get("/datavisual/scalar/metadata", train_id=train_id, tag=tag),
                               lambda a: len(a.get("metadatas", [])) >= count)
        return [(m["step"], m["value"]) for m in answer["metadatas"]]


@pytest.fixture
def mindinsight_server(tmp_path_factory):
    """Factory: ``start(base_dir)``; every server started is stopped at teardown, also when the test fails."""
    servers: list[MindInsight] = []

    def start(base_dir: Path) -> MindInsight:
        server = MindInsight(base_dir)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


def train_tiny_net(summary_dir: Path, epochs: int = 2, with_collector: bool = False, extra_callbacks: tuple = (),
                   **doctor_options: Any):
    """A small MLP (with a suspicious Dropout, MSD104) trained with the Doctor on synthetic data."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.dataset import NumpySlicesDataset

    from mindspore_doctor import Doctor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    dataset = NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(16)
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dropout(p=0.9), nn.Dense(16, 2))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = ms.Model(net, loss, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    doctor = Doctor(summary_dir=summary_dir, probe_every=2, **doctor_options)
    callbacks = [doctor]
    if with_collector:
        callbacks.append(ms.SummaryCollector(str(summary_dir), collect_freq=1))
    model.train(epochs, dataset, callbacks=[*callbacks, *extra_callbacks], dataset_sink_mode=False)
    return doctor


def _read_run(run_dir: Path) -> tuple[Report, TrainingHistory]:
    report = Report.from_json((run_dir / "doctor_report.json").read_text())
    history = TrainingHistory.from_dict(json.loads((run_dir / "doctor_history.json").read_text()))
    return report, history


def _written_histogram(run_dir: Path, tag: str, step: int) -> Any:
    """The histogram message the Doctor wrote for ``tag`` at ``step``."""
    from mindspore_doctor.export.mindinsight import _summary_pb2, decode_records

    (path,) = run_dir.glob("*_doctor")
    for payload in decode_records(path.read_bytes()):
        event = _summary_pb2().Event.FromString(payload)
        for value in event.summary.value:
            if value.tag == tag and event.step == step:
                return value.histogram
    raise AssertionError(f"no histogram {tag} at step {step} in {path}")


def _assert_series(served: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [s for s, _ in served] == [s for s, _ in expected]
    assert np.allclose([v for _, v in served], [v for _, v in expected], rtol=1e-6)  # float32 on the wire


@pytest.mark.slow
def test_mindinsight_serves_the_doctors_scalars_histograms_and_lineage(tmp_path, mindinsight_server):
    base = tmp_path / "runs"
    train_tiny_net(base / "doctor_only")
    train_tiny_net(base / "with_collector", with_collector=True)
    server = mindinsight_server(base)

    jobs = server.wait_for(lambda: server.get("/datavisual/train-jobs"), lambda a: a.get("total") == 2)
    assert {j["train_id"] for j in jobs["train_jobs"]} == {"./doctor_only", "./with_collector"}
    lineages = server.wait_for(lambda: server.post("/lineagemgr/lineages", {}), lambda a: a.get("count") == 2)
    lineage_by_run = {o["summary_dir"]: o["model_lineage"] for o in lineages["object"]}

    for run in ("doctor_only", "with_collector"):
        train_id = f"./{run}"
        report, history = _read_run(base / run)
        plugins = server.wait_for(lambda: server.get("/datavisual/plugins", train_id=train_id),
                                  lambda a: a["plugins"]["histogram"])["plugins"]

        _assert_series(server.scalars(train_id, "doctor/loss/scalar", len(history.losses)), history.losses)
        first = history.parameter_order[0]
        grads = [(s.step, s.grad_norm[first]) for s in history.probed()]
        assert len(grads) >= 3
        _assert_series(server.scalars(train_id, f"doctor/grad_norm/{first}/scalar", len(grads)), grads)
        for severity, count in report.to_dict()["summary"].items():
            served = server.scalars(train_id, f"doctor/findings/{severity}/scalar", 1)
            assert served[-1] == (history.steps[-1].step, count)
        assert "doctor/findings/MSD104/scalar" in plugins["scalar"]

        histogram_tag = f"doctor/weight/{first}/histogram"
        assert histogram_tag in plugins["histogram"]
        histograms = server.get("/datavisual/histograms", train_id=train_id, tag=histogram_tag)["histograms"]
        steps_per_epoch = history.steps[-1].step // 2
        assert [h["step"] for h in histograms] == [steps_per_epoch, 2 * steps_per_epoch]
        served = histograms[-1]["buckets"]  # MindInsight re-bins: counts are approximate, the range is not
        written = _written_histogram(base / run, histogram_tag.rsplit("/", 1)[0], histograms[-1]["step"])
        assert written.count == np.prod(history.parameter_shapes[first])
        assert sum(b[2] for b in served) == pytest.approx(written.count, rel=0.1)
        assert (served[0][0], served[-1][0] + served[-1][1]) == pytest.approx((written.min, written.max), rel=1e-5)

        lineage = lineage_by_run[train_id]
        assert {k: lineage["user_defined"][k] for k in lineage_values(report)} == lineage_values(report)
        assert lineage["user_defined"]["doctor_warnings"] >= 1 and "MSD104" in lineage["user_defined"][
            "doctor_top_codes"]
        assert (lineage["optimizer"], lineage["epoch"], lineage["loss"]) == (
            "Momentum", 2, pytest.approx(history.losses[-1][1], rel=1e-6))

    collector_tags = server.get("/datavisual/plugins", train_id="./with_collector")["plugins"]["scalar"]
    assert "loss/auto/scalar" in collector_tags  # SummaryCollector's own data still there beside the Doctor's


@pytest.mark.slow
def test_several_runs_in_one_process_each_get_their_own_file(tmp_path):
    """One writer per directory: a second run into the same directory neither mixes nor loses steps."""
    from mindspore_doctor.export.mindinsight import read_scalars

    train_tiny_net(tmp_path / "run", epochs=1)
    train_tiny_net(tmp_path / "run", epochs=1)
    train_tiny_net(tmp_path / "other", epochs=1)
    files = sorted((tmp_path / "run").glob("*_doctor"))
    assert len(files) == 2 and len(list((tmp_path / "other").glob("*_doctor"))) == 1
    for path in files:
        assert [s for s, _ in read_scalars(path)["doctor/loss"]] == list(range(1, 7))
    assert len(list((tmp_path / "run").glob("*_lineage"))) == 2
