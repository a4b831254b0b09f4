"""Static checks on parameters, initialisation and the optimizer (MSD101-103, 108, 109, 111, 112).

Each rule fires on a small real MindSpore network at the right cell/parameter and
stays quiet on a near-miss; a few pure-rule tests use hand-built signals.
"""
from __future__ import annotations

import time

import mindspore as ms
import numpy as np
import pytest
from mindspore import amp, nn
from mindspore.common.initializer import Normal

from mindspore_doctor import lint
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import parameters as rules
from mindspore_doctor.static import signals
from mindspore_doctor.static.signals import LossScaleSignal, LrGroup, OptimizerSignal, ParamSignal

import zoo

MINE = ["MSD101", "MSD102", "MSD103", "MSD108", "MSD109", "MSD111", "MSD112"]


def only(report, code):
    return [f for f in report.findings if f.code == code]


def where(finding):
    """The cell/parameter part of a location (file/line are added when the source is known)."""
    return {k: v for k, v in finding.location.items() if k in ("cell", "parameter")}


class TwoLayer(nn.Cell):
    def __init__(self, weight_init="he_uniform"):
        super().__init__()
        self.fc1 = nn.Dense(8, 16, weight_init=weight_init)
        self.bn = nn.BatchNorm1d(16)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(16, 4)

    def construct(self, x):
        return self.fc2(self.relu(self.bn(self.fc1(x))))


class Reused(nn.Cell):
    """The same Dense registered twice: one set of weights behind two names."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 8)
        self.fc2 = self.fc1
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        return self.head(self.fc2(self.fc1(x)))


class TiedLM(nn.Cell):
    """Embedding and output projection share one table (intentional weight tying)."""

    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.decoder = nn.Dense(dim, vocab, has_bias=False)
        self.decoder.weight = self.embedding.embedding_table

    def construct(self, ids):
        return self.decoder(self.embedding(ids))


def train_cell(net, opt, **kwargs):
    return nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, **kwargs)


# --- MSD101 shared-parameter -------------------------------------------------------------


def test_shared_cell_registered_twice_is_reported_with_every_path():
    report = lint(Reused(), select=["MSD101"])
    found = only(report, "MSD101")
    assert {f.location["parameter"] for f in found} == {"fc2.weight", "fc2.bias"}
    assert all(f.location["cell"] == "fc1" and f.evidence["paths"] == ["fc1", "fc2"] for f in found)
    assert "`fc1`, `fc2`" in found[0].message


def test_cell_list_of_one_block_repeated_is_sharing():
    block = nn.Dense(4, 4)
    net = nn.SequentialCell(nn.CellList([block] * 3), nn.Dense(4, 2))
    found = only(lint(net, select=["MSD101"]), "MSD101")
    assert found and found[0].evidence["paths"] == ["0.0", "0.1", "0.2"]


def test_intended_weight_tying_is_allowed_by_name_or_path():
    assert {f.location["cell"] for f in only(lint(TiedLM(), select=["MSD101"]), "MSD101")} == {"embedding"}
    assert not lint(TiedLM(), select=["MSD101"], allow_shared=["embedding.embedding_table"]).findings
    assert not lint(TiedLM(), select=["MSD101"], allow_shared=["decoder"]).findings


def test_train_and_loss_wrappers_are_not_sharing():
    net = TwoLayer()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    report = lint(train_cell(net, opt), select=MINE)
    assert not report.at_least("warning"), report


# --- MSD102 frozen-parameter --------------------------------------------------------------


def test_frozen_random_weights_are_an_error_grouped_by_cell():
    net = TwoLayer()
    net.fc1.weight.requires_grad = False
    (partly,) = only(lint(net, select=["MSD102"]), "MSD102")
    assert partly.severity.value == "error" and "random initialisation" in partly.message
    assert where(partly) == {"cell": "fc1", "parameter": "fc1.weight"}
    net.fc1.bias.requires_grad = False
    (whole,) = only(lint(net, select=["MSD102"]), "MSD102")
    assert whole.severity.value == "error" and where(whole) == {"cell": "fc1"}
    assert whole.evidence["parameters"] == ["fc1.weight", "fc1.bias"]


def test_frozen_weights_of_unknown_origin_warn_for_part_of_a_cell():
    net = TwoLayer(weight_init=Normal(0.3))  # no uniform init signature: cannot tell random from loaded
    net.fc1.weight.requires_grad = False
    (partly,) = only(lint(net, select=["MSD102"]), "MSD102")
    assert partly.severity.value == "warning" and partly.evidence["at_init"] == [None]


def test_frozen_backbone_is_one_finding_at_its_root():
    net = zoo.build_lenet5()[0]
    for param in net.trainable_params():
        if not param.name.startswith("fc3"):
            param.requires_grad = False
    found = only(lint(net, select=["MSD102"]), "MSD102")
    assert sorted(f.location["cell"] for f in found) == ["conv1", "conv2", "fc1", "fc2"]
    assert all(f.severity.value == "error" for f in found)


def test_batchnorm_moving_statistics_are_not_frozen_weights():
    net = zoo.build_resnet18()[0]
    assert not only(lint(net, select=["MSD102"]), "MSD102")


def test_trainable_parameter_missing_from_optimizer():
    net = TwoLayer()
    opt = nn.Momentum(net.fc2.trainable_params() + net.bn.trainable_params(), 0.1, 0.9)
    (found,) = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert where(found) == {"cell": "fc1"} and "not held by the optimizer" in found.message
    full = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    assert not lint(net, optimizer=full, select=["MSD102"]).findings


# --- MSD103 foreign-optimizer-parameter --------------------------------------------------


def test_optimizer_built_from_another_instance():
    net, twin = TwoLayer(), TwoLayer()
    report = lint(net, optimizer=nn.Adam(twin.trainable_params(), 1e-3), select=["MSD102", "MSD103"])
    (found,) = only(report, "MSD103")
    assert where(found) == {"parameter": "fc1.weight"}
    assert "another instance" in found.message and found.evidence["held"] == 6
    assert not only(report, "MSD102"), "MSD103 already explains the same-named copies"
    assert not lint(net, optimizer=nn.Adam(net.trainable_params(), 1e-3), select=["MSD103"]).findings


def test_learnable_loss_parameters_are_not_foreign():
    net = TwoLayer()
    loss = nn.Dense(4, 1)  # stands in for a loss with its own learnable weights
    opt = nn.Adam(net.trainable_params() + loss.trainable_params(), 1e-3)
    assert not lint(net, loss_fn=loss, optimizer=opt, select=["MSD103"]).findings


# --- MSD108 zero-initialized-weight --------------------------------------------------------


def test_zero_and_constant_weights_fire_biases_and_norms_do_not():
    (zero,) = only(lint(TwoLayer(weight_init="zeros"), select=["MSD108"]), "MSD108")
    assert where(zero) == {"cell": "fc1", "parameter": "fc1.weight"} and "all zeros" in zero.message
    (const,) = only(lint(TwoLayer(weight_init="ones"), select=["MSD108"]), "MSD108")
    assert const.evidence["value"] == 1.0
    # zero biases, BatchNorm beta/moving_mean and LayerNorm beta are zero by design
    assert not lint(TwoLayer(), select=["MSD108"]).findings
    assert not lint(zoo.build_transformer_classifier()[0], select=["MSD108"]).findings


def test_zero_recurrent_and_embedding_tables_fire():
    lstm = nn.LSTM(4, 8, batch_first=True)
    lstm.weight_hh_l0.set_data(ms.Tensor(np.zeros(lstm.weight_hh_l0.shape, np.float32)))
    found = only(lint(lstm, select=["MSD108"]), "MSD108")
    assert [f.location["parameter"] for f in found] == ["weight_hh_l0"]
    assert only(lint(nn.Embedding(10, 4, embedding_table="zeros"), select=["MSD108"]), "MSD108")


# --- MSD109 poor-initialization --------------------------------------------------------------


def test_badly_scaled_init_fires_with_scheme_and_ratio():
    net = nn.SequentialCell(nn.Dense(1024, 1024, weight_init=Normal(1.0)), nn.ReLU(), nn.Dense(1024, 2))
    (found,) = only(lint(net, select=["MSD109"]), "MSD109")
    assert where(found) == {"cell": "0", "parameter": "0.weight"}
    assert found.evidence["scheme"] == "He" and found.evidence["ratio"] > 10
    assert "followed by ReLU" in found.message
    tiny = nn.SequentialCell(nn.Conv2d(64, 64, 3, weight_init=Normal(1e-4)), nn.ReLU(), nn.Conv2d(64, 8, 3))
    (small,) = only(lint(tiny, select=["MSD109"]), "MSD109")
    assert small.evidence["ratio"] < 0.1 and "below" in small.message


def test_small_init_of_the_output_layer_is_deliberate_but_a_large_one_is_not():
    small_head = nn.SequentialCell(nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 1, weight_init=Normal(1e-4)))
    assert not lint(small_head, select=["MSD109"]).findings  # a residual forecaster's "small correction" head
    large_head = nn.SequentialCell(nn.Dense(64, 64), nn.ReLU(), nn.Dense(64, 1, weight_init=Normal(10.0)))
    (found,) = only(lint(large_head, select=["MSD109"]), "MSD109")
    assert found.location["parameter"] == "2.weight"


@pytest.mark.parametrize(
    "build",
    [
        zoo.build_lenet5,
        zoo.build_resnet18,
        zoo.build_mobilenet_like,
        zoo.build_lstm_classifier,
        zoo.build_transformer_classifier,
        zoo.build_mlp,
    ],
)
def test_standard_architectures_with_default_init_are_clean(build):
    net, loss, opt, _ = build()
    report = lint(net, loss_fn=loss, optimizer=opt, select=MINE)
    assert not report.findings, report


def test_explicit_standard_inits_are_clean():
    net = nn.SequentialCell(
        nn.Conv2d(3, 32, 3, weight_init="he_normal"),
        nn.ReLU(),
        nn.Conv2d(32, 32, 3, group=32, weight_init="xavier_uniform"),
        nn.Dense(32, 512, weight_init="xavier_normal", activation="tanh"),
        nn.Dense(512, 10, weight_init=Normal(0.02)),
    )
    assert not lint(net, select=["MSD109"]).findings


# --- MSD111 learning-rate-out-of-range --------------------------------------------------------


@pytest.mark.parametrize(
    "make_opt, fires",
    [
        (lambda p: nn.Adam(p, 0.1), True),
        (lambda p: nn.Adam(p, 1e-9), True),
        (lambda p: nn.Momentum(p, 5.0, 0.9), True),
        (lambda p: nn.Adam(p, nn.CosineDecayLR(1e-5, 0.5, 100)), True),
        (lambda p: nn.Adam(p, 1e-3), False),
        (lambda p: nn.Momentum(p, 0.1, 0.9), False),
        (lambda p: nn.AdamWeightDecay(p, 5e-4), False),
        (lambda p: nn.Momentum(p, [0.0, 0.05, 0.1, 0.05, 0.0], 0.9), False),  # warm-up from 0 is fine
        (lambda p: nn.Momentum(p, nn.WarmUpLR(0.1, 10), 0.9), False),
    ],
)
def test_learning_rate_ranges_per_family(make_opt, fires):
    net = TwoLayer()
    found = only(lint(net, optimizer=make_opt(net.trainable_params()), select=["MSD111"]), "MSD111")
    assert bool(found) == fires
    if fires:
        assert found[0].evidence["family"] in ("sgd", "adam") and found[0].location["optimizer"]


def test_learning_rate_message_and_groups():
    net = TwoLayer()
    (adam,) = only(lint(net, optimizer=nn.Adam(net.trainable_params(), 0.1), select=["MSD111"]), "MSD111")
    assert "Adam learning rate 0.1" in adam.message
    groups = [{"params": net.fc1.trainable_params(), "lr": 3.0}, {"params": net.fc2.trainable_params()}]
    (grouped,) = only(lint(net, optimizer=nn.Momentum(groups, 0.1, 0.9), select=["MSD111"]), "MSD111")
    assert grouped.location["group"] == "group 0" and grouped.evidence["lr"] == 3.0
    assert grouped.evidence["parameters"] == ["fc1.weight", "fc1.bias"] and "`fc1.weight` and 1 more" in grouped.message


def test_unknown_optimizer_family_is_skipped_not_guessed():
    net = TwoLayer()
    report = lint(net, optimizer=nn.RMSProp(net.trainable_params(), 0.5), select=["MSD111"])
    assert report.codes() == {"MSD002"} and "RMSProp" in report.findings[0].message


# --- MSD112 loss-scale-misconfigured ---------------------------------------------------------


def test_plain_fp32_training_has_no_loss_scale_finding():
    net = TwoLayer()
    assert not lint(train_cell(net, nn.Momentum(net.trainable_params(), 0.1, 0.9)), select=["MSD112"]).findings
    assert not lint(net, optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9), select=["MSD112"]).findings


def test_optimizer_loss_scale_without_matching_sens():
    net = TwoLayer()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9, loss_scale=1024.0)
    found = only(lint(train_cell(net, opt), select=["MSD112"]), "MSD112")
    assert any("sens=1" in f.message and f.evidence["optimizer_loss_scale"] == 1024.0 for f in found)


def test_amp_o2_with_fixed_manager_and_matching_optimizer_scale_is_fine():
    net = TwoLayer()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9, loss_scale=1024.0)
    manager = ms.FixedLossScaleManager(1024, drop_overflow_update=False)
    train = amp.build_train_network(net, opt, nn.MSELoss(), level="O2", loss_scale_manager=manager)
    assert not lint(train, select=["MSD112"]).findings


def test_double_unscaling_and_overflowing_fixed_scale_on_fp16():
    net = TwoLayer()
    net.to_float(ms.float16)
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9, loss_scale=128.0)
    wrapped = nn.WithLossCell(net, nn.MSELoss())
    cell = nn.TrainOneStepWithLossScaleCell(wrapped, opt, scale_sense=nn.FixedLossScaleUpdateCell(2.0**20))
    found = only(lint(cell, select=["MSD112"]), "MSD112")
    messages = " | ".join(f.message for f in found)
    assert "divides them again" in messages and "float16 tops out" in messages
    assert any(f.severity.value == "error" for f in found)
    sane = nn.TrainOneStepWithLossScaleCell(
        nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9),
        scale_sense=nn.FixedLossScaleUpdateCell(1024.0),
    )
    assert not lint(sane, select=["MSD112"]).findings


def test_loss_scale_on_a_float32_network():
    net = TwoLayer()
    cell = nn.TrainOneStepWithLossScaleCell(
        nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9),
        scale_sense=ms.Tensor(1024.0, ms.float32),
    )
    (found,) = only(lint(cell, select=["MSD112"]), "MSD112")
    assert "entirely in float32" in found.message and found.evidence["scale"] == 1024.0


# --- speed ------------------------------------------------------------------------------------


def test_resnet50_parameter_checks_are_fast():
    net, loss, opt, _ = zoo.build_resnet50()
    start = time.perf_counter()
    report = lint(net, loss_fn=loss, optimizer=opt, select=MINE)
    assert time.perf_counter() - start < 1.0
    assert not report.findings


# --- pure rules on hand-built signals ------------------------------------------------------


def param(name="fc.weight", cell="fc", role=signals.WEIGHT, **kw):
    kw.setdefault("shape", (16, 8))
    return ParamSignal(name=name, cell=cell, cell_type="Dense", role=role, **kw)


def test_rule_shared_respects_allow_list_prefixes_and_globs():
    shared = [param(paths=("blocks.0.fc", "blocks.1.fc"))]
    assert len(rules.shared_parameter(shared, DoctorConfig())) == 1
    assert not rules.shared_parameter(shared, DoctorConfig(allow_shared=("blocks",)))
    assert not rules.shared_parameter(shared, DoctorConfig(allow_shared=("*.weight",)))
    assert len(rules.shared_parameter(shared, DoctorConfig(allow_shared=("block",)))) == 1


def test_rule_frozen_groups_the_largest_fully_frozen_subtree():
    params = [
        param("enc.a.w", "enc.a", requires_grad=False),
        param("enc.b.w", "enc.b", requires_grad=False),
        param("head.w", "head"),
        param("head.v", "head", requires_grad=False),
        param("enc.bn.moving_mean", "enc.bn", role=signals.BUFFER, requires_grad=False),
    ]
    found = {f.location["cell"]: f for f in rules.frozen_parameter(params, DoctorConfig())}
    assert set(found) == {"enc", "head"}
    assert found["enc"].severity.value == "error" and found["head"].severity.value == "warning"


def test_rule_poor_init_uses_he_for_relu_and_accepts_either_when_unknown():
    he = (2 / 100) ** 0.5
    relu = param(shape=(100, 100), std=he * 12, fan_in=100, fan_out=100, activation="ReLU")
    assert rules.poor_initialization([relu], DoctorConfig())[0].evidence["scheme"] == "He"
    assert not rules.poor_initialization([relu], DoctorConfig(init_std_factor=20))
    unknown = param(shape=(100, 100), std=he * 5, fan_in=100, fan_out=100)
    assert not rules.poor_initialization([unknown], DoctorConfig())


def test_rule_lr_judges_schedule_peaks_and_ignores_unreadable_groups():
    opt = OptimizerSignal("Adam", "adam", lr_groups=(LrGroup("group 0", 0.05, "list"), LrGroup("group 1", None, "X")))
    (found,) = rules.learning_rate_out_of_range(opt, DoctorConfig())
    assert "peak of its list schedule 0.05" in found.message
    assert not rules.learning_rate_out_of_range(opt, DoctorConfig(adam_lr_range=(1e-7, 0.1)))


def test_rule_loss_scale_is_silent_when_not_a_train_cell():
    signal = LossScaleSignal(network_is_train_cell=False, optimizer_loss_scale=1024.0)
    assert not rules.loss_scale_misconfigured(signal, DoctorConfig())
    dynamic = LossScaleSignal(True, ("net",), True, 1.0, "TrainOneStepWithLossScaleCell", None, 2.0**24, "dynamic")
    assert not rules.loss_scale_misconfigured(dynamic, DoctorConfig())
