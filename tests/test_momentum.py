"""MSD117 momentum-out-of-range on real MindSpore optimizers: a momentum of 1 or more is an error (MindSpore accepts
it; the velocity never decays), one above ``max_momentum`` a warning; the usual values and Adam stay quiet."""
from __future__ import annotations

import math

import pytest
from mindspore import mint, nn

from mindspore_doctor import lint
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.findings import Severity
from mindspore_doctor.rules.parameters import MOMENTUM_OUT_OF_RANGE, momentum_out_of_range
from mindspore_doctor.static.signals import MomentumGroup, OptimizerSignal


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(16, 4)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def msd117(net, optimizer, **options):
    return [f for f in lint(net, optimizer=optimizer, select=["MSD117"], **options).findings if f.code == "MSD117"]


def test_momentum_of_one_is_an_error():
    net = Net()
    (found,) = msd117(net, nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=1.0))
    assert found.severity is Severity.ERROR and found.location == {"optimizer": "Momentum"}
    assert found.message.startswith("`Momentum` has momentum=1.0 (1 or more): the velocity never decays")
    assert found.evidence["momentum"] == 1.0 and found.evidence["limit"] == 1.0
    assert "momentum=0.9" in found.suggestion


def test_momentum_above_one_is_an_error_that_says_it_grows():
    net = Net()
    (found,) = msd117(net, nn.SGD(net.trainable_params(), learning_rate=0.01, momentum=1.5))
    assert found.severity is Severity.ERROR and "grows 1.5x every step" in found.message


def test_momentum_above_max_momentum_is_a_warning_with_the_step_factor():
    net = Net()
    (found,) = msd117(net, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.995))
    assert found.severity is Severity.WARNING
    assert "momentum=0.995, above `max_momentum` 0.99" in found.message and "200x the learning rate" in found.message
    assert found.evidence["momentum"] == 0.995 and found.evidence["limit"] == 0.99  # read from a float32 Parameter
    assert math.isclose(found.evidence["step_factor"], 200.0)
    assert "divide the learning rate by 20" in found.suggestion
    assert not msd117(net, nn.Momentum(net.trainable_params(), 0.1, 0.995), max_momentum=0.999)


def test_mint_sgd_reports_each_group_by_name():
    net = Net()
    opt = mint.optim.SGD([{"params": net.fc1.trainable_params()},
                          {"params": net.fc2.trainable_params(), "momentum": 1.0}], lr=0.1, momentum=0.9)
    (found,) = msd117(net, opt)
    assert found.severity is Severity.ERROR and found.location == {"optimizer": "SGD", "group": "group 1"}
    assert found.message.startswith("`SGD` (group 1: `fc2.weight` and 1 more) has momentum=1.0")
    assert found.evidence["parameters"] == ["fc2.weight", "fc2.bias"]


def test_mint_sgd_momentum_true_is_a_momentum_of_one():
    net = Net()
    (found,) = msd117(net, mint.optim.SGD(net.trainable_params(), lr=0.1, momentum=True))
    assert found.severity is Severity.ERROR and found.evidence["momentum"] == 1.0


def test_any_optimizer_with_a_momentum_attribute_is_read():
    net = Net()
    (found,) = msd117(net, nn.RMSProp(net.trainable_params(), learning_rate=0.01, momentum=1.0))
    assert found.location == {"optimizer": "RMSProp"} and found.severity is Severity.ERROR


@pytest.mark.parametrize("make", [
    lambda p: nn.Momentum(p, 0.1, 0.9),
    lambda p: nn.Momentum(p, 0.1, 0.0),
    lambda p: nn.Momentum(p, 0.1, 0.99),  # the top of the usual range is not above it
    lambda p: nn.SGD(p, 0.1),  # default momentum 0.0
    lambda p: nn.Adam(p, 1e-3),  # betas: MindSpore rejects them outside (0, 1) itself
    lambda p: mint.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: mint.optim.Adam(p, lr=1e-3),
], ids=["momentum-0.9", "momentum-0", "momentum-0.99", "sgd-default", "adam", "mint-sgd-0.9", "mint-adam"])
def test_usual_momentum_and_adam_are_quiet(make):
    net = Net()
    assert not msd117(net, make(net.trainable_params()))


def test_the_rule_judges_plain_signals():
    """The judge alone, on hand-built signals: no MindSpore, and a NaN momentum is not judged."""
    assert momentum_out_of_range is MOMENTUM_OUT_OF_RANGE.judged_by
    signal = OptimizerSignal("Momentum", "sgd", momentum_groups=(
        MomentumGroup("group 0", 0.9, ("a",)), MomentumGroup("group 1", 1.0, ("b",)),
        MomentumGroup("group 2", 0.999, ("c",)), MomentumGroup("group 3", math.nan, ("d",))))
    found = momentum_out_of_range(signal, DoctorConfig())
    assert [(f.location["group"], f.severity) for f in found] == [("group 1", Severity.ERROR),
                                                                  ("group 2", Severity.WARNING)]


def test_the_momentum_check_runs_in_lint():
    from mindspore_doctor.runners.lint import CHECK_RULES, CHECKS

    assert CHECK_RULES["momentum"] == (MOMENTUM_OUT_OF_RANGE,)
    assert ("momentum", ("MSD117",)) in [(c.name, c.codes) for c in CHECKS]


def test_the_diagnosis_names_the_momentum_not_the_learning_rate():
    """With MSD117 beside the divergence it causes, the ranked cause is the momentum: a lower learning rate does not
    help at momentum 1."""
    from mindspore_doctor.catalog import rule
    from mindspore_doctor.diagnosis import diagnose

    net = Net()
    found = msd117(net, nn.Momentum(net.trainable_params(), 0.01, 1.0))
    diverging = rule("MSD202").finding("The loss diverges.", step=30)
    assert diagnose(found + [diverging]).top.id == "momentum-too-high"
    assert diagnose([diverging]).top.id == "learning-rate-too-high"
