"""Issue 24, items 7 and 10: shared weights as real code writes them (MSD101) and embedding init scale (MSD109).

MSD101 warns when separate layers of one kind and settings hold one Parameter and run in the same forward pass
(``self.block3.weight = self.block2.weight`` where a copy was meant); recognisable tying stays info: an
embedding table reused by another layer, layers of different kinds or settings reusing one matrix (transposed
reuse, one kernel at several dilations), the encoder/decoder mirror, one cell called at several sites.
MSD109 judges embedding tables (nn.Embedding, mint.nn.Embedding, raw tables read through a gather, a lookup or
an index) against the largest usual embedding init, std 1: it warns above ``init_std_factor`` times that, on
tables shaped like a fresh draw and trainable.
"""
from __future__ import annotations

import importlib

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, mint, nn, ops
from mindspore.common.initializer import Normal, TruncatedNormal, Uniform, initializer

from mindspore_doctor import lint
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import parameters as rules
from mindspore_doctor.static import signals
from mindspore_doctor.static.signals import ParamSignal
from test_static_parameters import TiedLM


def only(report, code):
    return [f for f in report.findings if f.code == code]


def alarms(net, code):
    return [f for f in only(lint(net, select=[code]), code) if f.severity.value != "info"]


# --- MSD101: a Parameter assigned where a copy was meant -------------------------------------------------


class DeepenedMLP(nn.Cell):
    """A layer added and "started like the one before it" by assigning the Parameter."""

    def __init__(self, copy_values: bool = False):
        super().__init__()
        self.block1 = nn.Dense(16, 32)
        self.block2 = nn.Dense(32, 32)
        self.block3 = nn.Dense(32, 32)
        if copy_values:
            self.block3.weight.set_data(Tensor(self.block2.weight.asnumpy()))
        else:
            self.block3.weight = self.block2.weight
        self.head = nn.Dense(32, 4)

    def construct(self, x):
        x = ops.relu(self.block2(ops.relu(self.block1(x))))
        return self.head(ops.relu(self.block3(x)))


class LayerAddedNotCalled(nn.Cell):
    """The copy target is built but construct never reaches it (MSD110's finding, not sharing)."""

    def __init__(self):
        super().__init__()
        self.block1 = nn.Dense(16, 32)
        self.block2 = nn.Dense(32, 32)
        self.block3 = nn.Dense(32, 32)
        self.block3.weight = self.block2.weight
        self.head = nn.Dense(32, 4)

    def construct(self, x):
        return self.head(ops.relu(self.block2(ops.relu(self.block1(x)))))


class MintLayersLikeFirst(nn.Cell):
    def __init__(self):
        super().__init__()
        self.layers = nn.CellList([mint.nn.Linear(8, 8) for _ in range(3)])
        for layer in self.layers[1:]:
            layer.weight = self.layers[0].weight

    def construct(self, x):
        for layer in self.layers:
            x = mint.nn.functional.relu(layer(x))
        return x


def test_separate_same_kind_layers_holding_one_weight_warn_naming_both_cells_and_the_shape():
    (found,) = alarms(DeepenedMLP(), "MSD101")
    assert found.severity.value == "warning" and found.evidence["sharing"] == "copied"
    assert found.evidence["cells"] == ["block2", "block3"] and found.evidence["shape"] == [32, 32]
    assert found.location["parameter"] == "block2.weight"
    for part in ("`block2` and `block3`", "Dense", "`block2.weight` (32x32)", "Copy meant, assign written?",
                 "self.block3.weight = self.block2.weight"):
        assert part in found.message, part
    assert "set_data" in found.suggestion


def test_mint_layers_sharing_the_first_ones_weight_in_a_loop_warn():
    (found,) = alarms(MintLayersLikeFirst(), "MSD101")
    assert found.evidence["cells"] == ["layers.0", "layers.1", "layers.2"] and found.evidence["uses"] == 3
    assert "all 3 run" in found.message and "self.layers[1].weight = self.layers[0].weight" in found.message


def test_copied_values_an_uncalled_copy_and_a_declared_share_are_quiet():
    assert not only(lint(DeepenedMLP(copy_values=True), select=["MSD101"]), "MSD101")
    assert not only(lint(LayerAddedNotCalled(), select=["MSD101"]), "MSD101")  # runs once: no sharing
    assert not lint(DeepenedMLP(), select=["MSD101"], allow_shared=["block2.weight"]).findings


class Mirror(nn.Cell):
    """A tied autoencoder of square layers: the decoder reuses the encoder's matrices in mirror order."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.SequentialCell(nn.Dense(32, 32), nn.ReLU(), nn.Dense(32, 32))
        self.decoder = nn.SequentialCell(nn.Dense(32, 32), nn.ReLU(), nn.Dense(32, 32))
        self.decoder[0].weight = self.encoder[2].weight
        self.decoder[2].weight = self.encoder[0].weight

    def construct(self, x):
        return self.decoder(self.encoder(x))


class TransposedDecoder(nn.Cell):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def construct(self, h):
        return ops.matmul(h, self.weight)


class TransposedTying(nn.Cell):
    def __init__(self):
        super().__init__()
        self.project = nn.Dense(64, 16)
        self.expand = TransposedDecoder(self.project.weight)

    def construct(self, x):
        return self.expand(ops.relu(self.project(x)))


class MultiDilation(nn.Cell):
    """TridentNet's pattern: one kernel applied at several dilations."""

    def __init__(self):
        super().__init__()
        self.branches = nn.CellList([nn.Conv2d(4, 4, 3, dilation=d, pad_mode="same") for d in (1, 2, 3)])
        for branch in self.branches[1:]:
            branch.weight = self.branches[0].weight

    def construct(self, x):
        return self.branches[0](x) + self.branches[1](x) + self.branches[2](x)


class SharedVocabulary(nn.Cell):
    """Source and target embeddings sharing one table (translation models with a joint vocabulary)."""

    def __init__(self):
        super().__init__()
        self.src_embed = nn.Embedding(50, 16)
        self.tgt_embed = nn.Embedding(50, 16)
        self.tgt_embed.embedding_table = self.src_embed.embedding_table
        self.fc = nn.Dense(32, 4)

    def construct(self, src, tgt):
        return self.fc(ops.concat((self.src_embed(src).mean(1), self.tgt_embed(tgt).mean(1)), -1))


class Siamese(nn.Cell):
    """One branch cell called on both inputs."""

    def __init__(self):
        super().__init__()
        self.branch = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU())
        self.head = nn.Dense(32, 2)

    def construct(self, a, b):
        return self.head(ops.concat((self.branch(a), self.branch(b)), -1))


@pytest.mark.parametrize("net, kind", [
    (TiedLM, "tied"), (SharedVocabulary, "tied"), (Mirror, "tied"), (TransposedTying, "tied"),
    (MultiDilation, "tied"), (Siamese, "reused"),
], ids=lambda v: getattr(v, "__name__", v))
def test_recognisable_tying_is_info(net, kind):
    found = only(lint(net(), select=["MSD101"]), "MSD101")
    assert found and all(f.severity.value == "info" and f.evidence["sharing"] == kind for f in found), found


def test_the_corpus_language_model_with_a_tied_output_projection_has_no_sharing_alarm():
    program = importlib.import_module("benchmarks.realworld.programs.nn_transformer_lm_tokens")
    setup = program.recipe()
    report = lint(setup.network, loss_fn=setup.loss_fn, optimizer=setup.optimizer, select=["MSD101", "MSD109"])
    assert not report.at_least("warning"), report


def signal(**kw) -> ParamSignal:
    defaults = dict(name="a.weight", cell="a", cell_type="Dense", role=signals.WEIGHT, shape=(8, 8), key="weight",
                    paths=("a", "b"), uses=2, owner_types=("Dense", "Dense"), owner_cells=("a", "b"),
                    owners_running=2, owners_alike=True)
    return ParamSignal(**{**defaults, **kw})


@pytest.mark.parametrize("change, kind", [
    ({}, "copied"),
    ({"owners_alike": False}, "tied"),
    ({"owner_types": ("Embedding", "Dense")}, "tied"),
    ({"owner_cells": ("encoder.fc", "decoder.fc"), "paths": ("encoder.fc", "decoder.fc")}, "tied"),
    ({"owners_running": 1, "repeated": False}, "design"),
    ({"uses": 1}, None),
])
def test_rule_sharing_kinds_from_plain_signals(change, kind):
    found = rules.shared_parameter([signal(**change)], DoctorConfig())
    assert [f.evidence["sharing"] for f in found] == ([kind] if kind else [])


# --- MSD109: embedding tables --------------------------------------------------------------------------


class TokenModel(nn.Cell):
    def __init__(self, table_init, frozen: bool = False):
        super().__init__()
        self.embed = nn.Embedding(64, 16, embedding_table=table_init)
        self.embed.embedding_table.requires_grad = not frozen
        self.fc = nn.Dense(16, 4)

    def construct(self, ids):
        return self.fc(self.embed(ids).mean(1))


class MintTokenModel(nn.Cell):
    def __init__(self, std: float | None):
        super().__init__()
        self.embed = mint.nn.Embedding(64, 16)
        if std is not None:
            self.embed.weight.set_data(initializer(Normal(std), (64, 16)))
        self.fc = mint.nn.Linear(16, 4)

    def construct(self, ids):
        return self.fc(self.embed(ids).mean(1))


LOOKUPS = ("gather", "primitive", "index", "embedding")


class RawTable(nn.Cell):
    """A table kept as a raw Parameter, read the ways real code reads one."""

    def __init__(self, table, lookup: str):
        super().__init__()
        self.table = Parameter(table, name="token_table")
        self.gather = ops.Gather()
        self.lookup = lookup
        self.fc = nn.Dense(16, 4)

    def construct(self, ids):
        if self.lookup == "gather":
            rows = ops.gather(self.table, ids, 0)
        elif self.lookup == "primitive":
            rows = self.gather(self.table, ids, 0)
        elif self.lookup == "index":
            rows = self.table[ids]
        else:
            rows = ops.embedding(ids, self.table)
        return self.fc(rows.mean(1))


@pytest.mark.parametrize("net", [
    lambda: TokenModel(Normal(100.0)), lambda: TokenModel(Uniform(50.0)), lambda: MintTokenModel(100.0),
    *(lambda lookup=lookup: RawTable(initializer(Normal(100.0), (64, 16)), lookup) for lookup in LOOKUPS),
], ids=["nn-normal-100", "nn-uniform-50", "mint-normal-100", *(f"raw-{lookup}" for lookup in LOOKUPS)])
def test_embedding_table_far_above_the_usual_init_warns(net):
    (found,) = alarms(net(), "MSD109")
    assert found.evidence["ratio"] > 10 and found.evidence["dim"] == 16 and found.evidence["rows"] == 64
    assert "Embedding table" in found.message and "64 rows x 16" in found.message and "std" in found.message


def _loaded_vectors() -> Tensor:
    """Pretrained-looking rows: heavy-tailed and off-centre, at a large scale (unnormalised count vectors)."""
    rng = np.random.default_rng(0)
    return Tensor((rng.standard_t(3, (64, 16)) * 12 + 3).astype(np.float32))


@pytest.mark.parametrize("net", [
    lambda: TokenModel("normal"), lambda: TokenModel(Normal(1.0)), lambda: TokenModel(Normal(0.25)),
    lambda: TokenModel(Normal(5.0)), lambda: TokenModel(TruncatedNormal(0.02)), lambda: TokenModel(Uniform(0.1)),
    lambda: TokenModel(Normal(1e-4)), lambda: TokenModel(Normal(100.0), frozen=True),
    lambda: TokenModel(_loaded_vectors()), lambda: MintTokenModel(None),
    lambda: RawTable(initializer(Normal(0.1), (64, 16)), "gather"),
], ids=["nn-default", "normal-1", "normal-1/sqrt(d)", "normal-5", "bert-truncated", "uniform-0.1", "tiny",
        "frozen-100", "loaded", "mint-default", "raw-0.1"])
def test_usual_tiny_frozen_and_loaded_embedding_tables_are_quiet(net):
    assert not only(lint(net(), select=["MSD109"]), "MSD109")


def test_constant_embedding_tables_are_msd108():
    for net in (TokenModel("zeros"), RawTable(initializer("ones", (64, 16)), "index")):
        (found,) = only(lint(net, select=["MSD108", "MSD109"]), "MSD108")
        assert found.evidence["shape"] == [64, 16]


def test_rule_embedding_threshold_follows_init_std_factor():
    table = ParamSignal(name="e", cell="e", cell_type="Embedding", role=signals.EMBEDDING, shape=(100, 8), std=12.0,
                        fresh_draw=True)
    assert rules.poor_initialization([table], DoctorConfig())
    assert not rules.poor_initialization([table], DoctorConfig(init_std_factor=20.0))
    assert not rules.poor_initialization([ParamSignal(**{**table.__dict__, "fresh_draw": False})], DoctorConfig())
    assert not rules.poor_initialization([ParamSignal(**{**table.__dict__, "std": 9.0})], DoctorConfig())


class RelativeBias(nn.Cell):
    """A relative-position bias table picked by a fixed index the cell holds: zeros at init are normal for it."""

    def __init__(self):
        super().__init__()
        self.bias_table = Parameter(initializer("zeros", (49, 4)), name="bias_table")
        self.index = Tensor(np.arange(16, dtype=np.int32) % 49)
        self.fc = nn.Dense(4, 4)

    def construct(self, x):
        return self.fc(x) + self.bias_table[self.index]


def test_a_bias_table_picked_by_a_held_index_is_not_an_embedding():
    assert not only(lint(RelativeBias(), select=["MSD108", "MSD109"]), "MSD108")


class PenaltyLoss(nn.Cell):
    """The GCN model zoo's pattern: the loss keeps the first layer's weight for an L2 penalty."""

    def __init__(self, weight):
        super().__init__()
        self.param = weight
        self.l2 = ops.L2Loss()
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, logits, label):
        return self.ce(logits, label) + 5e-4 * self.l2(self.param)


class ModelWithPenalty(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(8, 8)
        self.head = nn.Dense(8, 3)
        self.loss = PenaltyLoss(self.fc.weight)

    def construct(self, x, label):
        return self.loss(self.head(ops.relu(self.fc(x))), label)


def test_a_loss_reading_a_weight_for_a_penalty_is_not_sharing():
    assert not only(lint(ModelWithPenalty(), select=["MSD101"]), "MSD101")


class HandWrittenTrainStep(nn.Cell):
    """The model zoo's own train cell: the loss network, its optimizer, a grad call."""

    def __init__(self, loss_net, optimizer):
        super().__init__(auto_prefix=False)
        self.network = loss_net
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True)

    def construct(self, x, label):
        loss = self.network(x, label)
        return ops.depend(loss, self.optimizer(self.grad(self.network, self.weights)(x, label)))


class TrainAndMeasure(nn.Cell):
    """The GCN model zoo's TrainNetWrapper: one step through the train cell, then the model again for accuracy."""

    def __init__(self):
        super().__init__(auto_prefix=False)
        self.network = nn.SequentialCell(nn.Dense(8, 8), nn.ReLU(), nn.Dense(8, 3))
        loss_net = nn.WithLossCell(self.network, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
        self.train_step = HandWrittenTrainStep(loss_net, nn.Adam(loss_net.trainable_params(), 1e-3))

    def construct(self, x, label):
        loss = self.train_step(x, label)
        return loss, self.network(x).argmax(-1)


def test_a_model_reached_through_a_hand_written_train_cell_and_directly_is_not_sharing():
    assert not only(lint(TrainAndMeasure(), select=["MSD101", "MSD102", "MSD103"]), "MSD101")
