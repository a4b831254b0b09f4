"""Issue 13, static rules: healthy real-world code gives no warning, and the faults are still found.

MSD109 judges init scale only where it can propagate (not into a normalization, softmax or skip
connection); MSD101 counts what runs, not how many names reach a Parameter; MSD102 tells frozen random
weights (error) from frozen loaded ones (info); MSD110 reads ``construct(s, x)`` and ignores unused
cells without parameters; MSD116 judges weight decay per parameter group; ``config=`` is a base
that keyword options override at every entry point.
"""
from __future__ import annotations

import dataclasses

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.common.initializer import Normal

from mindspore_doctor import Doctor, check_data, lint
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import parameters as rules
from mindspore_doctor.static import signals
from mindspore_doctor.runners.lint import lint_source
from test_static_parameters import TiedLM

mindcv = pytest.importorskip("mindcv")


def only(report, code):
    return [f for f in report.findings if f.code == code]


def noisy(report):
    return [f"{f.code} {f.where}: {f.message}" for f in report.at_least("warning")]


# --- real models from a maintained library ----------------------------------------------------------

MINDCV_HEALTHY = [
    "mobilenet_v3_small_075",  # MSD109: depthwise convs with fan-out init, each followed by BatchNorm
    "shufflenet_v2_x0_5",
    "efficientnet_b0",
    "mnasnet_050",
    "mixnet_s",  # mixed depthwise convs inside a user cell, BatchNorm in the parent SequentialCell
    "edgenext_xx_small",  # dwconv -> transpose -> LayerNorm in construct
    "mobilevit_xx_small",  # MSD110: a Softmax defined but applied functionally
    "poolformer_s12",  # MSD110: an Identity `norm` never called
    "squeezenet1_0",  # MSD101: final_conv registered twice, called once
    "xception",  # separable convs: depthwise -> pointwise -> BatchNorm
    "pit_ti",  # a conv whose output leaves its cell inside a tuple, into pre-norm transformer blocks
    "cait_xxs24_224",  # talking-heads Dense(4, 4) before a softmax / inside a residual branch
    "crossvit_9",  # MSD110: ParameterTuple members used by index
]


@pytest.mark.parametrize("name", MINDCV_HEALTHY)
def test_mindcv_models_lint_without_warnings(name):
    net = mindcv.create_model(name, num_classes=10, pretrained=False)
    assert not noisy(lint(net)), name


# --- MSD109: normalization-aware -------------------------------------------------------------------


class ConvBlock(nn.Cell):
    """A too-small depthwise conv, normalized (or not) in construct."""

    def __init__(self, norm: bool, nested: bool = False):
        super().__init__()
        self.dw = nn.Conv2d(32, 32, 3, group=32, weight_init=Normal(1e-3))
        self.bn = nn.BatchNorm2d(32) if norm else None
        self.act = nn.Tanh()
        self.pw = nn.Conv2d(32, 8, 1)
        self.nested = nested

    def construct(self, x):
        if self.bn is None:
            return self.pw(self.act(self.dw(x)))
        if self.nested:
            return self.pw(self.act(self.bn(self.dw(x))))
        x = self.dw(x)
        x = ops.transpose(x, (0, 1, 3, 2))
        x = self.bn(x)
        return self.pw(self.act(x))


@pytest.mark.parametrize("nested", [False, True])
def test_init_scale_cancelled_by_a_following_normalization_is_not_reported(nested):
    assert not only(lint(ConvBlock(norm=True, nested=nested), select=["MSD109"]), "MSD109")


def test_the_same_layer_without_normalization_is_reported():
    (found,) = only(lint(ConvBlock(norm=False), select=["MSD109"]), "MSD109")
    assert found.location["parameter"] == "dw.weight" and "below" in found.message
    assert (found.evidence["fan_in"], found.evidence["fan_out"]) == (9, 9)  # per group: (C/groups)*k*k


def test_grouped_conv_fans_are_per_group():
    net = nn.SequentialCell(nn.Conv2d(16, 32, 3, group=4, weight_init=Normal(1e-3)), nn.Tanh(), nn.Conv2d(32, 4, 1))
    (found,) = only(lint(net, select=["MSD109"]), "MSD109")
    assert (found.evidence["fan_in"], found.evidence["fan_out"]) == (4 * 9, 8 * 9)


def test_too_large_init_is_cancelled_through_linear_ops_only():
    linear = nn.SequentialCell(nn.Dense(64, 64, weight_init=Normal(3.0)), nn.ReLU(), nn.Dense(64, 64),
                               nn.BatchNorm1d(64), nn.ReLU(), nn.Dense(64, 2))
    assert not only(lint(linear, select=["MSD109"]), "MSD109")
    saturating = nn.SequentialCell(nn.Dense(64, 64, weight_init=Normal(3.0)), nn.Tanh(), nn.BatchNorm1d(64),
                                   nn.Dense(64, 2))
    (found,) = only(lint(saturating, select=["MSD109"]), "MSD109")
    assert found.location["parameter"] == "0.weight" and "above" in found.message


class Residual(nn.Cell):
    def __init__(self, skip: bool):
        super().__init__()
        self.fc = nn.Dense(64, 64, weight_init=Normal(1e-4))
        self.act = nn.GELU()
        self.head = nn.Dense(64, 2)
        self.skip = skip

    def construct(self, x):
        h = self.act(self.fc(x))
        if self.skip:
            h = h + x
        return self.head(h)


def test_too_small_branch_beside_a_skip_connection_is_not_reported():
    assert not only(lint(Residual(skip=True), select=["MSD109"]), "MSD109")
    (found,) = only(lint(Residual(skip=False), select=["MSD109"]), "MSD109")
    assert found.location["parameter"] == "fc.weight"


def test_deep_unnormalized_tanh_mlp_is_still_reported():
    layers = []
    for _ in range(6):
        layers += [nn.Dense(64, 64, weight_init=Normal(0.01)), nn.Tanh()]
    found = only(lint(nn.SequentialCell(*layers, nn.Dense(64, 4)), select=["MSD109"]), "MSD109")
    assert len(found) == 6


class NormedBlock(nn.Cell):
    def __init__(self):
        super().__init__()
        self.proj = nn.Dense(8, 8, weight_init=Normal(1e-3))
        self.norm = nn.LayerNorm((8,))

    def construct(self, x):
        y = self.proj(x)
        y = ops.transpose(y, (1, 0))
        return x + self.norm(ops.transpose(y, (1, 0)))


def test_every_block_of_a_very_deep_network_is_followed():
    """The flow budget grows with the network: a fixed one ran out after 28 blocks of CaiT-S36 / CMT-B, and every
    later layer was judged as if nothing normalized it."""
    net = nn.SequentialCell([NormedBlock() for _ in range(400)])
    assert not only(lint(net, select=["MSD109"]), "MSD109")


def test_rule_scale_reset_kinds():
    base = dict(name="fc.weight", cell="fc", cell_type="Dense", role=signals.WEIGHT, shape=(100, 100), fan_in=100,
                fan_out=100, activation="ReLU")
    small, large = (2 / 100) ** 0.5 / 20, (2 / 100) ** 0.5 * 20
    for reset in (signals.NORM, signals.ACTIVATION_NORM, signals.SOFTMAX, signals.RESIDUAL):
        params = [signals.ParamSignal(**base, std=small, scale_reset=reset),
                  signals.ParamSignal(**{**base, "name": "o"})]
        assert not rules.poor_initialization(params, DoctorConfig())
    for reset, fires in ((signals.NORM, False), (signals.ACTIVATION_NORM, True), (signals.RESIDUAL, True),
                         (None, True)):
        params = [signals.ParamSignal(**base, std=large, scale_reset=reset)]
        assert bool(rules.poor_initialization(params, DoctorConfig())) == fires, reset


# --- MSD101: alias vs sharing ----------------------------------------------------------------------


class Aliased(nn.Cell):
    """SqueezeNet's pattern: the final conv is an attribute and an element of the classifier, run once."""

    def __init__(self):
        super().__init__()
        self.features = nn.Dense(8, 8)
        self.final_conv = nn.Dense(8, 4)
        self.classifier = nn.SequentialCell(nn.Dropout(p=0.5), self.final_conv, nn.ReLU())

    def construct(self, x):
        return self.classifier(self.features(x))


def test_a_cell_registered_twice_but_called_once_is_an_alias():
    assert not only(lint(Aliased(), select=["MSD101"]), "MSD101")


class Looped(nn.Cell):
    def __init__(self):
        super().__init__()
        block = nn.SequentialCell(nn.Dense(8, 8), nn.ReLU())
        self.blocks = nn.CellList()
        self.blocks.append(block)
        self.blocks.append(block)
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_one_object_repeated_in_a_container_is_sharing():
    repeated = nn.SequentialCell([nn.Dense(4, 4)] * 3)
    found = only(lint(repeated, select=["MSD101"]), "MSD101")
    assert found and all(f.severity.value == "warning" and f.evidence["uses"] == 3 for f in found)
    (weight, _bias) = only(lint(Looped(), select=["MSD101"]), "MSD101")
    assert weight.severity.value == "warning" and weight.evidence["paths"] == ["blocks.0.0", "blocks.1.0"]
    assert "2 call sites" in weight.message


def test_embedding_output_tying_is_info_tied_weights():
    (found,) = only(lint(TiedLM(), select=["MSD101"]), "MSD101")
    assert found.severity.value == "info" and "tied weights" in found.message


class SharedEncoding(nn.Cell):
    """CoaT's pattern: one position-encoding cell built by the parent and handed to two distinct blocks."""

    def __init__(self):
        super().__init__()
        self.encoding = nn.Dense(8, 8)
        self.block1 = Block(self.encoding)
        self.block2 = Block(self.encoding)

    def construct(self, x):
        return self.block2(self.block1(x))


class Block(nn.Cell):
    def __init__(self, encoding):
        super().__init__()
        self.encoding = encoding
        self.fc = nn.Dense(8, 8)

    def construct(self, x):
        return self.fc(x + self.encoding(x))


class BoundTogether(nn.Cell):
    """CoaT's parallel blocks: one MLP bound to two names in one statement, run on two scales."""

    def __init__(self):
        super().__init__()
        self.mlp2 = self.mlp3 = nn.Dense(8, 8)

    def construct(self, x, y):
        return self.mlp2(x) + self.mlp3(y)


class BoundApart(nn.Cell):
    def __init__(self):
        super().__init__()
        self.mlp2 = nn.Dense(8, 8)
        self.mlp3 = self.mlp2  # a second statement: not declared together

    def construct(self, x, y):
        return self.mlp2(x) + self.mlp3(y)


def test_one_cell_bound_to_several_names_in_one_statement_is_info():
    found = only(lint(BoundTogether(), select=["MSD101"]), "MSD101")
    assert len(found) == 2 and all(f.severity.value == "info" and f.evidence["sharing"] == "design" for f in found)
    apart = only(lint(BoundApart(), select=["MSD101"]), "MSD101")
    assert len(apart) == 2 and all(f.severity.value == "warning" for f in apart)


def test_one_cell_handed_to_distinct_cells_is_info():
    found = only(lint(SharedEncoding(), select=["MSD101"]), "MSD101")
    assert len(found) == 2 and all(f.evidence["paths"] == ["encoding", "block1.encoding", "block2.encoding"]
                                   for f in found)
    assert all(f.severity.value == "info" and f.evidence["uses"] == 2 for f in found)


# --- MSD102: frozen random weights vs transfer learning ---------------------------------------------


class SmallCNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.SequentialCell(nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.head = nn.Dense(16, 3)

    def construct(self, x):
        return self.head(self.flatten(self.pool(self.body(self.stem(x)))))


def _train_and_save(net, shape: tuple[int, ...], classes: int, steps: int, path) -> None:
    """A few Momentum steps on random images, then a checkpoint: trained values to load elsewhere."""
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal(shape).astype(np.float32))
    y = ms.Tensor(rng.integers(0, classes, shape[0]).astype(np.int32))
    loss = nn.WithLossCell(net, nn.CrossEntropyLoss())
    step = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    step.set_train()
    for _ in range(steps):
        step(x, y)
    ms.save_checkpoint(net, str(path))


def _fine_tuning_setup(tmp_path, load: bool):
    """Train a CNN a few steps, checkpoint it; a new instance (loaded or not) with its stem frozen."""
    _train_and_save(SmallCNN(), (16, 1, 8, 8), 3, 5, tmp_path / "cnn.ckpt")
    net = SmallCNN()
    if load:
        ms.load_param_into_net(net, ms.load_checkpoint(str(tmp_path / "cnn.ckpt")))
    for param in net.stem.get_parameters():
        param.requires_grad = False
    return net


def test_frozen_loaded_stem_left_out_of_the_optimizer_is_transfer_learning(tmp_path):
    net = _fine_tuning_setup(tmp_path, load=True)
    opt = nn.Momentum(filter(lambda p: p.requires_grad, net.get_parameters()), 0.01, 0.9)
    (found,) = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert found.severity.value == "info" and found.location["cell"] == "stem"
    assert "transfer learning" in found.message and False in found.evidence["at_init"]


def test_frozen_random_stem_is_an_error(tmp_path):
    net = _fine_tuning_setup(tmp_path, load=False)
    opt = nn.Momentum(filter(lambda p: p.requires_grad, net.get_parameters()), 0.01, 0.9)
    (found,) = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert found.severity.value == "error" and "random initialisation" in found.message
    assert found.evidence["at_init"] == [True, True, True]


def test_frozen_loaded_stem_still_held_by_the_optimizer_is_inconsistent(tmp_path):
    net = _fine_tuning_setup(tmp_path, load=True)
    opt = nn.Momentum(net.get_parameters(), 0.01, 0.9, weight_decay=1e-4)
    (found,) = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert found.severity.value == "error" and "held by the optimizer" in found.message


def test_trainable_weights_missing_from_the_optimizer_are_an_error():
    net = SmallCNN()
    found = only(lint(net, optimizer=nn.Adam(net.head.trainable_params(), 1e-3), select=["MSD102"]), "MSD102")
    assert sorted(f.location["cell"] for f in found) == ["body", "stem"]
    assert all(f.severity.value == "error" and "not held by the optimizer" in f.message for f in found)


class StemThenBody(nn.Cell):
    """mindcv's layout: the stem conv (Normal init) and its BatchNorm are siblings in one SequentialCell."""

    def __init__(self):
        super().__init__()
        self.features = nn.SequentialCell(nn.Conv2d(1, 8, 3, weight_init=Normal(0.1)), nn.BatchNorm2d(8), nn.ReLU(),
                                          nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
        self.head = nn.Dense(8, 3)

    def construct(self, x):
        return self.head(self.features(x).mean(axis=(2, 3)))


def _frozen_stem(trained_norm: bool):
    net = StemThenBody()
    if trained_norm:  # what a checkpoint load leaves in the BatchNorm that was trained on the stem's output
        rng = np.random.default_rng(0)
        net.features[1].gamma.set_data(ms.Tensor(1 + 0.1 * rng.standard_normal(8), ms.float32))
        net.features[1].beta.set_data(ms.Tensor(0.1 * rng.standard_normal(8), ms.float32))
    net.features[0].weight.requires_grad = False
    return net, nn.Momentum(filter(lambda p: p.requires_grad, net.get_parameters()), 0.01, 0.9)


def test_frozen_normal_init_conv_read_by_a_trained_batchnorm_is_loaded():
    net, opt = _frozen_stem(trained_norm=True)
    (found,) = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert found.severity.value == "info" and found.location["cell"] == "features.0"
    assert found.evidence["at_init"] == [False]


def test_frozen_normal_init_conv_read_by_a_fresh_batchnorm_stays_an_error():
    net, opt = _frozen_stem(trained_norm=False)
    (found,) = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert found.severity.value == "error" and found.evidence["at_init"] == [None]


def _mindcv_transfer(tmp_path, load: bool):
    """The corpus' transfer recipe: MobileNetV3 trained on a 4-class task, its backbone loaded into a 10-class
    model, the stem (conv + BatchNorm siblings) and first bottleneck frozen, optimizer over the rest."""
    source = mindcv.create_model("mobilenet_v3_small_075", num_classes=4, in_channels=1, pretrained=False)
    _train_and_save(source, (8, 1, 16, 16), 4, 3, tmp_path / "source.ckpt")
    net = mindcv.create_model("mobilenet_v3_small_075", num_classes=10, in_channels=1, pretrained=False)
    if load:
        params = ms.load_checkpoint(str(tmp_path / "source.ckpt"))
        ms.load_param_into_net(net, {k: v for k, v in params.items() if not k.startswith("classifier.")})
    for p in net.get_parameters():
        if p.name.startswith(("features.0.", "features.1.", "features.3.")):
            p.requires_grad = False
    return net, nn.Momentum(filter(lambda p: p.requires_grad, net.get_parameters()), 0.01, 0.9)


def test_mindcv_transfer_learning_with_a_frozen_loaded_stem_is_info(tmp_path):
    net, opt = _mindcv_transfer(tmp_path, load=True)
    found = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert sorted(f.location["cell"] for f in found) == ["features.0", "features.1", "features.3"]
    assert all(f.severity.value == "info" and "transfer learning" in f.message for f in found)


def test_mindcv_frozen_stem_without_the_checkpoint_is_an_error(tmp_path):
    net, opt = _mindcv_transfer(tmp_path, load=False)
    found = only(lint(net, optimizer=opt, select=["MSD102"]), "MSD102")
    assert sorted(f.location["cell"] for f in found) == ["features.0", "features.1", "features.3"]
    assert all(f.severity.value == "error" for f in found)


# --- MSD102/MSD109: a fixed layer (mindyolo's DFL) ---------------------------------------------------


class WithFixedLayer(nn.Cell):
    """mindyolo's DFL integral (a frozen 1x1 conv whose weights are ``arange(16)``) after a trainable layer."""

    def __init__(self, initialise: bool = True, weight_init=None):
        super().__init__()
        from mindyolo.models.layers.common import DFL

        self.fc = nn.Dense(8, 64)
        self.dfl = DFL(16)
        if weight_init is not None:
            self.dfl.conv.weight.set_data(ms.Tensor(weight_init, ms.float32))
        elif initialise:
            self.dfl.initialize_conv_weight()

    def construct(self, x):
        return self.dfl(self.fc(x).view(-1, 64, 1))


def test_frozen_deterministic_kernel_is_a_constant_layer_by_design():
    pytest.importorskip("mindyolo")
    net = WithFixedLayer()
    report = lint(net, optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9), select=["MSD102", "MSD109"])
    (found,) = only(report, "MSD102")
    assert found.severity.value == "info" and found.location["cell"] == "dfl" and "fixed values" in found.message
    assert not only(report, "MSD109")  # std 4.6 is not an init: nothing starts from it


@pytest.mark.parametrize("why", ["not initialised", "random normal", "constant"])
def test_frozen_random_or_constant_kernel_in_the_same_place_stays_an_error(why):
    pytest.importorskip("mindyolo")
    weights = {"not initialised": None, "random normal": np.random.default_rng(0).normal(0, 4.6, (1, 16, 1, 1)),
               "constant": np.full((1, 16, 1, 1), 7.5)}[why]
    net = WithFixedLayer(initialise=False, weight_init=weights)
    (found,) = only(lint(net, optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9), select=["MSD102"]), "MSD102")
    assert found.severity.value == "error" and "fixed values" not in found.message, why


def test_the_same_kernel_trainable_is_judged_by_msd109():
    pytest.importorskip("mindyolo")
    net = WithFixedLayer()
    net.dfl.conv.weight.requires_grad = True
    (found,) = only(lint(net, select=["MSD109"]), "MSD109")
    assert "above" in found.message and found.location["cell"] == "dfl.conv"


def _signal(name, cell, **kw):
    return signals.ParamSignal(name=name, cell=cell, cell_type="Conv2d", role=signals.WEIGHT, shape=(1, 16, 1, 1),
                             requires_grad=False, in_optimizer=False, **kw)


def test_rule_a_fixed_layer_neither_hides_nor_joins_frozen_random_weights():
    params = [_signal("head.cv.weight", "head.cv", at_init=True), _signal("head.dfl.weight", "head.dfl", fixed=True),
              dataclasses.replace(_signal("fc.weight", "fc"), requires_grad=True, in_optimizer=True)]
    found = {f.location["cell"]: f for f in rules.frozen_parameter(params, DoctorConfig())}
    assert found["head"].severity.value == "error" and found["head"].evidence["parameters"] == ["head.cv.weight"]
    assert found["head.dfl"].severity.value == "info"
    held = [dataclasses.replace(params[1], in_optimizer=True)]
    assert [f.severity.value for f in rules.frozen_parameter(held, DoctorConfig())] == ["error"]


# --- locations: the registration path, not a library's parameter name ------------------------------


def test_location_of_a_mindcv_parameter_named_before_its_cell_was_placed():
    net = mindcv.create_model("edgenext_xx_small", num_classes=10, pretrained=False)
    dwconv = net.stages[0][0].dwconv
    assert dwconv.weight.name == "0.0.dwconv.weight"  # mindcv's name, not the path stages.0.0.dwconv.weight
    dwconv.weight.requires_grad = False
    (found,) = only(lint(net, optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9), select=["MSD102"]),
                    "MSD102")
    assert found.location["cell"] == "stages.0.0.dwconv" and found.location["parameter"] == "0.0.dwconv.weight"
    assert found.where == "stages.0.0.dwconv.weight"


def test_rule_parameter_location_adds_the_path_only_where_it_differs():
    assert signals.parameter_location("stages.0.0.dwconv", "weight", "0.0.dwconv.weight") == {
        "cell": "stages.0.0.dwconv", "parameter": "0.0.dwconv.weight", "parameter_path": "stages.0.0.dwconv.weight"}
    assert signals.parameter_location("fc", "weight", "fc.weight") == {"cell": "fc", "parameter": "fc.weight"}
    assert signals.parameter_location("", "w", "w") == {"cell": "", "parameter": "w"}


# --- MSD110: construct's first argument, parameterless cells -------------------------------------------


class NotCalledSelf(nn.Cell):
    def __init__(s):  # noqa: N805 - the point of the test
        super().__init__()
        s.fc = nn.Dense(4, 4)
        s.head = nn.Dense(4, 2)
        s.unused = nn.Dense(4, 2)
        s.softmax = nn.Softmax()  # defined, applied functionally below: holds nothing to train

    def construct(cell, x):  # noqa: N805
        return ops.softmax(cell.head(cell.fc(x)))


def test_construct_first_argument_need_not_be_named_self():
    found = only(lint(NotCalledSelf(), select=["MSD110"]), "MSD110")
    assert [f.location["cell"] for f in found] == ["unused"]


class ListedBranches(nn.Cell):
    """Branches registered under their own names and run through a plain list (RepMLP), a ParameterTuple
    used by index (CrossViT)."""

    def __init__(self):
        super().__init__()
        self.branch1 = nn.Dense(4, 4)
        self.branch3 = nn.Dense(4, 4)
        self.branches = [self.branch1, self.branch3]
        self.tokens = ms.ParameterTuple([ms.Parameter(ms.Tensor(np.zeros((1, 4), np.float32)), name=f"tok{i}")
                                         for i in range(2)])

    def construct(self, x):
        out = 0
        for branch in self.branches:
            out += branch(x)
        return out + self.tokens[0] + self.tokens[1]


def test_cells_in_a_list_attribute_and_parameter_tuples_count_as_used():
    assert not only(lint(ListedBranches(), select=["MSD110"]), "MSD110")


SOURCE = """
from mindspore import nn, ops

class Net(nn.Cell):
    def __init__(s):
        super().__init__()
        s.fc = nn.Dense(4, 4)
        s.unused = nn.Dense(4, 2)
        s.softmax = nn.Softmax()
        s.sum = ops.ReduceSum()

    def construct(s, x):
        return s.fc(x)
"""


def test_source_mode_reads_any_first_argument_and_skips_cells_without_parameters(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    found = only(lint_source(path), "MSD110")
    assert [f.location["line"] for f in found] == [8] and "`Net.unused`" in found[0].message


class AuxHead(nn.Cell):
    """An auxiliary head computed and dropped (a fault), next to a recurrent state carried by a loop (not one)."""

    def __init__(self, use_aux: bool):
        super().__init__()
        self.cell = nn.Dense(8, 8)
        self.aux_head = nn.Dense(8, 2)
        self.head = nn.Dense(8, 2)
        self.use_aux = use_aux

    def construct(self, x):
        state = x
        outputs = []
        for _ in range(3):
            outputs.append(self.head(state))
            state = self.cell(state)  # read by the next iteration only
        aux = self.aux_head(state)
        if self.use_aux:
            return outputs[-1] + aux
        return outputs[-1]


def test_a_cell_whose_output_is_dropped_is_disconnected():
    (found,) = only(lint(AuxHead(use_aux=False), select=["MSD110"]), "MSD110")
    assert found.location["cell"] == "aux_head" and "output is never used" in found.message


def test_a_used_output_and_a_loop_carried_state_are_connected():
    assert not only(lint(AuxHead(use_aux=True), select=["MSD110"]), "MSD110")


class RawTables(nn.Cell):
    """Hand-written layers keeping their tensors as raw Parameters."""

    def __init__(self, frozen: bool, zero_weight: bool):
        super().__init__()
        table = np.random.default_rng(0).normal(0, 0.1, (20, 8)).astype(np.float32)
        self.token_table = ms.Parameter(ms.Tensor(table), name="token_table", requires_grad=not frozen)
        weight = np.zeros((8, 8), np.float32) if zero_weight else np.eye(8, dtype=np.float32)
        self.w = ms.Parameter(ms.Tensor(weight), name="w")
        self.pos = ms.Parameter(ms.Tensor(np.zeros((1, 8), np.float32)), name="pos")  # additive: zeros are fine
        self.head = nn.Dense(8, 2)

    def construct(self, ids):
        h = ops.gather(self.token_table, ids, 0) + self.pos
        return self.head(ops.relu(ops.matmul(h, self.w)))


def test_raw_parameters_are_judged_by_how_construct_uses_them():
    report = lint(RawTables(frozen=True, zero_weight=True), select=["MSD102", "MSD108"])
    (frozen,) = only(report, "MSD102")
    assert frozen.location["parameter"] == "token_table"
    (zero,) = only(report, "MSD108")
    assert zero.location["parameter"] == "w"
    assert not lint(RawTables(frozen=False, zero_weight=False), select=["MSD102", "MSD108"]).findings


# --- MSD116 weight decay --------------------------------------------------------------------------


def _net():
    return nn.SequentialCell(nn.Dense(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dense(8, 2))


def _split(net):
    weights = [p for p in net.trainable_params() if p.ndim > 1]
    ids = {id(p) for p in weights}
    return weights, [p for p in net.trainable_params() if id(p) not in ids]


def test_weight_decay_of_one_group_far_above_the_range_fires():
    net = _net()
    weights, rest = _split(net)
    opt = nn.Momentum([{"params": weights, "weight_decay": 0.5}, {"params": rest}], 0.1, 0.9, weight_decay=1e-4)
    (found,) = only(lint(net, optimizer=opt, select=["MSD116"]), "MSD116")
    assert found.severity.value == "warning" and found.location == {"optimizer": "Momentum", "group": "group 0"}
    assert found.evidence["weight_decay"] == 0.5 and "50x the usual upper end 0.01" in found.message
    assert "`0.weight` and 1 more" in found.message


def test_decay_above_the_range_on_norm_and_bias_parameters_fires():
    from mindspore.experimental import optim

    net = _net()
    (found,) = only(lint(net, optimizer=optim.AdamW(net.trainable_params(), lr=1e-3, weight_decay=0.5),
                         select=["MSD116"]), "MSD116")
    assert found.evidence["norm_or_bias"] == ["0.bias", "1.gamma", "1.beta", "3.bias"]
    assert found.location["parameter"] == "0.bias"


def test_decay_within_the_range_on_norm_and_bias_parameters_is_quiet():
    net = _net()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9, weight_decay=0.05)  # bias decayed (MindSpore's filter)
    (found,) = only(lint(net, optimizer=opt, select=["MSD116"]), "MSD116")
    assert found.evidence["norm_or_bias"] == ["0.bias", "3.bias"]
    near = nn.Momentum(net.trainable_params(), 0.1, 0.9, weight_decay=5e-3)
    assert not only(lint(net, optimizer=near, select=["MSD116"]), "MSD116")


@pytest.mark.parametrize(
    "make",
    [
        lambda p: nn.Momentum(p, 0.1, 0.9, weight_decay=1e-4),
        lambda p: nn.AdamWeightDecay(p, 1e-3, weight_decay=0.05),
        lambda p: ms.experimental.optim.AdamW(p, lr=1e-3, weight_decay=0.05),
        lambda p: mindcv.optim.create_optimizer(p, opt="adamw", lr=1e-3, weight_decay=0.05),
        lambda p: mindcv.optim.create_optimizer(p, opt="momentum", lr=0.1, weight_decay=1e-4),
        lambda p: mindcv.optim.create_optimizer(p, opt="sgd", lr=0.1, weight_decay=5e-4,
                                                weight_decay_filter="norm_and_bias"),
    ],
)
def test_usual_weight_decay_recipes_are_quiet(make):
    net = _net()
    assert not only(lint(net, optimizer=make(net.trainable_params()), select=["MSD116", "MSD002"]), "MSD116")


def test_rule_weight_decay_thresholds_come_from_the_config():
    from mindspore_doctor.static.signals import DecayGroup, OptimizerSignal

    signal = OptimizerSignal("Momentum", "sgd", decay_groups=(DecayGroup("", 0.2, ("w",)),))
    assert rules.weight_decay_out_of_range(signal, DoctorConfig())
    assert not rules.weight_decay_out_of_range(signal, DoctorConfig(sgd_weight_decay_max=0.05))
    near = OptimizerSignal("Momentum", "sgd", decay_groups=(DecayGroup("", 0.09, ("w", "b"), ("b",)),))
    (on_bias,) = rules.weight_decay_out_of_range(near, DoctorConfig())
    assert on_bias.location["parameter"] == "b"
    assert not rules.weight_decay_out_of_range(near, DoctorConfig(sgd_weight_decay_max=0.1))


# --- config= is a base that keyword options override ------------------------------------------------


def test_lint_config_and_keywords_combine():
    net = nn.SequentialCell(nn.Dense(64, 64, weight_init=Normal(5.0)), nn.ReLU(), nn.Dense(64, 2))
    config = DoctorConfig(select=("MSD109", "MSD110"))
    assert only(lint(net, config=config), "MSD109")
    assert not lint(net, config=config, ignore=["MSD109"]).findings
    assert not only(lint(net, config=config, init_std_factor=100.0), "MSD109")


def test_lint_source_config_and_keywords_combine(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(SOURCE)
    assert only(lint_source(path, config=DoctorConfig(select=("MSD110",))), "MSD110")
    assert not lint_source(path, config=DoctorConfig(select=("MSD110",)), ignore=["MSD110"]).findings


def test_check_data_config_and_keywords_combine():
    labels = np.array([0] * 200 + [1] * 4, np.int32)
    data = ms.dataset.NumpySlicesDataset({"x": np.random.default_rng(0).standard_normal((204, 3)).astype(np.float32),
                                          "label": labels}, shuffle=True).batch(32)
    config = DoctorConfig(select=("MSD302",))
    assert only(check_data(data, config=config), "MSD302")
    assert not only(check_data(data, config=config, ignore=["MSD302"]), "MSD302")


def test_doctor_accepts_a_config_and_overrides():
    doctor = Doctor(config=DoctorConfig(probe_every=7, init_std_factor=3.0), probe_every=5)
    assert (doctor.config.probe_every, doctor.config.init_std_factor) == (5, 3.0)
    with pytest.raises(TypeError, match="DoctorConfig"):
        Doctor(config={"probe_every": 5})
