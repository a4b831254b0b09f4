"""The run's analyses (error analysis, error budget, label errors) in every report: the HTML page, the text printed at
the end of training, TensorBoard (read back with TensorBoard's own event reader), and the label files in
``summary_dir`` with the thumbnails drawn from them. Built from report meta dicts as the run writes them."""
from __future__ import annotations

import base64
import csv
import io
import re

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mindspore_doctor import cli
from mindspore_doctor._io import REPORT_FILE
from mindspore_doctor.analysis.errors import analyse_errors
from mindspore_doctor.analysis.labels import label_report
from mindspore_doctor.export import html, labels, tensorboard as tb
from mindspore_doctor.export.summary import analysis_text
from mindspore_doctor.findings import Report
from test_html_browser import browser  # noqa: F401  (fixture)

CLASSES = 4
SECTIONS = {"error_analysis": "error-analysis", "error_budget": "error-budget", "label_issues": "label-errors"}


def _data(n: int = 80, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels (8 of them flipped 1 -> 3), the true classes and confident logits of the true class."""
    rng = np.random.default_rng(seed)
    truth = np.arange(n) % CLASSES
    given = truth.copy()
    flipped = np.flatnonzero(truth == 1)[:8]
    given[flipped] = 3
    logits = rng.normal(0, 0.3, (n, CLASSES))
    logits[np.arange(n), truth] += 4.0
    return given, truth, logits, flipped


def _probs(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def meta() -> dict:
    given, _, logits, _ = _data()
    report = label_report(given, _probs(logits), source="eval", method="mean of <b>3</b> evaluations",
                          positions_note="index in the order the eval dataset yields")
    return {
        "error_analysis": analyse_errors("multiclass", logits, given, top=5),
        "error_budget": {
            "metric": "error", "target": None, "target_source": "unknown", "baseline_error": 0.75,
            "train_error": 0.02, "eval_error": 0.10, "target_eval_error": None, "holdout_error": None,
            "rows": [
                {"term": "target error", "value": 0.75, "bound": "upper", "note": "the trivial predictor's",
                 "noise": None},
                {"term": "avoidable bias", "value": 0.02, "bound": "upper", "note": "at most the train error",
                 "noise": 0.01},
                {"term": "variance", "value": 0.08, "bound": None, "note": "eval error - train error", "noise": 0.03},
                {"term": "distribution shift", "value": None, "bound": None, "note": "not measured", "noise": None},
                {"term": "validation-set overfitting", "value": None, "bound": None, "note": "not measured",
                 "noise": None}],
            "dominant": "variance", "remedies": ["Add more training data.", "Add normalisation.",
                                                 "Add data augmentation."]},
        "label_issues": [report.to_dict()],
    }


def _section(page: str, section_id: str) -> str:
    return page.split(f'id="{section_id}"', 1)[1].split("</section>", 1)[0]


def _run_dir(tmp_path, meta: dict, inputs: np.ndarray | None = None):
    """A finished run's directory: its report, and the label files the run writes beside it."""
    report = Report(meta=dict(meta))
    (tmp_path / REPORT_FILE).write_text(report.to_json())
    reports = meta.get("label_issues", [])
    suspects = {}
    if inputs is not None:
        positions = np.array([s["position"] for s in reports[0]["flagged"]])
        suspects["eval"] = (inputs[positions], positions)
    labels.write_label_files(tmp_path, reports, suspects)
    return report


# --- the HTML report -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [(), ("error_analysis",), ("error_budget",), ("label_issues",),
                                  tuple(SECTIONS)])
def test_each_section_only_when_its_meta_key_exists(meta, keys):
    page = html.render_html(Report(meta={k: meta[k] for k in keys}))
    for key, section in SECTIONS.items():
        assert (f'id="{section}"' in page) == (key in keys), (key, keys)
    if len(keys) == len(SECTIONS):  # after the findings, in the order of the guide
        assert page.index('id="findings"') < page.index('id="error-analysis"') < page.index(
            'id="error-budget"') < page.index('id="label-errors"')


def test_error_analysis_section_tables_and_chart(meta):
    analysis = meta["error_analysis"]
    section = _section(html.render_html(Report(meta={"error_analysis": analysis})), "error-analysis")
    rows = re.findall(r"<tr class=\"(worst)?\"><td>(\d+)</td>", section.split('id="per-class-table"')[1])
    assert [int(label) for _, label in rows] == list(range(CLASSES))
    assert {int(label) for worst, label in rows if worst} == set(analysis["worst"][:20])
    assert "<svg" in section  # precision / recall / F1 per class
    confused = section.split('id="confused-table"')[1].split("</table>")[0]
    first = analysis["confused"][0]
    assert (first["true"], first["predicted"]) == (3, 1)  # the flipped labels: given 3, the network says 1
    assert "3 → 1" in confused
    top = section.split('id="top-loss-table"')[1].split("</table>")[0]
    assert top.count("<tr>") == 1 + len(analysis["top_loss"])


def test_regression_section_by_target_range():
    rng = np.random.default_rng(1)
    target = rng.uniform(0, 10, (50, 1))
    outputs = target + rng.normal(0, 0.1, (50, 1)) + (target > 8) * 2.0  # the top range is off
    analysis = analyse_errors("regression", outputs, target, top=3)
    page = html.render_html(Report(meta={"error_analysis": analysis}))
    section = _section(page, "error-analysis")
    assert 'id="target-range-table"' in section and 'id="per-class-table"' not in section
    table = section.split('id="target-range-table"')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + len(analysis["by_target_range"])
    assert analysis_text({"error_analysis": analysis}).splitlines()[0].startswith("Error analysis (regression")


def test_budget_section_marks_bounds_noise_and_the_dominant_term(meta):
    section = _section(html.render_html(Report(meta={"error_budget": meta["error_budget"]})), "error-budget")
    assert "≤ 75.00 %" in section and "≤ 2.00 % ± 1.00 %" in section and "8.00 % ± 3.00 %" in section
    assert re.search(r'<tr class="dominant"><td>variance \(dominant\)</td>', section)
    remedies = section.split('id="budget-remedies"')[1]
    assert [remedies.index(r) for r in meta["error_budget"]["remedies"]] == sorted(
        remedies.index(r) for r in meta["error_budget"]["remedies"])
    assert section.count("—") == 2  # the terms not measured
    quiet = {**meta["error_budget"], "dominant": None, "remedies": []}  # no term above its noise
    section = _section(html.render_html(Report(meta={"error_budget": quiet})), "error-budget")
    assert 'id="budget-no-dominant"' in section and 'id="budget-remedies"' not in section
    assert analysis_text({"error_budget": quiet}).splitlines()[-1].strip().startswith("no dominant term")
    assert "No dominant term" in tb.error_budget_markdown(quiet)


def test_label_section_thumbnails_from_the_run_directory(meta, tmp_path):
    """``msdoctor report RUN_DIR --html OUT`` works from the files alone: the thumbnails come from the npz."""
    images = np.random.default_rng(2).uniform(size=(80, 3, 12, 12)).astype(np.float32)  # CHW
    _run_dir(tmp_path, meta, images)
    out = tmp_path / "elsewhere" / "page.html"
    assert cli.main(["report", str(tmp_path), "--html", str(out)]) == cli.EXIT_OK
    section = _section(out.read_text(encoding="utf-8"), "label-errors")
    flagged = meta["label_issues"][0]["flagged"]
    assert 3 <= len(flagged) <= 20
    sources = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="sample (\d+)">', section)
    assert [int(p) for _, p in sources] == [s["position"] for s in flagged]
    from matplotlib import image as mpimg

    picture = mpimg.imread(io.BytesIO(base64.b64decode(sources[0][0])), format="png")
    assert picture.shape[:2] == (96, 96) and picture.shape[2] in (3, 4)
    assert "&lt;b&gt;3&lt;/b&gt;" in section  # the method line is escaped
    assert "estimated noise" in section and "3 → 1" in section


def test_label_section_without_inputs_or_for_tabular_data_is_a_table(meta, tmp_path):
    page = html.render_html(Report(meta={"label_issues": meta["label_issues"]}), run_dir=tmp_path)  # no npz
    assert "<img" not in page and 'class="suspects-table"' in page
    _run_dir(tmp_path, meta, np.random.default_rng(3).normal(size=(80, 13)))  # wine-like rows
    page = html.render_html(Report(meta={"label_issues": meta["label_issues"]}), run_dir=tmp_path)
    assert "<img" not in page and page.count("<tr><td class=\"num\">") >= len(meta["label_issues"][0]["flagged"])


# --- the label files and thumbnails ---------------------------------------------------------------------------


def test_label_files_round_trip(meta, tmp_path):
    images = np.random.default_rng(4).uniform(size=(80, 28, 28, 1)).astype(np.float32)
    _run_dir(tmp_path, meta, images)
    flagged = meta["label_issues"][0]["flagged"]
    rows = labels.read_label_issues(tmp_path)
    assert [(r["source"], r["position"], r["given"], r["likely"]) for r in rows] == [
        ("eval", s["position"], s["given"], s["likely"]) for s in flagged]
    assert [r["quality"] for r in rows] == pytest.approx([s["quality"] for s in flagged], rel=1e-5)
    with (tmp_path / labels.LABEL_ISSUES_FILE).open() as fh:
        assert next(csv.reader(fh)) == list(labels.CSV_COLUMNS)
    stored = labels.read_label_suspects(tmp_path)
    inputs, positions = stored["eval"]
    assert positions.tolist() == [s["position"] for s in flagged]
    np.testing.assert_array_equal(inputs, images[positions])
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp file


def test_label_files_refuse_inputs_that_do_not_match_positions(tmp_path):
    with pytest.raises(ValueError, match="3 input"):
        labels.write_label_files(tmp_path, [], {"eval": (np.zeros((3, 4)), np.arange(2))})
    assert labels.read_label_suspects(tmp_path) == {}
    ragged = [np.zeros((2, 3)), np.zeros((4, 5))]
    assert labels.write_label_files(tmp_path, [], {"eval": (ragged, np.arange(2))}) == [
        tmp_path / labels.LABEL_ISSUES_FILE]  # no npz: nothing to draw
    (tmp_path / labels.LABEL_SUSPECTS_FILE).write_bytes(b"not a zip")
    assert labels.read_label_suspects(tmp_path) == {}  # a broken file costs the thumbnails, not the report


@pytest.mark.parametrize("shape, expected", [
    ((28, 28), (28, 28)),            # HW gray
    ((1, 28, 28), (28, 28)),         # CHW gray
    ((3, 32, 32), (32, 32, 3)),      # CHW colour
    ((32, 32, 3), (32, 32, 3)),      # HWC colour
    ((32, 32, 4), (32, 32, 3)),      # HWC with alpha
    ((28, 28, 1), (28, 28)),         # HWC gray
    ((1, 3, 16, 16), (16, 16, 3)),   # one sample with its batch axis
])
def test_thumbnails_of_images(shape, expected):
    sample = np.random.default_rng(5).normal(size=shape).astype(np.float32) * 40 + 7
    image = labels.image_of(sample)
    assert image.shape == expected and image.min() == 0.0 and image.max() == 1.0  # min-max scaled
    png = labels.thumbnail_png(sample)
    assert png.startswith(b"\x89PNG")
    from matplotlib import image as mpimg

    assert 64 < max(mpimg.imread(io.BytesIO(png), format="png").shape[:2]) <= labels.THUMBNAIL_SIDE


@pytest.mark.parametrize("sample", [np.arange(13.0), np.arange(64).reshape(1, 64), np.zeros((2, 5)),
                                    np.array(["a", "b"]), np.zeros((5, 6, 7, 8))])
def test_no_thumbnail_for_non_image_inputs(sample):
    assert labels.image_of(sample) is None and labels.thumbnail_png(sample) is None


def test_thumbnail_of_constant_or_nonfinite_input():
    assert labels.image_of(np.full((8, 8), 3.0)).max() == 0.0
    image = labels.image_of(np.where(np.eye(8, dtype=bool), np.nan, np.arange(64.0).reshape(8, 8)))
    assert np.isfinite(image).all() and image[0, 0] == 0.0
    assert labels.fit_side(np.zeros((400, 200))).shape == (80, 40)  # large ones shrink by striding
    assert labels.fit_side(np.zeros((8, 8))).shape == (96, 96)  # small ones grow by whole factors


# --- the text printed at the end of training ------------------------------------------------------------------


def test_text_block_a_few_lines_each(meta):
    text = analysis_text(meta)
    lines = text.splitlines()
    assert lines[0].startswith("Error analysis (multiclass, the last evaluation's 80 samples)")
    assert any("most confused, true → predicted: 3 → 1" in line for line in lines)
    budget = next(i for i, line in enumerate(lines) if line.startswith("Error budget"))
    assert "target error ≤ 75.00 %" in lines[budget] and "dominant: variance" in text
    assert "1) Add more training data. 2) Add normalisation." in " ".join(text.split())
    label = next(line for line in lines if line.startswith("Label errors"))
    assert label.startswith("Label errors (eval: 80 samples, 4 classes): estimated noise")
    assert len(lines) <= 16 and all(len(line) <= 100 for line in lines)
    assert analysis_text({}) == "" and analysis_text({"label_issues": []}) == ""


# --- TensorBoard ----------------------------------------------------------------------------------------------


def _events(folder) -> EventAccumulator:
    events = EventAccumulator(str(folder), size_guidance={"tensors": 0, "images": 0})
    events.Reload()
    return events


def test_tensorboard_text_tables_and_suspect_grid(meta, tmp_path):
    _run_dir(tmp_path, meta, np.random.default_rng(6).uniform(size=(80, 1, 8, 8)))
    writer = tb.TensorBoardWriter(tmp_path, flush_seconds=float("inf"))
    writer.last_step = 42
    writer.close(Report(meta=meta))
    events = _events(tmp_path)
    assert events.Tags()["images"] == [f"{tb.SUSPECTS_TAG}/eval"]
    (image,) = events.Images(f"{tb.SUSPECTS_TAG}/eval")
    assert image.step == 42 and image.width > 400 and image.encoded_image_string.startswith(b"\x89PNG")
    text = {tag: events.Tensors(tag)[-1].tensor_proto.string_val[0].decode()
            for tag in (tb.ERROR_ANALYSIS_TAG, tb.ERROR_BUDGET_TAG, tb.LABEL_ERRORS_TAG)}
    assert "| true → predicted | count | share of the true class |" in text[tb.ERROR_ANALYSIS_TAG]
    assert "| **variance** | **8.00 % ± 3.00 %** |" in text[tb.ERROR_BUDGET_TAG]
    assert "1. Add more training data.\n2. Add normalisation." in text[tb.ERROR_BUDGET_TAG]
    flagged = meta["label_issues"][0]["flagged"]
    assert f"| {flagged[0]['position']} | {flagged[0]['given']} | {flagged[0]['likely']} |" in text[tb.LABEL_ERRORS_TAG]


def test_tensorboard_without_analyses_or_images_writes_no_such_tag(meta, tmp_path):
    writer = tb.TensorBoardWriter(tmp_path / "none")
    writer.close(Report())
    tags = _events(tmp_path / "none").Tags()
    assert tags["images"] == [] and tb.LABEL_ERRORS_TAG not in tags["tensors"]
    writer = tb.TensorBoardWriter(tmp_path / "tabular")  # label errors of tabular data: the table, no grid
    labels.write_label_files(tmp_path / "tabular", meta["label_issues"],
                             {"eval": (np.zeros((2, 13)), np.array([s["position"] for s in
                                                                    meta["label_issues"][0]["flagged"][:2]]))})
    writer.close(Report(meta={"label_issues": meta["label_issues"]}))
    tags = _events(tmp_path / "tabular").Tags()
    assert tags["images"] == [] and tb.LABEL_ERRORS_TAG in tags["tensors"]


def test_a_failing_analysis_section_keeps_the_final_findings_table(meta, tmp_path, monkeypatch):
    writer = tb.TensorBoardWriter(tmp_path, flush_seconds=float("inf"))

    def broken(*args, **kwargs):
        raise RuntimeError("no grid today")

    monkeypatch.setattr(writer, "write_analysis", broken)
    with pytest.raises(RuntimeError):
        writer.close(Report(meta=meta))
    assert writer.closed and tb.FINDINGS_TAG in _events(tmp_path).Tags()["tensors"]


def test_analysis_top_zero_shows_no_suspects_anywhere(meta, tmp_path):
    """``analysis_top=0`` (no rows in the end-of-run tables) is honoured, not read as "unset"."""
    _run_dir(tmp_path, meta, np.random.default_rng(6).uniform(size=(80, 1, 8, 8)))
    quiet = {**meta, "config": {"analysis_top": 0}}
    writer = tb.TensorBoardWriter(tmp_path, flush_seconds=float("inf"))
    writer.close(Report(meta=quiet))
    assert _events(tmp_path).Tags()["images"] == []
    page = html.render_html(Report(meta=quiet), run_dir=tmp_path)
    assert 'id="top-loss-table"' not in _section(page, "error-analysis")
    assert "<img" not in _section(page, "label-errors") and 'id="per-class-table"' in page


def test_tensorboard_conversion_of_a_finished_run_draws_the_analyses(meta, tmp_path):
    _run_dir(tmp_path, meta, np.random.default_rng(7).uniform(size=(80, 8, 8)))
    assert cli.main(["report", str(tmp_path), "--tensorboard"]) == cli.EXIT_OK
    tags = _events(tmp_path).Tags()
    assert tags["images"] == [f"{tb.SUSPECTS_TAG}/eval"]
    assert {tb.ERROR_ANALYSIS_TAG, tb.ERROR_BUDGET_TAG, tb.LABEL_ERRORS_TAG} <= set(tags["tensors"])


@pytest.mark.slow
def test_analysis_sections_render_in_chromium(meta, tmp_path, browser):  # noqa: F811
    """The sections in a real browser, opened from disk: thumbnails decoded, the chart drawn, no console error."""
    from selenium.webdriver.common.by import By

    _run_dir(tmp_path, meta, np.random.default_rng(8).uniform(size=(80, 28, 28, 3)))
    page = html.write_run_report(tmp_path)
    browser.get(page.as_uri())
    thumbnails = browser.find_elements(By.CSS_SELECTOR, "#label-errors figure.suspect img")
    assert len(thumbnails) == len(meta["label_issues"][0]["flagged"])
    assert all(browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) == 84
               for img in thumbnails)  # 28 px x 3
    chart = browser.find_element(By.CSS_SELECTOR, "#error-analysis figure svg")
    assert chart.size["width"] > 400
    assert browser.find_element(By.CSS_SELECTOR, "#error-budget tr.dominant").text.startswith("variance")
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


@pytest.mark.parametrize("kind, outputs, labels_", [
    ("binary", np.linspace(-3, 3, 40)[:, None], (np.arange(40) % 3 == 0).astype(np.float32)[:, None]),
    ("multiclass", np.random.default_rng(9).normal(size=(6, 5, 7)), np.arange(30).reshape(6, 5) % 7),  # per token
    ("multilabel", np.random.default_rng(10).normal(size=(20, 4)), np.random.default_rng(11).random((20, 4)) > 0.5),
])
def test_every_task_the_evaluation_infers_renders_everywhere(kind, outputs, labels_, tmp_path):
    analysis = analyse_errors(kind, outputs, labels_, family="logits", top=5)
    meta = {"error_analysis": analysis}
    section = _section(html.render_html(Report(meta=meta)), "error-analysis")
    assert 'id="per-class-table"' in section and analysis["task"] in section
    if analysis["unit"] == "token":
        assert f"{analysis['units']} tokens" in section
        first = analysis["top_loss"][0]
        assert f"#{first['position']} at {first['at'][0]}<" in section  # where in the sequence
    assert analysis_text(meta).startswith(f"Error analysis ({kind}")
    assert "| class | precision | recall | F1 | support |" in tb.error_analysis_markdown(analysis)


# --- end to end: a real training --------------------------------------------------------------------------------


def test_a_training_with_an_eval_set_shows_its_analyses_in_every_report(tmp_path, capsys):
    """Digits (8x8 images) with 10 % flipped labels, an MLP trained with the Doctor: the HTML page has the three
    sections and the suspects' thumbnails, TensorBoard the text tables and the grid, the run directory the files."""
    import mindspore as ms
    from mindspore import nn
    from mindspore.dataset import NumpySlicesDataset
    from sklearn.datasets import load_digits

    from mindspore_doctor import Doctor

    digits = load_digits()
    x = (digits.images[:500, None] / 8.0 - 1.0).astype(np.float32)  # (N, 1, 8, 8)
    y = digits.target[:500].astype(np.int32)
    rng = np.random.default_rng(0)
    flip = rng.random(len(y)) < 0.10
    y[flip] = (y[flip] + rng.integers(1, 10, flip.sum())) % 10
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Flatten(), nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
    model = ms.Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                     nn.Adam(net.trainable_params(), 0.01))
    doctor = Doctor(summary_dir=str(tmp_path), tensorboard=True, mindinsight=False,
                    eval_dataset=NumpySlicesDataset({"x": x[400:], "y": y[400:]}, shuffle=False).batch(50))
    model.train(4, NumpySlicesDataset({"x": x[:400], "y": y[:400]}, shuffle=False).batch(40), callbacks=[doctor],
                dataset_sink_mode=False)

    meta = doctor.report.meta
    assert meta["error_analysis"]["task"] == "multiclass" and meta["error_budget"]["rows"]
    flagged = {r["source"]: r["flagged"] for r in meta["label_issues"]}
    assert flagged.get("eval")
    page = (tmp_path / "doctor_report.html").read_text(encoding="utf-8")
    for section in SECTIONS.values():
        assert f'id="{section}"' in page
    shown = re.findall(r'alt="sample (\d+)"', _section(page, "label-errors"))
    assert len(shown) == sum(min(len(f), 20) for f in flagged.values())  # every top suspect has its thumbnail
    rows = labels.read_label_issues(tmp_path)
    assert len(rows) == sum(len(f) for f in flagged.values())
    events = _events(tmp_path)
    assert f"{tb.SUSPECTS_TAG}/eval" in events.Tags()["images"]
    assert {tb.ERROR_ANALYSIS_TAG, tb.ERROR_BUDGET_TAG, tb.LABEL_ERRORS_TAG} <= set(events.Tags()["tensors"])
    text = analysis_text(meta)
    assert "Error analysis (multiclass" in text and "Error budget (error" in text and "Label errors (eval" in text
    assert capsys.readouterr().out.rstrip().endswith(text)  # printed at the end of training, after the findings
