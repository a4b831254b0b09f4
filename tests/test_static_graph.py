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
from mindspore_doctor.rules.graph import broadcast_findings
from mindspore_doctor.static.signals import BroadcastSignal
from mindspore_doctor.runners.lint import lint, lint_source

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


# --- a hand-written loss: its construct is checked too (held-out faults) ------------------------------------------


class Mlp(nn.Cell):
    def __init__(self, outputs=4, last: nn.Cell | None = None):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, outputs))
        self.last = last or nn.Identity()

    def construct(self, x):
        return self.last(self.body(x))


class MaskedMSE(nn.Cell):
    """Mean over the observed targets only (0 marks a missing one)."""

    def construct(self, prediction, target):
        mask = ops.cast(target != 0, prediction.dtype)
        return ops.div(((prediction - target) ** 2 * mask).sum(), mask.sum())


class GuardedMaskedMSE(nn.Cell):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def construct(self, prediction, target):
        mask = ops.cast(target != 0, prediction.dtype)
        squared = ((prediction - target) ** 2 * mask).sum()
        return ops.div(squared, mask.sum() + self.eps) + squared / ops.maximum(mask.sum(), 1.0)


def test_division_in_a_loss_passed_beside_the_network_fires():
    [finding] = _only(lint(Mlp(), loss_fn=MaskedMSE()), "MSD106")
    assert finding.location["cell"] == "loss_fn" and finding.location["line"] == _line_of(MaskedMSE, "ops.div(")
    assert "`mask.sum()` (a sum can be 0)" in finding.message


def test_guarded_division_in_a_loss_and_a_loss_inside_the_network_scanned_once():
    assert not _only(lint(Mlp(), loss_fn=GuardedMaskedMSE()), "MSD106")
    net = nn.WithLossCell(Mlp(), MaskedMSE())
    [finding] = _only(lint(net, loss_fn=net._loss_fn), "MSD106")
    assert finding.location["cell"] == "_loss_fn"


def test_division_in_the_loss_is_found_by_the_doctor():
    from mindspore import dataset as mds
    from mindspore.train import Model

    from mindspore_doctor import Doctor

    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = np.where(rng.random((32, 4)) < 0.5, rng.standard_normal((32, 4)), 0).astype(np.float32)
    net = Mlp()
    doctor = Doctor(select=["MSD106"])
    Model(net, MaskedMSE(), nn.Adam(net.trainable_params())).train(
        1, mds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(16), callbacks=[doctor])
    [finding] = [f for f in doctor.report.findings if f.code == "MSD106"]
    assert finding.location["cell"] == "loss_fn"


class ClampedBCE(nn.Cell):
    """BCE written by hand, clamped away from 0 and 1; its sigmoid is defined but the logits are clamped."""

    def __init__(self):
        super().__init__()
        self.sigmoid = nn.Sigmoid()

    def construct(self, logits, target):
        p = ops.clamp(logits, 1e-7, 1 - 1e-7)
        loss = target * ops.log(p) + (1 - target) * ops.log(1 - p)
        return -loss.mean()


class SigmoidClampedBCE(ClampedBCE):
    def construct(self, logits, target):
        p = ops.clamp(self.sigmoid(logits), 1e-7, 1 - 1e-7)
        loss = target * ops.log(p) + (1 - target) * ops.log(1 - p)
        return -loss.mean()


class PenalisedNLL(nn.Cell):
    """NLL with a confidence penalty; its LogSoftmax is defined but the raw scores reach the NLLLoss."""

    def __init__(self, beta=0.1):
        super().__init__()
        self.log_softmax = nn.LogSoftmax(axis=-1)
        self.nll = nn.NLLLoss()
        self.beta = beta

    def construct(self, scores, labels):
        flat = scores.reshape(-1, scores.shape[-1])
        return self.nll(flat, labels.reshape(-1)) + self.beta * (ops.exp(flat) * flat).sum(-1).mean()


class LogSoftmaxPenalisedNLL(PenalisedNLL):
    def construct(self, scores, labels):
        flat = self.log_softmax(scores).reshape(-1, scores.shape[-1])
        return self.nll(flat, labels.reshape(-1)) + self.beta * (ops.exp(flat) * flat).sum(-1).mean()


class FunctionalBCE(nn.Cell):
    def construct(self, logits, target):
        return ops.binary_cross_entropy(logits.squeeze(-1), target)


class SigmoidThenLogitsLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.bce = nn.BCEWithLogitsLoss()

    def construct(self, logits, target):
        return self.bce(ops.sigmoid(logits), target)


class SoftmaxThenCrossEntropy(nn.Cell):
    def construct(self, logits, labels):
        probs = ops.softmax(logits / 2.0, axis=-1)
        return ops.cross_entropy(probs, labels, label_smoothing=0.1)


@pytest.mark.parametrize(
    "outputs, loss, activation, sink, in_loss",
    [
        (1, ClampedBCE(), "logits", "log", False),
        (4, PenalisedNLL(), "logits", "NLLLoss", False),
        (1, FunctionalBCE(), "logits", "BCELoss", False),
        (1, SigmoidThenLogitsLoss(), "sigmoid", "BCEWithLogitsLoss", True),
        (4, SoftmaxThenCrossEntropy(), "softmax", "CrossEntropyLoss", True),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Cell) else None,
)
def test_a_hand_written_loss_is_judged_by_what_it_hands_its_inner_loss(outputs, loss, activation, sink, in_loss):
    [finding] = _only(lint(Mlp(outputs), loss_fn=loss), "MSD107")
    assert finding.evidence["output_activation"] == activation and finding.evidence["loss"] == sink
    assert finding.evidence["applied_in_loss"] is in_loss and finding.location["cell"] == "loss_fn"
    assert finding.location["file"].endswith("test_static_graph.py")
    assert finding.message.startswith("`ops." if in_loss else "The network output (`body.2`), passed unchanged")


def test_an_activation_defined_in_the_loss_and_never_applied_is_named():
    [finding] = _only(lint(Mlp(4), loss_fn=PenalisedNLL()), "MSD107")
    assert finding.location["line"] == _line_of(PenalisedNLL, "self.nll(flat")
    assert "`PenalisedNLL` defines `self.log_softmax` (LogSoftmax) but never applies it" in finding.message
    assert finding.suggestion.startswith("Apply `self.log_softmax` in `PenalisedNLL` before `self.nll(")
    assert finding.evidence["unused_activations"] == ["log_softmax"]


class FocalLoss(nn.Cell):
    """Sigmoid focal loss on logits (RetinaNet style)."""

    def __init__(self, gamma=2.0):
        super().__init__()
        self.gamma = gamma

    def construct(self, logits, target):
        p = ops.sigmoid(logits)
        ce = ops.binary_cross_entropy_with_logits(logits, target, ops.ones_like(logits), ops.ones_like(logits),
                                                  reduction="none")
        p_t = p * target + (1 - p) * (1 - target)
        return (ce * (1 - p_t) ** self.gamma).mean()


class ClampedFocalLoss(nn.Cell):
    def construct(self, logits, target):
        p = ops.sigmoid(logits).clamp(1e-6, 1 - 1e-6)
        return -(target * (1 - p) ** 2 * ops.log(p) + (1 - target) * p ** 2 * ops.log(1 - p)).mean()


class GatherNLL(nn.Cell):
    def construct(self, logits, labels):
        log_probs = ops.log_softmax(logits, axis=-1)
        return -ops.gather_elements(log_probs, 1, labels.reshape(-1, 1)).mean()


class PickedLogProbability(nn.Cell):
    def construct(self, logits, labels):
        probs = ops.softmax(logits / 0.5, axis=-1)
        picked = (probs * ops.one_hot(labels, 4, 1.0, 0.0)).sum(axis=-1)
        return -ops.log(picked + 1e-7).mean()


class PassThroughNLL(nn.Cell):
    """Hands the network output (already log-probabilities) to its NLLLoss."""

    def __init__(self):
        super().__init__()
        self.nll = nn.NLLLoss()

    def construct(self, log_probs, labels):
        return self.nll(log_probs, labels)


class LogError(nn.Cell):
    """Regression losses that take logs of shifted or transformed outputs: not probabilities."""

    def construct(self, prediction, target):
        msle = ((ops.log(prediction + 1) - ops.log(target + 1)) ** 2).mean()
        return msle + ops.log(ops.cosh(prediction - target)).mean() + ops.log(ops.exp(prediction).mean())


def _mindcv_losses():
    from mindcv.loss import AsymmetricLossMultilabel, BinaryCrossEntropySmooth, CrossEntropySmooth

    return [(4, CrossEntropySmooth(smoothing=0.1)), (4, BinaryCrossEntropySmooth(smoothing=0.1)),
            (4, AsymmetricLossMultilabel())]


@pytest.mark.parametrize(
    "outputs, loss, last",
    [
        (1, SigmoidClampedBCE(), None), (4, LogSoftmaxPenalisedNLL(), None), (4, FocalLoss(), None),
        (4, ClampedFocalLoss(), None), (4, GatherNLL(), None), (4, PickedLogProbability(), None),
        (4, PassThroughNLL(), nn.LogSoftmax()), (1, LogError(), None), (1, ClampedBCE(), nn.Sigmoid()),
        *[(outputs, loss, None) for outputs, loss in _mindcv_losses()],
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Cell) else None,
)
def test_hand_written_losses_that_apply_the_right_activation_are_quiet(outputs, loss, last):
    report = lint(Mlp(outputs, last), loss_fn=loss)
    assert not [f for f in report.findings if f.severity.value in ("warning", "error")], str(report)


def test_a_probability_output_of_unknown_kind_is_not_guessed():
    class Normalised(nn.Cell):  # relu(z) / sum(relu(z)): probabilities the tracer cannot name
        def __init__(self):
            super().__init__()
            self.body = Mlp(4)

        def construct(self, x):
            scores = ops.relu(self.body(x))
            return scores / (scores.sum(axis=1, keepdims=True) + 1e-6)

    assert not _only(lint(Normalised(), loss_fn=ClampedBCE()), "MSD107")


class WeightedLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.weighting = nn.Dense(4, 1)  # meant to weight the samples, never called
        self.softmax = nn.Softmax()  # no parameters: unused, it changes nothing
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, logits, labels):
        return self.ce(logits, labels)


def test_a_cell_with_parameters_unused_by_the_loss_fires_at_its_line():
    [finding] = _only(lint(Mlp(4), loss_fn=WeightedLoss()), "MSD110")
    assert finding.location["cell"] == "loss_fn.weighting"
    assert finding.location["line"] == _line_of(WeightedLoss, "self.weighting = ")


def test_rule_for_a_hand_written_loss_names_only_the_activation_it_needed():
    from mindspore_doctor.rules.graph import loss_activation_findings
    from mindspore_doctor.static.signals import OutputActivationSignal

    unused = (("sigmoid", "Sigmoid"), ("log_softmax", "LogSoftmax"))
    signal = OutputActivationSignal("logits", "fc", "log", loss_cell="MyBCE", call="ops.log(p)", unused=unused)
    [finding] = loss_activation_findings(signal, DoctorConfig())
    assert "defines `self.sigmoid` (Sigmoid)" in finding.message and "log_softmax" not in finding.message
    assert finding.evidence["unused_activations"] == ["sigmoid"]
    for activation in ("sigmoid", "softmax", "unknown"):
        assert not loss_activation_findings(OutputActivationSignal(activation, "fc", "log"), DoctorConfig())
