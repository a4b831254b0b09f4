"""Issue 24, static rules across domains: masked means (MSD106), the train mode without mode-dependent cells
(MSD105), a loss/activation mismatch behind a constructor flag (MSD107). Each class: the real-code shapes that
must stay quiet (or `info`) and the near misses that must still fire."""
from __future__ import annotations

import importlib.util
import sys

import mindspore as ms
import numpy as np
import pytest
from mindspore import mint, nn, ops

from mindspore_doctor.runners.lint import lint, lint_source

from test_static_layers import _line_of, _only


def _severities(report, code):
    return [f.severity.value for f in _only(report, code)]


# --- MSD106: masked means ---------------------------------------------------------------------


def sequence_mask(seq_length, max_length):
    """The CRF tutorial's helper: True for the valid positions of each sequence."""
    arange = ops.arange(0, max_length, dtype=seq_length.dtype)
    return arange < seq_length.expand_dims(-1)


class CRF(nn.Cell):
    """The reduction tail of MindSpore's BiLSTM-CRF tutorial (`CRF._forward`): the mean negative log-likelihood over
    the valid tokens ("token_mean"), or a plain mean/sum chosen by a constant attribute."""

    def __init__(self, num_tags=5, reduction="token_mean"):
        super().__init__()
        self.reduction = reduction
        self.transitions = ms.Parameter(ms.Tensor(np.zeros((num_tags, num_tags), np.float32)), name="transitions")

    def construct(self, emissions, tags, seq_length):
        max_length = tags.shape[1]
        mask = sequence_mask(seq_length, max_length)
        llh = (emissions.sum(-1) * mask.astype(emissions.dtype)).sum(-1) + self.transitions.sum()
        if self.reduction == "none":
            return llh
        if self.reduction == "sum":
            return llh.sum()
        if self.reduction == "mean":
            return llh.mean()
        return llh.sum() / mask.astype(emissions.dtype).sum()


class GCNLoss(nn.Cell):
    """MindSpore models' GCN `Loss`: the training-node mask is a constant tensor the cell holds, normalised by its
    mean (`mask / self.mean(mask)`)."""

    def __init__(self, mask):
        super().__init__()
        self.mask = ms.Tensor(mask)
        self.mean = ops.ReduceMean()
        self.cast = ops.Cast()
        self.fc = nn.Dense(4, 1)

    def construct(self, x):
        loss = self.fc(x).squeeze(-1)
        mask = self.cast(self.mask, ms.float32)
        mask_reduce = self.mean(mask)
        mask = mask / mask_reduce
        return self.mean(loss * mask)


class GCNMaskArgument(nn.Cell):
    """The same normalisation with the train mask passed in (a column of the dataset)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 1)

    def construct(self, x, train_mask):
        loss = self.fc(x).squeeze(-1)
        return (loss * train_mask / ops.mean(train_mask)).mean()


def test_crf_token_mean_is_an_info_masked_mean_with_the_guard():
    [finding] = _only(lint(CRF()), "MSD106")
    assert finding.severity.value == "info" and finding.evidence["masked_mean"]
    assert finding.location["line"] == _line_of(CRF, "return llh.sum() / mask")
    assert "mask `mask`" in finding.message and "sequence_mask(seq_length, max_length)" in finding.message
    assert "ops.maximum(mask.astype(emissions.dtype).sum(), 1)" in finding.suggestion


def test_the_reduction_branch_a_constant_attribute_rules_out_is_not_judged():
    assert not _only(lint(CRF(reduction="mean")), "MSD106")


def test_gcn_mask_held_by_the_cell_with_a_training_node_is_safe():
    mask = np.zeros(16, np.float32)
    mask[:4] = 1
    assert not _only(lint(GCNLoss(mask)), "MSD106")
    [empty] = _only(lint(GCNLoss(np.zeros(16, np.float32))), "MSD106")  # an empty mask is a masked mean still
    assert empty.severity.value == "info" and "a 0/1 tensor the cell holds" in empty.message


def test_gcn_mask_passed_in_is_an_info_masked_mean():
    [finding] = _only(lint(GCNMaskArgument()), "MSD106")
    assert finding.severity.value == "info" and "the argument `train_mask`" in finding.message


def _spelled(name: str) -> str:
    body = {"method": "valid.sum()", "ops.sum": "ops.sum(valid)", "ops.ReduceSum()": "ops.ReduceSum()(valid)",
            "self.reduce_sum": "self.reduce_sum(valid)", "ops.mean": "ops.mean(valid)",
            "self.reduce_mean": "self.reduce_mean(valid)", "mint.sum": "mint.sum(valid)",
            "ops.count_nonzero": "ops.count_nonzero(valid)"}[name]
    return body


@pytest.mark.parametrize("spelling", ["method", "ops.sum", "ops.ReduceSum()", "self.reduce_sum", "ops.mean",
                                      "self.reduce_mean", "mint.sum", "ops.count_nonzero"])
def test_every_spelling_of_a_whole_batch_mask_count_is_info(spelling, tmp_path):
    source = f'''
import mindspore as ms
from mindspore import mint, nn, ops


class MaskedPool(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.reduce_sum = ops.ReduceSum()
        self.reduce_mean = ops.ReduceMean()

    def construct(self, ids):
        valid = (ids != 0).astype(ms.float32)
        total = (self.embed(ids) * valid.expand_dims(-1)).sum()
        return total / {_spelled(spelling)}
'''
    path = tmp_path / "pool.py"
    path.write_text(source)
    assert _severities(lint_source(path), "MSD106") == ["info"]
    spec = importlib.util.spec_from_file_location(f"pool_{abs(hash(spelling))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert _severities(lint(module.MaskedPool()), "MSD106") == ["info"]


class PerRowPool(nn.Cell):
    """Mean pooling per document: an all-padding document gives 0/0 = NaN."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)

    def construct(self, ids):
        mask = ops.cast(ids != 0, ms.float32).expand_dims(-1)
        count = mask.sum(axis=1)
        return (self.embed(ids) * mask).sum(axis=1) / count


class ObservedTargetsMSE(nn.Cell):
    """Mean over the observed targets: a batch with none observed gives 0/0."""

    def construct(self, prediction, target):
        mask = ops.cast(target != 0, prediction.dtype)
        return ops.div(((prediction - target) ** 2 * mask).sum(), mask.sum())


class IgnoredLabelsLoss(nn.Cell):
    """Cross-entropy over labelled samples only (-1: unlabelled), labels named in a network-side cell."""

    def __init__(self):
        super().__init__()
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")

    def construct(self, logits, label):
        keep = (label >= 0).astype(ms.float32)
        return (self.ce(logits, ops.maximum(label, 0)) * keep).sum() / keep.sum()


def test_a_count_per_row_stays_a_warning_naming_the_axis():
    [finding] = _only(lint(PerRowPool()), "MSD106")
    assert finding.severity.value == "warning" and finding.evidence["per_row_axis"] == "1"
    assert "per row (axis 1)" in finding.message and "ops.maximum(count, 1)" in finding.suggestion


@pytest.mark.parametrize("loss, label", [(ObservedTargetsMSE(), "target"), (IgnoredLabelsLoss(), "label")])
def test_a_mask_of_the_labels_stays_a_warning(loss, label):
    net = nn.Dense(4, 4)
    [finding] = _only(lint(net, loss_fn=loss), "MSD106")
    assert finding.severity.value == "warning" and finding.evidence["label_argument"] == label
    assert f"computed from the labels `{label}`" in finding.message


class NotAMask(nn.Cell):
    def construct(self, x):
        weights = ops.relu(x)
        return x / weights.sum()


def test_a_sum_of_what_is_not_a_mask_stays_a_plain_warning():
    [finding] = _only(lint(NotAMask()), "MSD106")
    assert finding.severity.value == "warning" and "masked_mean" not in finding.evidence


# --- MSD107: the activation behind a constructor flag ------------------------------------------


class FlaggedHead(nn.Cell):
    """A classifier that applies its LogSoftmax (or Softmax) only when a constructor flag asks for it."""

    def __init__(self, use_activation=False, activation=None, api=nn):
        super().__init__()
        dense = api.nn.Linear if api is mint else nn.Dense
        self.fc = dense(8, 3)
        self.use_log_softmax = use_activation
        self.log_softmax = activation if activation is not None else nn.LogSoftmax(axis=-1)

    def construct(self, x):
        x = self.fc(x)
        if self.use_log_softmax:
            x = self.log_softmax(x)
        return x


class FlaggedByExpression(nn.Cell):
    def __init__(self, probabilities=False):
        super().__init__()
        self.fc = nn.Dense(8, 3)
        self.softmax = nn.Softmax()
        self.probabilities = probabilities

    def construct(self, x):
        logits = self.fc(x)
        return self.softmax(logits) if self.probabilities else logits


class FlaggedByReturn(nn.Cell):
    def __init__(self, export=False):
        super().__init__()
        self.fc = nn.Dense(8, 3)
        self.log_softmax = nn.LogSoftmax()
        self.export = export

    def construct(self, x):
        x = self.fc(x)
        if not self.export:
            return x
        return self.log_softmax(x)


@pytest.mark.parametrize("api", [nn, mint])
def test_log_softmax_switched_off_into_nll_loss_fires_and_names_the_flag(api):
    activation = mint.nn.LogSoftmax(dim=-1) if api is mint else None
    loss = mint.nn.NLLLoss() if api is mint else nn.NLLLoss()
    [finding] = _only(lint(FlaggedHead(False, activation, api), loss_fn=loss), "MSD107")
    assert finding.evidence["output_activation"] == "logits"
    assert finding.evidence["switched_off"] == [{"cell": "log_softmax", "type": "LogSoftmax",
                                                 "condition": "self.use_log_softmax"}]
    assert "applied only when `self.use_log_softmax`" in finding.message
    assert finding.suggestion.startswith("Set `self.use_log_softmax`")


@pytest.mark.parametrize("api", [nn, mint])
def test_log_softmax_switched_on_into_nll_loss_is_quiet(api):
    activation = mint.nn.LogSoftmax(dim=-1) if api is mint else None
    loss = mint.nn.NLLLoss() if api is mint else nn.NLLLoss()
    assert not _only(lint(FlaggedHead(True, activation, api), loss_fn=loss), "MSD107")


def test_softmax_behind_a_flag_into_cross_entropy_fires_only_when_on():
    [finding] = _only(lint(FlaggedHead(True, nn.Softmax()), loss_fn=nn.CrossEntropyLoss()), "MSD107")
    assert finding.evidence["output_activation"] == "softmax"
    assert not _only(lint(FlaggedHead(False, nn.Softmax()), loss_fn=nn.CrossEntropyLoss()), "MSD107")
    [expression] = _only(lint(FlaggedByExpression(True), loss_fn=nn.CrossEntropyLoss()), "MSD107")
    assert expression.evidence["output_activation"] == "softmax"
    assert not _only(lint(FlaggedByExpression(False), loss_fn=nn.CrossEntropyLoss()), "MSD107")


def test_an_early_return_on_the_flag_is_folded_like_the_compiler_does():
    assert _only(lint(FlaggedByReturn(export=False), loss_fn=nn.NLLLoss()), "MSD107")
    assert not _only(lint(FlaggedByReturn(export=True), loss_fn=nn.NLLLoss()), "MSD107")


def test_inside_a_with_loss_cell_the_flag_is_read_from_the_built_network():
    net = nn.WithLossCell(FlaggedHead(False), nn.NLLLoss())
    [finding] = _only(lint(net), "MSD107")
    assert finding.evidence["switched_off"][0]["cell"] == "_backbone.log_softmax"
    assert not _only(lint(nn.WithLossCell(FlaggedHead(True), nn.NLLLoss())), "MSD107")


# --- MSD105: eval mode matters only where a cell depends on it -----------------------------------


class Tagger(nn.Cell):
    """A BiLSTM tagger's emission network (the BiLSTM-CRF tutorial's): nothing in it depends on the mode."""

    def __init__(self, recurrent_dropout=0.0, layers=1, dropout=None):
        super().__init__()
        self.embedding = nn.Embedding(16, 8)
        self.lstm = nn.LSTM(8, 8, num_layers=layers, batch_first=True, bidirectional=True, dropout=recurrent_dropout)
        self.dropout = dropout or nn.Identity()
        self.hidden2tag = nn.Dense(16, 5)

    def construct(self, ids):
        out, _ = self.lstm(self.embedding(ids))
        return self.hidden2tag(self.dropout(out))


class NoisyTraining(nn.Cell):
    """A user cell that adds noise only in training."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 4)

    def construct(self, x):
        if self.training:
            x = x + ops.randn_like(x) * 0.1
        return self.fc(x)


@pytest.mark.parametrize("net", [Tagger(), Tagger(recurrent_dropout=0.3), Tagger(dropout=nn.Dropout(p=0.0)),
                                 nn.SequentialCell(nn.Dense(4, 4), nn.BatchNorm1d(4, use_batch_statistics=True)),
                                 nn.SequentialCell(nn.Dense(4, 4), mint.nn.BatchNorm1d(4, track_running_stats=False))],
                         ids=["bilstm", "one-layer-lstm-dropout", "dropout-p0", "bn-batch-stats", "mint-bn-untracked"])
def test_cells_that_compute_the_same_in_both_modes_are_not_mode_dependent(net):
    from mindspore_doctor.static.layers import mode_dependent_cells

    assert mode_dependent_cells(net) == {}


@pytest.mark.parametrize("net, path, words", [
    (Tagger(recurrent_dropout=0.3, layers=2), "lstm", "LSTM dropout=0.3 between its 2 layers"),
    (Tagger(dropout=nn.Dropout(p=0.2)), "dropout", "Dropout p=0.2"),
    (Tagger(dropout=mint.nn.Dropout(0.2)), "dropout", "Dropout p=0.2"),
    (nn.SequentialCell(nn.Dense(4, 4), nn.BatchNorm1d(4)), "1", "BatchNorm1d"),
    (nn.SequentialCell(nn.Dense(4, 4), mint.nn.BatchNorm1d(4)), "1", "BatchNorm1d"),
    (nn.SequentialCell(NoisyTraining()), "0", "reads self.training"),
])
def test_mode_dependent_cells_are_found_and_described(net, path, words):
    from mindspore_doctor.static.layers import mode_dependent_cells

    found = mode_dependent_cells(net)
    assert list(found) == [path] and words in found[path]


def test_train_mode_off_names_only_the_mode_dependent_cells():
    from mindspore_doctor.rules.training import train_mode_off

    effects = {"head.drop": "Dropout p=0.5: drops nothing in eval mode"}
    assert train_mode_off(["<network>", "lstm", "crf"], step=1, mode_effects=effects) == []
    [finding] = train_mode_off(["<network>", "head", "head.drop"], step=1, mode_effects=effects)
    assert finding.location == {"cell": "head.drop"} and "Dropout p=0.5: drops nothing" in finding.message
    assert finding.evidence["cells"] == ["head.drop"] and "BatchNorm" not in finding.message


def _loop_without_set_train(net):
    """A hand-written loop that never calls set_train(): the network stays in eval mode."""
    from mindspore_doctor import Doctor

    rng = np.random.default_rng(0)
    ids = ms.Tensor(rng.integers(1, 16, (8, 6)).astype(np.int32))
    tags = ms.Tensor(rng.integers(0, 5, (8 * 6,)).astype(np.int32))
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Adam(net.trainable_params(), learning_rate=1e-3)

    def forward(x, y):
        return loss_fn(net(x).reshape(-1, 5), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    doctor = Doctor(select=["MSD105"])
    with doctor.watch(net, optimizer, loss_fn=loss_fn) as run:
        for _ in range(2):
            loss, grads = grad_fn(ids, tags)
            optimizer(grads)
            run.step(loss)
    return doctor.report.by_code("MSD105")


def test_a_tagger_without_set_train_is_not_told_about_batchnorm_it_does_not_have():
    net = Tagger()
    net.set_train(False)
    assert _loop_without_set_train(net) == []


def test_a_dropout_left_in_eval_mode_is_named():
    net = Tagger(dropout=nn.Dropout(p=0.3))
    net.set_train(False)
    [finding] = _loop_without_set_train(net)
    assert finding.location == {"cell": "dropout"} and "Dropout p=0.3: drops nothing in eval mode" in finding.message


def test_a_dropout1d_rate_is_read_from_its_prob():
    """``nn.Dropout1d`` keeps its rate as ``prob``: read as 0.5 (the ``keep_prob`` default) it hid p=0.9 from MSD104."""
    [finding] = _only(lint(nn.SequentialCell(nn.Dense(4, 4), nn.Dropout1d(0.9))), "MSD104")
    assert finding.evidence["drop_rate"] == 0.9 and not finding.evidence["via_keep_prob"]
