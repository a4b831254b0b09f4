"""``mindspore.mint`` in the static rules: layers, functionals, losses and ``mint.optim`` optimizers, each with a
firing case and a near miss, in object mode (real mint cells) and source mode (``--no-import``) where the rule has
one. mint signatures follow PyTorch: ``p`` is the drop probability, softmax takes ``dim``."""
from __future__ import annotations

import textwrap

import mindspore.mint.nn.functional as F
import pytest
from mindspore import mint, nn
from mindspore.mint import optim
from mindspore.mint.nn import functional as MF

from mindspore_doctor.runners.lint import lint, lint_source

from test_static_layers import _line_of, _only


class Head(nn.Cell):
    """mint Linear, then ``last`` (a mint activation or Dropout)."""

    def __init__(self, last: nn.Cell, before: nn.Cell | None = None):
        super().__init__()
        self.fc = mint.nn.Linear(8, 4)
        self.before = before if before is not None else mint.nn.Identity()
        self.last = last

    def construct(self, x):
        return self.last(self.fc(self.before(x)))


def _write(tmp_path, source: str):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(source))
    return path


# --- MSD104 dropout ------------------------------------------------------------------------------


def test_mint_dropout_cells_fire_on_their_drop_probability():
    [finding] = _only(lint(Head(mint.nn.Identity(), mint.nn.Dropout(p=0.9))), "MSD104")
    assert finding.location["cell"] == "before"
    assert finding.message.startswith("`before` drops 90 % of activations (p=0.9)")
    assert finding.evidence["drop_rate"] == 0.9 and not finding.evidence["via_keep_prob"]
    [finding] = _only(lint(Head(mint.nn.Identity(), mint.nn.Dropout2d(p=0.7))), "MSD104")
    assert finding.message.startswith("`before` drops 70 %")


def test_mint_dropout_cells_with_small_rates_are_quiet():
    for dropout in (mint.nn.Dropout(p=0.1), mint.nn.Dropout(), mint.nn.Dropout2d(0.3), mint.nn.Dropout(0.5)):
        assert not _only(lint(Head(mint.nn.Identity(), dropout)), "MSD104")


class FunctionalDropout(nn.Cell):
    def __init__(self, p: float):
        super().__init__()
        self.fc = mint.nn.Linear(8, 4)
        self.p = p

    def construct(self, x):
        return self.fc(mint.nn.functional.dropout(x, p=self.p))


def test_mint_functional_dropout_fires_with_line_and_near_miss():
    [finding] = _only(lint(FunctionalDropout(0.9)), "MSD104")
    assert finding.location["line"] == _line_of(FunctionalDropout, "functional.dropout(")
    assert "`mint.nn.functional.dropout(x, p=self.p)` drops 90 %" in finding.message
    assert not _only(lint(FunctionalDropout(0.1)), "MSD104")


DROPOUT_SOURCE = """\
from mindspore import mint
import mindspore.mint.nn.functional as F
from mindspore.mint import nn


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = mint.nn.Linear(8, 4)
        self.drop = mint.nn.Dropout(0.9)
        self.drop_alias = nn.Dropout(0.8)
        self.drop2d = nn.Dropout2d(p=0.7)

    def construct(self, x):
        x = F.dropout(x, 0.95)
        return self.fc(self.drop2d(self.drop_alias(self.drop(x))))
"""


def test_source_mode_reads_mint_dropout_positional_p_through_imports(tmp_path):
    findings = {f.location["line"]: f for f in _only(lint_source(_write(tmp_path, DROPOUT_SOURCE)), "MSD104")}
    assert sorted(findings) == [10, 11, 12, 15]
    assert "`Net.drop` drops 90 % of activations (p=0.9)" in findings[10].message
    assert "`Net.drop_alias` drops 80 % of activations (p=0.8)" in findings[11].message
    assert "`F.dropout(x, 0.95)` drops 95 %" in findings[15].message


def test_source_mode_nn_dropout_positional_is_still_keep_prob(tmp_path):
    quiet = DROPOUT_SOURCE.replace("from mindspore.mint import nn", "from mindspore import nn")
    quiet = quiet.replace("mint.nn.Dropout(0.9)", "mint.nn.Dropout(0.1)").replace("p=0.7", "p=0.3")
    quiet = quiet.replace("0.95", "0.05")
    assert not _only(lint_source(_write(tmp_path, quiet)), "MSD104")  # nn.Dropout(0.8): keep 80 %


# --- MSD105 BatchNorm --------------------------------------------------------------------------


class BN(nn.Cell):
    def __init__(self, **kwargs):
        super().__init__()
        self.bn = mint.nn.BatchNorm1d(4, **kwargs)
        self.fc = mint.nn.Linear(4, 2)

    def construct(self, x):
        return self.fc(self.bn(x))


def test_mint_batchnorm_without_running_statistics_fires():
    [finding] = _only(lint(BN(track_running_stats=False)), "MSD105")
    assert finding.location["cell"] == "bn"
    assert finding.message.startswith("`bn` has track_running_stats=False: in eval/predict mode it still normalises "
                                      "with the statistics of the current batch")
    assert "track_running_stats=True" in finding.suggestion
    assert finding.evidence["use_batch_statistics"] is True


def test_mint_batchnorm_default_is_quiet():
    assert not _only(lint(BN()), "MSD105")
    assert not _only(lint(BN(track_running_stats=True)), "MSD105")


def test_source_mode_mint_batchnorm(tmp_path):
    source = """\
    from mindspore import mint, nn


    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.bn = mint.nn.BatchNorm2d(4, track_running_stats=False)
            self.bn_ok = mint.nn.BatchNorm2d(4, track_running_stats=True)

        def construct(self, x):
            return self.bn_ok(self.bn(x))
    """
    [finding] = _only(lint_source(_write(tmp_path, source)), "MSD105")
    assert finding.location["line"] == 7 and "`Net.bn` has track_running_stats=False" in finding.message


# --- MSD106 division / sqrt --------------------------------------------------------------------


class Normalise(nn.Cell):
    def __init__(self, eps: bool):
        super().__init__()
        self.eps = eps

    def construct(self, x):
        if self.eps:
            return mint.div(x, mint.sqrt(mint.sum(x * x) + 1e-6))
        total = mint.sum(x)
        return mint.div(x, mint.sqrt(total))


def test_mint_div_by_a_sum_through_sqrt_fires_and_epsilon_is_quiet():
    [finding] = _only(lint(Normalise(False)), "MSD106")
    assert finding.location["line"] == _line_of(Normalise, "mint.div(x, mint.sqrt(total))")
    assert "divides by `mint.sqrt(total)`" in finding.message and "`total` = `mint.sum(x)` (a sum" in finding.message
    guarded = [f for f in _only(lint(Normalise(True)), "MSD106") if "1e-06" in f.message]
    assert not guarded


def test_source_mode_mint_division(tmp_path):
    source = """\
    import mindspore.mint as M
    from mindspore import nn


    class Norm(nn.Cell):
        def construct(self, x):
            n = M.sum(x)
            return M.div(x, n) + x / M.sqrt(M.mean(x * x) + 1e-6)
    """
    [finding] = _only(lint_source(_write(tmp_path, source)), "MSD106")
    assert finding.location["line"] == 8 and "divides by `n` in `M.div(x, n)`" in finding.message


# --- MSD113 softmax dim ------------------------------------------------------------------------


def test_mint_softmax_cells_over_the_batch_axis_fire():
    [finding] = _only(lint(Head(mint.nn.Softmax(dim=0))), "MSD113")
    assert finding.location["cell"] == "last" and "`last` (Softmax) normalises over axis 0" in finding.message
    [finding] = _only(lint(Head(mint.nn.LogSoftmax(dim=0))), "MSD113")
    assert "(LogSoftmax)" in finding.message


def test_mint_softmax_cells_over_classes_or_implicit_dim_are_quiet():
    for last in (mint.nn.Softmax(dim=1), mint.nn.Softmax(dim=-1), mint.nn.LogSoftmax(dim=1), mint.nn.Softmax()):
        assert not _only(lint(Head(last)), "MSD113")


class FunctionalSoftmax(nn.Cell):
    def __init__(self, dim: int):
        super().__init__()
        self.fc = mint.nn.Linear(8, 4)
        self.dim = dim

    def construct(self, x):
        h = self.fc(x)
        a = mint.softmax(h, dim=self.dim)
        b = MF.log_softmax(h, self.dim)
        return a + b + F.softmax(h, self.dim)


def test_mint_functional_softmax_dim_fires_through_import_aliases():
    findings = _only(lint(FunctionalSoftmax(0)), "MSD113")
    assert sorted(f.message.split("`")[1] for f in findings) == [
        "F.softmax(h, self.dim)", "MF.log_softmax(h, self.dim)", "mint.softmax(h, dim=self.dim)"]
    assert not _only(lint(FunctionalSoftmax(1)), "MSD113")


def test_source_mode_mint_softmax_dim(tmp_path):
    source = """\
    from mindspore import mint, nn
    from mindspore.mint.nn import functional as G


    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.sm = mint.nn.Softmax(dim=0)
            self.ok = mint.nn.Softmax(dim=1)

        def construct(self, x):
            return self.ok(self.sm(x)) + G.softmax(x, 0) + G.softmax(x, 1) + mint.softmax(x, dim=-1)
    """
    lines = sorted(f.location["line"] for f in _only(lint_source(_write(tmp_path, source)), "MSD113"))
    assert lines == [8, 12]


# --- MSD107 losses -------------------------------------------------------------------------------


@pytest.mark.parametrize("last, loss, needle", [
    (mint.nn.Softmax(dim=1), mint.nn.CrossEntropyLoss(), "ends in Softmax (probabilities) but `CrossEntropyLoss`"),
    (mint.nn.Sigmoid(), mint.nn.BCEWithLogitsLoss(), "ends in Sigmoid (probabilities) but `BCEWithLogitsLoss`"),
    (mint.nn.Identity(), mint.nn.NLLLoss(), "ends in a linear layer (logits) but `NLLLoss`"),
])
def test_mint_loss_after_the_wrong_activation_fires(last, loss, needle):
    [finding] = _only(lint(Head(last), loss_fn=loss), "MSD107")
    assert needle in finding.message


@pytest.mark.parametrize("last, loss", [
    (mint.nn.Identity(), mint.nn.CrossEntropyLoss()),
    (mint.nn.Identity(), mint.nn.BCEWithLogitsLoss()),
    (mint.nn.LogSoftmax(dim=1), mint.nn.NLLLoss()),
])
def test_mint_loss_after_the_right_activation_is_quiet(last, loss):
    assert not _only(lint(Head(last), loss_fn=loss), "MSD107")


class SoftmaxCE(nn.Cell):
    def construct(self, logits, labels):
        return F.cross_entropy(mint.softmax(logits, dim=1), labels)


class CE(nn.Cell):
    def construct(self, logits, labels):
        return F.cross_entropy(logits, labels)


class NLL(nn.Cell):
    def construct(self, logits, labels):
        return F.nll_loss(logits, labels)


class LogSoftmaxNLL(nn.Cell):
    def construct(self, logits, labels):
        return F.nll_loss(F.log_softmax(logits, dim=1), labels)


class SigmoidBCE(nn.Cell):
    def construct(self, logits, labels):
        return F.binary_cross_entropy_with_logits(mint.sigmoid(logits), labels)


class LogLikelihood(nn.Cell):
    def construct(self, logits, labels):
        return -mint.mean(mint.log(logits) * labels)


class SigmoidLogLikelihood(nn.Cell):
    def construct(self, logits, labels):
        return -mint.mean(mint.log(mint.sigmoid(logits)) * labels)


@pytest.mark.parametrize("loss, sink", [(SoftmaxCE, "CrossEntropyLoss"), (NLL, "NLLLoss"),
                                        (SigmoidBCE, "BCEWithLogitsLoss"), (LogLikelihood, "log")])
def test_hand_written_loss_with_mint_functionals_fires(loss, sink):
    [finding] = _only(lint(Head(mint.nn.Identity()), loss_fn=loss()), "MSD107")
    assert finding.evidence["loss"] == sink and finding.location["cell"] == "loss_fn"


@pytest.mark.parametrize("loss", [CE, LogSoftmaxNLL, SigmoidLogLikelihood])
def test_hand_written_loss_with_mint_functionals_near_miss(loss):
    assert not _only(lint(Head(mint.nn.Identity()), loss_fn=loss()), "MSD107")


# --- mint.optim: MSD102 / MSD103 / MSD111 / MSD116 ------------------------------------------------


class MLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = mint.nn.Linear(8, 16)
        self.ln = mint.nn.LayerNorm(16)
        self.fc2 = mint.nn.Linear(16, 4)

    def construct(self, x):
        return self.fc2(mint.nn.functional.relu(self.ln(self.fc1(x))))


@pytest.mark.parametrize("make, lr, family", [(optim.AdamW, 10.0, "Adam"), (optim.Adam, 0.5, "Adam"),
                                              (optim.SGD, 10.0, "SGD")])
def test_mint_optimizer_learning_rate_out_of_range_fires(make, lr, family):
    net = MLP()
    [finding] = _only(lint(net, optimizer=make(net.trainable_params(), lr=lr)), "MSD111")
    assert finding.message.startswith(f"{make.__name__} learning rate {lr:g} is above the sane range")
    assert f"for {family}-family optimizers" in finding.message


@pytest.mark.parametrize("make, lr", [(optim.AdamW, 1e-3), (optim.Adam, 3e-4), (optim.SGD, 0.1)])
def test_mint_optimizer_sane_learning_rate_and_default_decay_are_quiet(make, lr):
    net = MLP()
    report = lint(net, loss_fn=mint.nn.CrossEntropyLoss(), optimizer=make(net.trainable_params(), lr=lr))
    assert not [f for f in report.findings if f.code != "MSD002"]  # MSD109 on mint Linear's default init too


def test_mint_optimizer_group_learning_rate_is_read_per_group():
    net = MLP()
    opt = optim.AdamW([{"params": net.fc1.trainable_params(), "lr": 5.0},
                       {"params": [*net.ln.trainable_params(), *net.fc2.trainable_params()]}], lr=1e-3)
    [finding] = _only(lint(net, optimizer=opt), "MSD111")
    assert "AdamW (group 0: `fc1.weight` and 1 more) learning rate 5" in finding.message


def test_mint_optimizer_missing_parameters_fire_msd102_and_full_is_quiet():
    net = MLP()
    opt = optim.Adam([*net.fc1.trainable_params(), *net.ln.trainable_params()], lr=1e-3)
    [finding] = _only(lint(net, optimizer=opt), "MSD102")
    assert "`fc2` are trainable but not held by the optimizer (`fc2.weight`, `fc2.bias`)" in finding.message
    assert not _only(lint(net, optimizer=optim.Adam(net.trainable_params(), lr=1e-3)), "MSD102")


def test_mint_optimizer_of_another_instance_fires_msd103():
    net, other = MLP(), MLP()
    [finding] = _only(lint(net, optimizer=optim.SGD(other.trainable_params(), lr=0.1)), "MSD103")
    assert finding.message.startswith("SGD holds 6 of 6 parameters that are not in the network")
    assert not _only(lint(net, optimizer=optim.SGD(net.trainable_params(), lr=0.1)), "MSD103")


def test_mint_optimizer_decay_on_layernorm_fires_msd116_naming_its_parameters():
    net = MLP()
    opt = optim.AdamW([{"params": net.ln.trainable_params(), "weight_decay": 0.5},
                       {"params": [*net.fc1.trainable_params(), *net.fc2.trainable_params()], "weight_decay": 0.05}],
                      lr=1e-3)
    [finding] = _only(lint(net, optimizer=opt), "MSD116")
    assert "decays 2 normalization/bias parameters (`ln.weight`, `ln.bias`) by 0.5" in finding.message
    opt = optim.AdamW([{"params": net.ln.trainable_params(), "weight_decay": 0.0},
                       {"params": [*net.fc1.trainable_params(), *net.fc2.trainable_params()], "weight_decay": 0.05}],
                      lr=1e-3)
    assert not _only(lint(net, optimizer=opt), "MSD116")
