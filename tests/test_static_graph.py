"""MSD106 (unsafe division), MSD107 (loss/activation), MSD110 (disconnected cell), MSD114 (silent
broadcast) on real MindSpore networks; source-only mode; robustness on control flow, nesting and
custom primitives; and the clean zoo."""
from __future__ import annotations

import textwrap

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules.graph import BroadcastSignal, broadcast_findings
from mindspore_doctor.static.inspector import lint, lint_source

import zoo
from test_static_layers import _line_of, _only

MINE = ("MSD104", "MSD105", "MSD106", "MSD107", "MSD110", "MSD113", "MSD114")


def _tensor(*shape):
    return ms.Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


# --- MSD106 ---------------------------------------------------------------------------------


class Normalize(nn.Cell):
    """Row-normalises by a sum and a ReLU output: both can be exactly zero."""

    def __init__(self):
        super().__init__()
        self.reduce_sum = ops.ReduceSum(keep_dims=True)
        self.relu = nn.ReLU()

    def construct(self, x):
        total = self.reduce_sum(x, 1)
        y = x / total
        return ops.div(y, self.relu(x))


class SafeNormalize(nn.Cell):
    def __init__(self):
        super().__init__()
        self.eps = 1e-6
        self.scale = 4.0
        self.div_no_nan = ops.DivNoNan()

    def construct(self, x):
        s = x.sum(axis=1, keepdims=True)
        a = x / (s + 1e-6)
        b = self.div_no_nan(x, s)
        c = x / 255.0 + x / self.scale
        var = ops.mean(x * x)
        d = x / ops.sqrt(var + self.eps)
        e = x / ops.maximum(s, 1e-6)
        return a + b + c + d + e


class Model(nn.Cell):
    def __init__(self, norm: nn.Cell):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.norm = norm

    def construct(self, x):
        return self.norm(self.fc(x))


def test_division_by_a_sum_or_relu_fires_with_cell_file_and_line():
    findings = _only(lint(Model(Normalize())), "MSD106")
    assert [f.location["line"] for f in findings] == [_line_of(Normalize, "y = x / total"),
                                                      _line_of(Normalize, "ops.div(")]
    first = findings[0]
    assert first.location["cell"] == "norm" and first.location["file"].endswith("test_static_graph.py")
    assert "`total` = `self.reduce_sum(x, 1)`" in first.message and "a sum can be 0" in first.message
    assert "ReLU output" in findings[1].message


def test_guarded_divisions_do_not_fire():
    assert not _only(lint(Model(SafeNormalize())), "MSD106")


def test_one_finding_per_class_not_per_instance():
    net = nn.SequentialCell(Model(Normalize()), Model(Normalize()))
    findings = _only(lint(net), "MSD106")
    assert len(findings) == 2 and findings[0].evidence["instances"] == 2


# --- MSD107 ---------------------------------------------------------------------------------


class Backbone(nn.Cell):
    def __init__(self, last: nn.Cell | None = None):
        super().__init__()
        self.features = nn.SequentialCell(nn.Dense(4, 8), nn.ReLU())
        self.classifier = nn.SequentialCell(nn.Dense(8, 3), last or nn.Identity(), nn.Flatten())

    def construct(self, x):
        out = self.classifier(self.features(x))
        return out


class FunctionalSoftmaxHead(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3)

    def construct(self, x):
        if x.shape[0] > 1:
            return ops.softmax(self.fc(x).reshape(-1, 3), axis=-1)
        return ops.softmax(self.fc(x), axis=-1)


@pytest.mark.parametrize(
    "last, loss, layer",
    [
        (nn.Softmax(), nn.SoftmaxCrossEntropyWithLogits(sparse=True), "classifier.1"),
        (nn.Softmax(), nn.CrossEntropyLoss(), "classifier.1"),
        (nn.Sigmoid(), nn.BCEWithLogitsLoss(), "classifier.1"),
        (None, nn.BCELoss(), "classifier.0"),
        (None, nn.NLLLoss(), "classifier.0"),
    ],
)
def test_loss_activation_mismatch_fires(last, loss, layer):
    [finding] = _only(lint(Backbone(last), loss_fn=loss), "MSD107")
    assert finding.location["cell"] == layer and type(loss).__name__ in finding.message


def test_functional_softmax_output_is_traced_through_both_branches():
    [finding] = _only(lint(FunctionalSoftmaxHead(), loss_fn=nn.CrossEntropyLoss()), "MSD107")
    assert finding.evidence["output_activation"] == "softmax" and "ops.softmax(" in finding.location["cell"]


def test_mismatch_found_through_with_loss_cell():
    net = nn.WithLossCell(Backbone(nn.Softmax()), nn.SoftmaxCrossEntropyWithLogits(sparse=True))
    [finding] = _only(lint(net), "MSD107")
    assert finding.location["cell"] == "_backbone.classifier.1"


@pytest.mark.parametrize(
    "last, loss",
    [(nn.LogSoftmax(), nn.NLLLoss()), (None, nn.SoftmaxCrossEntropyWithLogits(sparse=True)),
     (nn.Sigmoid(), nn.BCELoss()), (None, nn.BCEWithLogitsLoss()), (None, nn.CrossEntropyLoss())],
)
def test_matching_loss_and_activation_do_not_fire(last, loss):
    assert not _only(lint(Backbone(last), loss_fn=loss), "MSD107")


def test_without_loss_the_check_is_skipped_not_guessed():
    [skip] = [f for f in lint(Backbone(nn.Softmax())).findings if f.code == "MSD002" and "MSD107" in f.message]
    assert "no loss function" in skip.message


# --- MSD110 ---------------------------------------------------------------------------------


class WithUnused(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.aux_head = nn.Dense(4, 2)
        self.block = nn.SequentialCell(nn.Dense(4, 4), nn.ReLU())
        self.temperature = ms.Parameter(ms.Tensor(1.0, ms.float32), name="temperature")
        self.scale = ms.Parameter(ms.Tensor(2.0, ms.float32), name="scale")

    def construct(self, x):
        return self._body(x) * self.scale

    def _body(self, x):
        return self.block(self.fc(x))


class UsesEverything(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem = nn.Dense(4, 4)
        self.layers = nn.CellList([nn.Dense(4, 4) for _ in range(3)])
        self.heads = nn.CellDict({"a": nn.Dense(4, 2), "b": nn.Dense(4, 2)})
        self.wrapped = nn.Dense(4, 4)
        self.pipeline = nn.SequentialCell([self.wrapped, nn.ReLU()])

    def construct(self, x, use_a=True):
        x = self.pipeline(self.stem(x))
        for layer in self.layers:
            x = layer(x)
        if use_a:
            return self.heads["a"](x)
        return self.heads["b"](x)


class DynamicAccess(nn.Cell):
    def __init__(self):
        super().__init__()
        self.layer0 = nn.Dense(4, 4)
        self.layer1 = nn.Dense(4, 4)

    def construct(self, x):
        for i in range(2):
            x = getattr(self, f"layer{i}")(x)
        return x


def test_unused_cell_and_parameter_fire_at_their_paths():
    findings = _only(lint(nn.SequentialCell(WithUnused())), "MSD110")
    assert {f.location["cell"] for f in findings} == {"0.aux_head", "0"}
    [param] = [f for f in findings if "parameter" in f.location]
    assert param.location["parameter"] == "0.temperature"  # SequentialCell prefixes parameter names


def test_celllist_iteration_celldict_and_init_wiring_count_as_used():
    report = lint(UsesEverything())
    assert not _only(report, "MSD110") and not _only(report, "MSD001")


def test_dynamic_attribute_access_is_skipped_not_guessed():
    report = lint(DynamicAccess())
    assert not _only(report, "MSD110")
    [skip] = [f for f in report.findings if f.code == "MSD002" and "MSD110" in f.message]
    assert "getattr(self, ...)" in skip.message


# --- MSD114 ---------------------------------------------------------------------------------


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(3, 1)
        self.bn = nn.BatchNorm1d(3)
        self.drop = nn.Dropout(p=0.2)

    def construct(self, x):
        return self.fc(self.drop(self.bn(x))).squeeze(-1)


class SquaredError(nn.Cell):
    def construct(self, logits, labels):
        diff = logits - labels
        return ops.mean(diff * diff)


def test_silent_broadcast_fires_and_leaves_the_network_untouched(exec_mode):
    net = Regressor()
    net.set_train(True)
    net.bn.set_train(False)  # a mixed state that must come back exactly as it was
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    report = lint(net, loss_fn=nn.MSELoss(), sample_inputs=(_tensor(4, 3), _tensor(4, 1)))
    [finding] = _only(report, "MSD114")
    assert finding.evidence["output_shape"] == [4] and finding.evidence["broadcast_shape"] == [4, 4]
    assert net.training and net.fc.training and not net.bn.training and net.phase == "train"
    assert all(np.array_equal(before[p.name], p.asnumpy()) for p in net.get_parameters())


def test_custom_elementwise_loss_is_recognised():
    [finding] = _only(lint(Regressor(), loss_fn=SquaredError(), sample_inputs=(_tensor(4, 3), _tensor(4, 1))),
                      "MSD114")
    assert "SquaredError" in finding.message


def test_matching_shapes_or_class_index_labels_do_not_fire():
    inputs = _tensor(4, 3)
    assert not _only(lint(Regressor(), loss_fn=nn.MSELoss(), sample_inputs=(inputs, _tensor(4))), "MSD114")
    labels = ms.Tensor(np.array([0, 1, 2, 0], np.int32))
    net = nn.SequentialCell(nn.Dense(3, 3))
    report = lint(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True), sample_inputs=(inputs, labels))
    assert not _only(report, "MSD114")


def test_broadcast_needs_sample_inputs():
    [skip] = [f for f in lint(Regressor(), loss_fn=nn.MSELoss()).findings if "MSD114" in f.message]
    assert skip.code == "MSD002" and "needs sample_inputs" in skip.message
    assert not broadcast_findings(BroadcastSignal((4, 3), (4, 1), "MSELoss", True), DoctorConfig())


# --- source-only mode ------------------------------------------------------------------------

GRAPH_SOURCE = """
import mindspore.nn as nn
import mindspore.ops as ops
from mindspore import Parameter, Tensor


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)
        self.unused = nn.Dense(4, 2)
        self.bias = Parameter(Tensor(0.0))
        self.relu = nn.ReLU()
        self.sum = ops.ReduceSum(keep_dims=True)
        self.shape = (4, 4)

    def construct(self, x):
        x = self.fc(x)
        s = self.sum(x, 1)
        y = x / s
        z = x / (s + 1e-6) + x / 255.0 + ops.DivNoNan()(x, s)
        return y + z / self.relu(x)
"""


def test_source_mode_divisions_and_unused_members(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(GRAPH_SOURCE))
    report = lint_source(path)
    assert [f.location["line"] for f in _only(report, "MSD106")] == [20, 22]
    unused = {f.location["line"]: f for f in _only(report, "MSD110")}
    assert sorted(unused) == [11, 12]
    assert "`Net.unused` (Dense)" in unused[11].message and unused[11].location["file"] == str(path)


# --- robustness: control flow, nesting, custom primitives, no source ----------------------------


def _add_one(x):
    return x + 1


class Everything(nn.Cell):
    def __init__(self):
        super().__init__()
        self.blocks = nn.CellList([nn.SequentialCell(nn.Dense(4, 4), nn.ReLU()) for _ in range(2)])
        self.branches = nn.CellDict({"left": nn.Dense(4, 4), "right": nn.Dense(4, 4)})
        self.custom = ops.Custom(_add_one, out_shape=lambda x: x, out_dtype=lambda x: x, func_type="pyfunc")
        self.softmax = nn.Softmax()

    def construct(self, x, flag=True):
        for block in self.blocks:
            x = block(x)
        while x.sum() > 100:
            x = x / 2
        x = self.branches["left"](x) if flag else self.branches["right"](x)
        return self.softmax(self.custom(x))


def test_control_flow_nesting_and_custom_primitive_do_not_crash():
    net = Everything()
    report = lint(net, loss_fn=nn.NLLLoss(), sample_inputs=(_tensor(2, 4), ms.Tensor(np.array([0, 1], np.int32))))
    assert not _only(report, "MSD001")
    assert not [f for f in report.findings if f.code in MINE and f.code != "MSD107"]
    assert [f.evidence["output_activation"] for f in _only(report, "MSD107")] == ["softmax"]


def test_class_without_source_gives_check_skipped():
    namespace: dict = {"nn": nn}
    exec("class Hidden(nn.Cell):\n    def __init__(self):\n        super().__init__()\n"
         "        self.fc = nn.Dense(2, 2)\n    def construct(self, x):\n        return self.fc(x) / x.sum()\n",
         namespace)
    report = lint(namespace["Hidden"](), loss_fn=nn.MSELoss())
    assert not _only(report, "MSD001")
    skipped = [f for f in report.findings if f.code == "MSD002"]
    assert any("MSD106" in f.message and "source not available" in f.message for f in skipped)
    assert any("MSD110" in f.message for f in skipped)


# --- the zoo: none of these rules fire on clean architectures -------------------------------------


@pytest.mark.parametrize(
    "build",
    [zoo.build_lenet5, zoo.build_resnet18, zoo.build_lstm_classifier, zoo.build_transformer_classifier,
     zoo.build_mobilenet_like],
    ids=lambda b: b.__name__,
)
def test_clean_architectures_trigger_none_of_these_rules(build):
    net, loss_fn, optimizer, sample_inputs = build()
    report = lint(net, loss_fn=loss_fn, optimizer=optimizer, sample_inputs=sample_inputs)
    assert not [f for f in report.findings if f.code in MINE or f.code == "MSD001"], str(report)
    assert not [f for f in report.findings if f.code == "MSD002" and any(c in f.message for c in MINE)]
