"""Cell source locations and inline suppressions (static/source.py), on real cells from real files."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.static.context import LintContext
from mindspore_doctor.static.loader import import_file
from mindspore_doctor.static.source import CellLocator, drop_suppressed, resolve_sources

MODEL = textwrap.dedent(
    """\
    from collections import OrderedDict

    import numpy as np
    import mindspore as ms
    from mindspore import Parameter, nn


    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(p=0.9)  # msdoctor: ignore[MSD104]
            self.scale = Parameter(ms.Tensor(np.ones(2, np.float32)), name="scale")

        def construct(self, x):
            return self.drop(x) * self.scale


    class Net(nn.Cell):  # msdoctor: ignore
        def __init__(self):
            super().__init__()
            self.body = nn.SequentialCell(
                nn.Dense(2, 2),
                Block(),
                nn.SequentialCell([nn.ReLU(), nn.Dropout(p=0.8)]),
            )
            self.named = nn.SequentialCell(OrderedDict([("fc", nn.Dense(2, 2)), ("act", nn.ReLU())]))
            self.a, self.b = nn.Dense(2, 2), nn.Dense(2, 2)
            self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(2, 1, 4), 1)
            self.head = nn.Dense(  # msdoctor: ignore[MSD110, MSD1]
                2, 2
            )

        def construct(self, x):
            return self.head(self.b(self.a(self.named(self.body(x)))))


    class Wider(Net):
        def __init__(self):
            super().__init__()
            self.b = nn.Dense(2, 2)  # msdoctor: ignore[dropout-rate-suspicious]
    """
)


def _line_of(needle: str) -> int:
    return next(i for i, line in enumerate(MODEL.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def model_module(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "model.py"
    path.write_text(MODEL)
    return import_file(path)


@pytest.fixture(scope="module")
def locator(model_module):
    return CellLocator(dict(model_module.Net().cells_and_names()))


@pytest.mark.parametrize(
    "cell, needle",
    [
        ("", "class Net"),
        ("body", "self.body = nn.SequentialCell("),
        ("body.0", "nn.Dense(2, 2),"),
        ("body.1.drop", "self.drop = nn.Dropout"),
        ("body.2.1", "nn.SequentialCell([nn.ReLU(), nn.Dropout(p=0.8)])"),
        ("named.act", "self.named ="),
        ("b", "self.a, self.b ="),
        ("encoder.layers.0.dropout1", "self.encoder ="),  # library internals: the line the user wrote
        ("head", "self.head = nn.Dense("),
    ],
)
def test_cell_points_at_the_statement_that_built_it(locator, cell, needle):
    span = locator.cell(cell)
    assert span is not None and Path(span.file).name == "model.py"
    assert span.line == _line_of(needle)


def test_parameter_points_at_its_assignment_or_its_owning_cell(locator):
    assert locator.parameter("body.1.scale").line == _line_of("self.scale = Parameter")
    assert locator.parameter("a.weight").line == _line_of("self.a, self.b =")
    assert locator.parameter("no.such.param") is None


def test_subclass_assignment_overrides_the_base_class(model_module):
    locator = CellLocator(dict(model_module.Wider().cells_and_names()))
    assert locator.cell("b").line == _line_of("self.b = nn.Dense(2, 2)  # msdoctor")
    assert locator.cell("a").line == _line_of("self.a, self.b =")


def _resolve(network, *findings):
    return resolve_sources(list(findings), LintContext(network))


def test_resolve_attaches_file_and_line_and_applies_suppressions(model_module):
    net = model_module.Net()
    kept = _resolve(
        net,
        make_finding("MSD104", "suppressed by ignore[MSD104]", location={"cell": "body.1.drop"}),
        make_finding("MSD110", "other code on that line: kept", location={"cell": "body.1.drop"}),
        make_finding("MSD104", "no comment here: kept", location={"cell": "body.2.1"}),
        make_finding("MSD110", "comment on the first line of a multi-line statement", location={"cell": "head"}),
        make_finding("MSD104", "prefix MSD1 in the list", location={"cell": "head"}),
        make_finding("MSD205", "not listed: kept", location={"cell": "head"}),
        make_finding("MSD102", "bare ignore on the class line", location={"cell": ""}),
        make_finding("MSD111", "no cell: untouched", location={"optimizer": "Adam"}),
    )
    assert [f.message for f in kept] == [
        "other code on that line: kept",
        "no comment here: kept",
        "not listed: kept",
        "no cell: untouched",
    ]
    assert kept[0].location["line"] == _line_of("self.drop = nn.Dropout")
    assert kept[0].location["file"].endswith("model.py")
    assert "file" not in kept[3].location


def test_suppression_by_slug_and_only_for_that_slug(model_module):
    kept = _resolve(
        model_module.Wider(),
        make_finding("MSD104", "slug listed", location={"cell": "b"}),
        make_finding("MSD101", "slug not listed", location={"cell": "b"}),
    )
    assert [f.code for f in kept] == ["MSD101"]


def test_drop_suppressed_works_on_findings_that_already_carry_a_line(tmp_path):
    src = tmp_path / "plain.py"
    src.write_text("x = 1  # msdoctor: ignore[MSD106]\ny = (\n    2  # msdoctor: ignore\n)\nz = 3\n")
    findings = [
        make_finding("MSD106", "a", location={"file": str(src), "line": 1}),
        make_finding("MSD113", "b", location={"file": str(src), "line": 1}),
        make_finding("MSD113", "c", location={"file": str(src), "line": 2}),
        make_finding("MSD113", "d", location={"file": str(src), "line": 5}),
        make_finding("MSD113", "e", location={"file": str(tmp_path / "missing.py"), "line": 1}),
    ]
    assert [f.message for f in drop_suppressed(findings)] == ["b", "d", "e"]


def test_lint_reports_the_building_line_and_honours_suppression(tmp_path):
    """End to end through lint(): the Dropout rule (MSD104) must land on the line that builds the cell."""
    from mindspore_doctor import lint

    src = tmp_path / "drop.py"
    src.write_text(
        textwrap.dedent(
            """\
            from mindspore import nn

            class Head(nn.Cell):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Dense(4, 2)
                    self.dropout = nn.Dropout(p=0.9)
                    self.quiet = nn.Dropout(p=0.9)  # msdoctor: ignore[MSD104]

                def construct(self, x):
                    return self.quiet(self.dropout(self.fc(x)))
            """
        )
    )
    report = lint(import_file(src).Head(), select=["MSD104"])
    assert [(f.location.get("cell"), f.location.get("line")) for f in report.findings] == [("dropout", 7)]
    assert Path(report.findings[0].location["file"]).name == "drop.py"


def test_network_inside_a_library_wrapper_points_at_user_code(model_module):
    from mindspore import nn

    locator = CellLocator(dict(nn.WithLossCell(model_module.Net(), nn.MSELoss()).cells_and_names()))
    assert locator.cell("") is None  # WithLossCell is MindSpore's, not the user's
    assert locator.cell("_backbone").line == _line_of("class Net")
    assert locator.cell("_backbone.body.1.drop").line == _line_of("self.drop = nn.Dropout")
