"""MSD104 (dropout rate), MSD105 (BatchNorm use_batch_statistics), MSD113 (softmax axis):
object mode on real cells, source-only mode on files, and the pure rules."""
from __future__ import annotations

import inspect
import textwrap

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules.layers import dropout_findings, softmax_axis_findings
from mindspore_doctor.static.signals import DropoutSignal, SoftmaxAxisSignal
from mindspore_doctor.runners.lint import lint, lint_source

MINE = ("MSD104", "MSD105", "MSD113")


def _only(report, code):
    return [f for f in report.findings if f.code == code]


def _line_of(cls, needle: str) -> int:
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if needle in line)


class Head(nn.Cell):
    def __init__(self, dropout: nn.Cell):
        super().__init__()
        self.dense = nn.Dense(8, 4)
        self.dropout = dropout

    def construct(self, x):
        return self.dense(self.dropout(x))


class Classifier(nn.Cell):
    def __init__(self, dropout: nn.Cell):
        super().__init__()
        self.body = nn.Dense(4, 8)
        self.head = Head(dropout)

    def construct(self, x):
        return self.head(self.body(x))


# --- MSD104 -----------------------------------------------------------------------------


def test_keep_prob_habit_fires_on_the_dropout_cell():
    report = lint(Classifier(nn.Dropout(keep_prob=0.1)))
    [finding] = _only(report, "MSD104")
    assert finding.location["cell"] == "head.dropout"
    assert "drops 90 % of activations (keep_prob=0.1)" in finding.message
    assert "did you mean p=0.1?" in finding.message
    assert finding.evidence["drop_rate"] == 0.9 and finding.evidence["via_keep_prob"]


def test_high_p_fires_and_names_the_rate():
    [finding] = _only(lint(Classifier(nn.Dropout(p=0.9))), "MSD104")
    assert finding.location["cell"] == "head.dropout" and "p=0.9" in finding.message
    [finding] = _only(lint(Classifier(nn.Dropout2d(p=0.7))), "MSD104")
    assert finding.evidence["drop_rate"] == 0.7


def test_intentional_half_dropout_and_keep_prob_09_do_not_fire():
    for dropout in (nn.Dropout(p=0.5), nn.Dropout(keep_prob=0.9), nn.Dropout(), nn.Dropout(p=0.1)):
        assert not _only(lint(Classifier(dropout)), "MSD104")


def test_max_drop_rate_threshold_is_configurable():
    assert not _only(lint(Classifier(nn.Dropout(p=0.9)), max_drop_rate=0.95), "MSD104")


class FunctionalDropout(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(4, 4)
        self.drop = ops.Dropout(keep_prob=0.2)

    def construct(self, x):
        x = ops.dropout(self.dense(x), p=0.8)
        out, _ = self.drop(x)
        return out


def test_functional_dropout_and_held_primitive_fire_with_location():
    findings = _only(lint(FunctionalDropout()), "MSD104")
    [functional] = [f for f in findings if "`ops.dropout(" in f.message]
    assert functional.location["line"] == _line_of(FunctionalDropout, "ops.dropout(")
    assert functional.location["file"].endswith("test_static_layers.py")
    assert functional.evidence["drop_rate"] == 0.8
    [held] = [f for f in findings if f is not functional]
    assert held.message.startswith("`drop` drops 80 %") and held.evidence["via_keep_prob"]


# --- MSD105 -----------------------------------------------------------------------------


class ConvBN(nn.Cell):
    def __init__(self, use_batch_statistics=None):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2, use_batch_statistics=use_batch_statistics)

    def construct(self, x):
        return self.bn(self.conv(x))


def test_batchnorm_fixed_to_batch_statistics_fires():
    [finding] = _only(lint(ConvBN(True)), "MSD105")
    assert finding.location["cell"] == "bn"
    assert "eval/predict mode it still normalises with the statistics of the current batch" in finding.message


def test_batchnorm_fixed_to_moving_statistics_fires():
    [finding] = _only(lint(ConvBN(False)), "MSD105")
    assert "never updated" in finding.message and finding.evidence["use_batch_statistics"] is False


def test_batchnorm_default_and_bn3d_owner():
    assert not _only(lint(ConvBN(None)), "MSD105")
    [finding] = _only(lint(nn.SequentialCell(nn.BatchNorm3d(2, use_batch_statistics=True))), "MSD105")
    assert finding.location["cell"] == "0"


# --- MSD113 -----------------------------------------------------------------------------


class SoftmaxHead(nn.Cell):
    def __init__(self, softmax: nn.Cell):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.softmax = softmax

    def construct(self, x):
        return self.softmax(self.fc(x))


class FunctionalSoftmax(nn.Cell):
    def __init__(self, axis: int):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.axis = axis

    def construct(self, x):
        logits = self.fc(x)
        return ops.softmax(logits, axis=0) + ops.log_softmax(logits, self.axis)


def test_softmax_over_batch_axis_fires_for_cells_and_primitives():
    [finding] = _only(lint(SoftmaxHead(nn.Softmax(axis=0))), "MSD113")
    assert finding.location["cell"] == "softmax" and "axis 0, the batch axis" in finding.message
    [finding] = _only(lint(SoftmaxHead(nn.LogSoftmax(0))), "MSD113")
    assert finding.evidence["op"] == "LogSoftmax"


def test_functional_softmax_axis_0_fires_with_line():
    [finding] = _only(lint(FunctionalSoftmax(-1)), "MSD113")
    assert finding.location["line"] == _line_of(FunctionalSoftmax, "ops.softmax(logits, axis=0)")


def test_softmax_over_classes_does_not_fire():
    for softmax in (nn.Softmax(), nn.Softmax(axis=-1), nn.LogSoftmax(axis=1)):
        assert not _only(lint(SoftmaxHead(softmax)), "MSD113")


# --- source-only mode -------------------------------------------------------------------------

BUGGY_SOURCE = """
import mindspore.nn as nn
import mindspore.ops as ops


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)
        self.drop = nn.Dropout(keep_prob=0.1)
        self.drop_high = nn.Dropout(p=0.9)
        self.drop_ok = nn.Dropout(p=0.5)
        self.bn = nn.BatchNorm1d(3, use_batch_statistics=True)
        self.softmax = nn.Softmax(axis=0)
        self.softmax_ok = nn.Softmax(axis=-1)

    def construct(self, x):
        x = self.drop_ok(self.drop_high(self.drop(x)))
        x = self.bn(self.fc(x))
        return ops.log_softmax(x, 0) + self.softmax(x) + self.softmax_ok(x)
"""


def _write(tmp_path, source: str):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(source))
    return path


def test_source_mode_finds_literal_rates_and_axes(tmp_path):
    path = _write(tmp_path, BUGGY_SOURCE)
    report = lint_source(path)
    dropout = {f.location["line"]: f for f in _only(report, "MSD104")}
    assert sorted(dropout) == [10, 11]
    assert "`Net.drop` drops 90 % of activations (keep_prob=0.1)" in dropout[10].message
    assert dropout[10].location["file"] == str(path)
    [bn] = _only(report, "MSD105")
    assert bn.location["line"] == 13
    softmax = {f.location["line"] for f in _only(report, "MSD113")}
    assert softmax == {14, 20}


def test_source_mode_near_misses(tmp_path):
    clean = BUGGY_SOURCE.replace("keep_prob=0.1", "keep_prob=0.9").replace("p=0.9", "p=0.1")
    clean = clean.replace("axis=0", "axis=-1").replace("x, 0)", "x, -1)").replace("use_batch_statistics=True", "")
    report = lint_source(_write(tmp_path, clean))
    assert not [f for f in report.findings if f.code in MINE]


# --- pure rules ---------------------------------------------------------------------------------


def test_rules_are_pure_functions_of_signals():
    config = DoctorConfig()
    assert dropout_findings([DropoutSignal("d", 0.5, False)], config) == []
    [f] = dropout_findings([DropoutSignal("d", 0.6, True)], config)
    assert "keep_prob=0.4" in f.message
    assert softmax_axis_findings([SoftmaxAxisSignal("s", (0, 1), False)], config)
    assert not softmax_axis_findings([SoftmaxAxisSignal("s", 1, True)], config)


def test_dropout_rate_is_read_from_the_primitive_actually_used():
    """What nn.Dropout really does in 2.10: p wins; keep_prob alone sets the primitive's keep_prob."""
    with_p, with_keep = nn.Dropout(p=0.9), nn.Dropout(keep_prob=0.1)
    assert with_p.keep_prob == 0.5 and with_p.p == 0.9  # stale default keep_prob: must not be trusted
    assert np.isclose(with_p.dropout.attrs["keep_prob"], 0.1) and with_keep.p is None
    x = ms.Tensor(np.ones((1, 1000), np.float32))
    with_p.set_train(True)
    kept = float((with_p(x).asnumpy() != 0).mean())
    assert 0.03 < kept < 0.2


# --- rates and axes held in attributes (held-out fault: a recurrent layer's ops.dropout) ------------------------


class UnrolledRecurrentLayer(nn.Cell):
    """A hand-unrolled recurrent layer: the dropout rate and the attention axis are attributes, not literals."""

    def __init__(self, hidden, recurrent_dropout, attention_axis=-1):
        super().__init__()
        self.cell = nn.Dense(hidden, hidden)
        self.recurrent_dropout = recurrent_dropout
        self.attention_axis = attention_axis

    def construct(self, x):
        h = x[:, 0]
        for t in range(x.shape[1]):
            h = ops.tanh(self.cell(h) + x[:, t])
            h = ops.dropout(h, p=self.recurrent_dropout, training=self.training)
        return ops.softmax(h, axis=self.attention_axis)


class StackedRecurrent(nn.Cell):
    def __init__(self, rates, axes):
        super().__init__()
        self.layers = nn.CellList([UnrolledRecurrentLayer(8, r, a) for r, a in zip(rates, axes)])

    def construct(self, x):
        for layer in self.layers:
            x = layer(x).expand_dims(1)
        return x


def test_rate_and_axis_held_in_an_attribute_are_read_from_each_instance():
    report = lint(StackedRecurrent(rates=(0.1, 0.9, 0.9), axes=(-1, -1, 0)))
    [dropout] = _only(report, "MSD104")  # one site per class and value: layers 1 and 2 both drop 90 %
    assert dropout.location["cell"] == "layers.1" and dropout.evidence["drop_rate"] == 0.9
    assert dropout.location["line"] == _line_of(UnrolledRecurrentLayer, "ops.dropout(")
    assert "p=self.recurrent_dropout" in dropout.message
    [softmax] = _only(report, "MSD113")
    assert softmax.location["cell"] == "layers.2" and softmax.evidence["axis"] == 0


def test_rate_and_axis_held_in_attributes_near_miss():
    assert not [f for f in lint(StackedRecurrent(rates=(0.1, 0.3), axes=(-1, 1))).findings if f.code in MINE]


ATTRIBUTE_SOURCE = """
import mindspore.nn as nn
import mindspore.ops as ops


class Layer(nn.Cell):
    def __init__(self, hidden, rate=0.9, axis=-1):
        super().__init__()
        self.fc = nn.Dense(hidden, hidden)
        self.rate = rate
        self.axis = axis
        self.fixed = 0
        self.changing = 0.9

    def construct(self, x):
        self.changing = 0.1
        x = ops.dropout(self.fc(x), p=self.rate) + ops.dropout(x, p=self.changing)
        return ops.softmax(x, axis=self.axis) + ops.softmax(x, axis=self.fixed)
"""


def test_source_mode_reads_attributes_bound_once_in_init(tmp_path):
    report = lint_source(_write(tmp_path, ATTRIBUTE_SOURCE))
    [dropout] = _only(report, "MSD104")  # the default rate=0.9; `self.changing` is rebound in construct
    assert dropout.location["line"] == 17 and "p=self.rate" in dropout.message
    [softmax] = _only(report, "MSD113")  # self.fixed = 0; self.axis defaults to -1
    assert softmax.location["line"] == 18 and "axis=self.fixed" in softmax.message


def test_the_lint_checks_are_derived_from_the_rules_they_judge():
    """Each lint check's codes are its rules'; every static rule is measured on objects (and on source text where it
    can be) and judged by the function its own family binds: MSD105's static part here, not the training part that
    ``rules/training`` reports with the same Rule."""
    from mindspore_doctor.rules import graph, layers, parameters
    from mindspore_doctor.runners import lint as runner

    families = (parameters, layers, graph)
    static_rules = [rule for family in families for rule in family.RULES]
    assert set(runner.MEASURED) == set(static_rules) == {r for rules in runner.CHECK_RULES.values() for r in rules}
    assert [(c.name, c.codes) for c in runner.CHECKS] == [
        (name, tuple(r.code for r in rules)) for name, rules in runner.CHECK_RULES.items()]
    assert {code for check in runner.SOURCE_CHECKS for code in check.codes} == {r.code for r in runner.SOURCE_MEASURED}
    for family in families:
        for rule in family.RULES:
            assert rule.judged_by.__module__.startswith(family.__name__), rule.code
    assert layers.TRAIN_MODE_MISUSE.judged_by is layers.batchnorm_findings
