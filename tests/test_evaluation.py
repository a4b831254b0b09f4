"""MSD401-MSD405: pure rules on numbers, and the evaluation probe on real (tiny) trainings."""
from __future__ import annotations

from unittest.mock import patch

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model

from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.forward import ModeSnapshot, eager
from mindspore_doctor.probes.evaluation import Evaluator, Probe, read_batches
from mindspore_doctor.rules.evaluation import (
    evaluation_findings,
    mode_switch_inconsistency,
    overfitting,
    underfitting,
    worse_than_baseline,
)
from mindspore_doctor.signals import EvalRecord, Metric

CFG = DoctorConfig()


def _records(train, evaluated):
    return [EvalRecord(epoch=i + 1, train_loss=t, eval_loss=e) for i, (t, e) in enumerate(zip(train, evaluated))]


# --- pure rules ---------------------------------------------------------------------------------


def test_overfitting_fires_when_eval_rises_while_train_falls():
    found = overfitting(_records([1.0, 0.6, 0.4, 0.3, 0.2], [1.0, 0.7, 0.75, 0.8, 0.9]), CFG)
    assert [f.code for f in found] == ["MSD401"]
    assert found[0].evidence["best_epoch"] == 2 and found[0].evidence["kind"] == "rising"


def test_eval_loss_wandering_a_few_percent_after_converging_is_not_overfitting():
    """A healthy dropout MLP of the fault benchmark: eval loss 0.2624, 0.265, 0.2694 while train loss fell."""
    assert overfitting(_records([0.1894, 0.175, 0.1672], [0.2624, 0.265, 0.2694]), CFG) == []
    found = overfitting(_records([0.1894, 0.175, 0.1672], [0.2624, 0.28, 0.2924]), CFG)  # 11 % above its best
    assert [f.evidence["kind"] for f in found] == ["rising"] and "11% above it" in found[0].message


def test_growing_gap_while_eval_still_improves_is_not_overfitting():
    assert overfitting(_records([1.0, 0.5, 0.2, 0.08, 0.03], [1.0, 0.8, 0.7, 0.65, 0.62]), CFG) == []


def test_one_rise_is_not_enough_but_a_large_gap_after_stalling_is():
    assert overfitting(_records([1.0, 0.6, 0.5, 0.45], [1.0, 0.7, 0.72, 0.71]), CFG) == []
    found = overfitting(_records([1.0, 0.3, 0.2, 0.1], [1.0, 0.7, 0.72, 0.71]), CFG)
    assert [f.evidence["kind"] for f in found] == ["gap"]


def test_underfitting_and_worse_than_baseline_thresholds():
    base = Metric("accuracy", 0.5, True)
    assert [f.code for f in underfitting(Metric("accuracy", 0.55, True), base, CFG)] == ["MSD402"]
    assert underfitting(Metric("accuracy", 0.8, True), base, CFG) == []
    assert [f.code for f in worse_than_baseline(Metric("accuracy", 0.5, True), base, CFG)] == ["MSD404"]
    assert worse_than_baseline(Metric("accuracy", 0.7, True), base, CFG, samples=200) == []
    # 0.56 on 64 samples is within two standard errors of 0.5: not evidence of beating the baseline
    assert worse_than_baseline(Metric("accuracy", 0.56, True), base, CFG, samples=64) != []
    mse_base = Metric("mse", 1.0, False)
    assert worse_than_baseline(Metric("mse", 0.5, False), mse_base, CFG) == []
    assert worse_than_baseline(Metric("mse", 1.2, False), mse_base, CFG) != []


def test_mode_switch_threshold():
    assert mode_switch_inconsistency(1.5, ["bn"], CFG) == []
    found = mode_switch_inconsistency(5.0, ["bn"], CFG)
    assert found[0].code == "MSD405" and found[0].location == {"cell": "bn"}


# --- real training ------------------------------------------------------------------------------


def _data(n, seed=0, noise=0.0, scale=1.0, shift=0.0, features=8, batch=16):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    flip = rng.random(n) < noise
    y[flip] = 1 - y[flip]
    return ds.NumpySlicesDataset({"x": x * scale + shift, "label": y}, shuffle=False).batch(batch)


class Net(nn.Cell):
    def __init__(self, hidden=32, dropout=0.0, bn_momentum=None):
        super().__init__()
        self.fc1 = nn.Dense(8, hidden)
        self.bn = nn.BatchNorm1d(hidden, momentum=bn_momentum) if bn_momentum is not None else nn.Identity()
        self.relu = nn.ReLU()
        self.drop = nn.Dropout(p=dropout) if dropout else nn.Identity()
        self.fc2 = nn.Dense(hidden, 2)

    def construct(self, x):
        return self.fc2(self.drop(self.relu(self.bn(self.fc1(x)))))


def _train_with_eval(net, train, evaluate, epochs, lr=0.05, evaluator=None):
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), lr, 0.9))
    evaluator = evaluator or Evaluator(evaluate, DoctorConfig(eval_max_batches=8))
    for epoch in range(1, epochs + 1):
        model.train(1, train, dataset_sink_mode=False)
        if evaluate is not None:
            evaluator.run(net, loss, epoch, train_dataset=train)
    if evaluator.records:
        evaluator.final_mode_switch()  # as the Doctor does when the run finishes
    return evaluator


def _codes(evaluator):
    return {f.code for f in evaluation_findings(evaluator.records, evaluator.config, evaluator.mode_change,
                                                evaluator.metric_skipped)}


def test_msd401_on_a_memorising_model_and_not_on_its_healthy_twin():
    memorise = _train_with_eval(Net(hidden=256), _data(32, noise=0.4), _data(128, seed=1), epochs=25, lr=0.1)
    assert "MSD401" in _codes(memorise)
    healthy = _train_with_eval(Net(), _data(512), _data(128, seed=1), epochs=4)
    assert "MSD401" not in _codes(healthy)


def test_msd402_and_msd404_on_shuffled_labels_and_not_on_a_healthy_model():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    random_labels = ds.NumpySlicesDataset({"x": x, "label": rng.integers(0, 2, 256).astype(np.int32)},
                                          shuffle=False).batch(16)
    broken = _train_with_eval(Net(hidden=4), random_labels, _data(256, seed=1), epochs=2, lr=0.01)
    assert {"MSD402", "MSD404"} <= _codes(broken)
    healthy = _train_with_eval(Net(), _data(256), _data(256, seed=1), epochs=3)
    assert not {"MSD402", "MSD404"} & _codes(healthy)


def test_msd405_on_stale_batchnorm_statistics_and_not_on_a_healthy_batchnorm():
    stale = _train_with_eval(Net(bn_momentum=0.9999), _data(64, scale=10.0, shift=5.0),
                             _data(64, seed=1, scale=10.0, shift=5.0), epochs=1, lr=0.001)
    assert "MSD405" in _codes(stale)
    healthy = _train_with_eval(Net(bn_momentum=0.5), _data(256), _data(64, seed=1), epochs=2)
    assert "MSD405" not in _codes(healthy)


class _FirstModeSwitch(Callback):
    """Records the Doctor's reported mode switch after the first epoch's evaluation (it runs after the Doctor)."""

    def __init__(self, doctor):
        super().__init__()
        self.doctor, self.change = doctor, None

    def on_train_epoch_end(self, run_context):
        if self.change is None:
            self.change = self.doctor.report.meta["evaluation"]["mode_switch"]["relative_change"]


def test_msd405_is_judged_on_the_trained_network_not_on_the_first_evaluation():
    """The mode switch's train-mode pass is eager (0.3-0.4 s on a ShuffleNetV2): it is measured at the first
    evaluation and again when the run finishes, which MSD405 judges; BatchNorm statistics still stale after epoch 1
    have caught up by then."""
    from mindspore_doctor import Doctor

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(0)
    net = Net(bn_momentum=0.99)
    doctor = Doctor(eval_dataset=_data(64, seed=1, scale=10.0, shift=20.0), label_sample_size=0)
    first = _FirstModeSwitch(doctor)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.001, 0.9))
    model.train(30, _data(256, scale=10.0, shift=20.0), callbacks=[doctor, first], dataset_sink_mode=False)
    final = doctor.report.meta["evaluation"]["mode_switch"]["relative_change"]
    assert first.change > doctor.config.mode_switch_max_change > final, (first.change, final)
    assert "MSD405" not in {f.code for f in doctor.report.findings}


def _weights(net):
    return {p.name: p.asnumpy().copy() for p in net.get_parameters()}


def test_evaluation_does_no_harm_final_weights_bitwise_identical():
    """BatchNorm (its moving statistics are touched by the mode-switch probe): evaluating changes nothing.

    No Dropout here: MindSpore's Dropout is not reproducible across two runs in one process even without
    any evaluation; in a fresh process an eval graph was verified not to shift the training graph's stream.
    """
    def run(with_eval):
        ms.set_seed(0)
        net = Net(bn_momentum=0.9)
        _train_with_eval(net, _data(96), _data(48, seed=1) if with_eval else None, epochs=3)
        return net, _weights(net)

    _, plain = run(False)
    net, evaluated = run(True)
    assert plain.keys() == evaluated.keys()
    assert all(np.array_equal(plain[k], evaluated[k]) for k in plain)
    assert all(cell.training for _, cell in net.cells_and_names())  # Model left it training; we restored that


def test_probe_restores_each_cells_mode_exactly(exec_mode):
    net = Net(dropout=0.3, bn_momentum=0.9)
    net.set_train(True)
    net.drop.set_train(False)  # a deliberately mixed state must come back as it was
    before = [(path, c.training, c.phase) for path, c in net.cells_and_names()]
    moving = [p.asnumpy().copy() for p in net.untrainable_params()]
    probe = Probe(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    batches = read_batches(_data(32), 2)
    probe.measure(batches)
    probe.mode_switch(batches[0])
    assert [(path, c.training, c.phase) for path, c in net.cells_and_names()] == before
    assert all(np.array_equal(a, p.asnumpy()) for a, p in zip(moving, net.untrainable_params()))


def test_a_pass_that_raises_leaves_the_graph_mode_and_every_cell_as_they_were():
    """The passes run eagerly (no graph compiled and kept for the run): whatever happens, the caller's GRAPH_MODE
    comes back, and so do the cells' modes."""
    class Failing(Net):
        def construct(self, x):
            raise ValueError("the user's network failed")

    ms.set_context(mode=ms.GRAPH_MODE)
    net = Failing()
    net.set_train(True)
    with pytest.raises(ValueError, match="network failed"):
        Probe(net).measure(read_batches(_data(32), 1))
    assert ms.get_context("mode") == ms.GRAPH_MODE
    assert all(cell.training for _, cell in net.cells_and_names())


class _ScaledLoss(nn.Cell):
    """A loss with a Parameter and a child loss of its own: both must come back as they were."""

    def __init__(self):
        super().__init__()
        self.scale = ms.Parameter(ms.Tensor(np.full(1, 2.0, np.float32)), name="scale")
        self.ce = nn.CrossEntropyLoss(label_smoothing=0.1)

    def construct(self, logits, labels):
        return self.ce(logits, labels) * self.scale


class _HostLoss(_ScaledLoss):
    """A loss that only runs eagerly: a graph takes no ``import`` statement."""

    def construct(self, logits, labels):
        import math  # pylint: disable=import-outside-toplevel - the point of it

        return self.ce(logits, labels) * self.scale * math.sqrt(1.0)


def _cell_attributes(cell):
    return {path: dict(c.__dict__) for path, c in cell.cells_and_names()}


def test_the_evaluation_loss_runs_compiled_and_leaves_the_loss_cell_as_it_was():
    """An eager loss call keeps host memory for good (MindSpore 2.10 CPU): the evaluation's loss is compiled in a
    GRAPH_MODE run, with the same values; the user's loss cell keeps its attributes and parameter names."""
    ms.set_context(mode=ms.GRAPH_MODE)
    net, loss = Net(), _ScaledLoss()
    batches = read_batches(_data(64), 2)
    names, before = [p.name for p in loss.get_parameters()], _cell_attributes(loss)
    compiled = Probe(net, loss, compiled=True)
    measured = [compiled.measure(batches, noise=True) for _ in range(2)]
    eager = Probe(net, loss).measure(batches, noise=True)
    assert type(compiled._loss_call).__name__ == "_CompiledLoss"  # pylint: disable=protected-access
    for m in measured:
        assert m.loss == pytest.approx(eager.loss, rel=1e-6) and m.loss_se == pytest.approx(eager.loss_se, rel=1e-5)
    after = _cell_attributes(loss)
    assert after.keys() == before.keys()
    assert all(after[path].keys() == before[path].keys() for path in before)
    assert all(after[path][k] is before[path][k] for path in before for k in before[path])
    assert [p.name for p in loss.get_parameters()] == names
    compiled.release()
    assert compiled._loss_call is None  # pylint: disable=protected-access


def test_the_evaluation_compiles_one_eval_graph_and_no_second_one_for_a_partial_batch():
    """Eager kernels cost ~2 ms of dispatch each (MindSpore 2.10 CPU): the eval-mode passes of the first batch's
    shapes run compiled, with the eager outputs; a partial last batch does not compile a second graph kept for the
    run; the network's cells keep their attributes."""
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Net()
    batches = read_batches(_data(72, batch=32), 3)
    assert [len(b[-1]) for b in batches] == [32, 32, 8]
    before = _cell_attributes(net)
    probe = Probe(net, compiled=True)
    compiled = [probe.measure(batches) for _ in range(2)]
    eager = Probe(net).measure(batches)
    for m in compiled:
        np.testing.assert_allclose(m.outputs, eager.outputs, rtol=1e-5, atol=1e-6)
    assert len(probe._forward.compile_cache) == 1  # pylint: disable=protected-access
    assert _cell_attributes(net).keys() == before.keys()
    assert ms.get_context("mode") == ms.GRAPH_MODE
    probe.release()
    assert probe._forward is None  # pylint: disable=protected-access


def test_the_evaluations_compiles_walk_only_new_objects_and_leave_the_collector_as_it_was(monkeypatch):
    """MindSpore's compile starts with a full ``gc.collect()`` (~0.1 s next to a loaded MindSpore): the Doctor's own
    compiles run it with the process's objects frozen (``gc_frozen``), and only those: the later calls compile
    nothing and freeze nothing. A process that froze objects of its own keeps them frozen."""
    import gc

    ms.set_context(mode=ms.GRAPH_MODE)
    frozen_at_collect, collect = [], gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: frozen_at_collect.append(gc.get_freeze_count()) or collect(*a))
    probe = Probe(Net(), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), compiled=True)
    batches = read_batches(_data(72, batch=32), 3)
    probe.measure(batches, noise=True)
    compiles = len(frozen_at_collect)
    assert compiles >= 3 and all(frozen_at_collect)  # the forward pass and the loss's shapes, each frozen
    assert gc.get_freeze_count() == 0
    freeze = []
    monkeypatch.setattr(gc, "freeze", lambda: freeze.append(1))
    probe.measure(batches, noise=True)
    assert len(frozen_at_collect) == compiles and not freeze  # compiled already: nothing frozen again
    monkeypatch.setattr(gc, "get_freeze_count", lambda: 1)  # the user's own frozen objects
    monkeypatch.setattr(gc, "unfreeze", lambda: freeze.append(0))
    Probe(Net(), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), compiled=True).measure(batches)
    assert len(frozen_at_collect) > compiles and not freeze  # compiled, neither frozen nor unfrozen


def test_a_loss_that_does_not_compile_is_called_eagerly(exec_mode):
    loss = _HostLoss()
    batches = read_batches(_data(64), 2)
    probe = Probe(Net(), loss, compiled=True)
    measured = probe.measure(batches, noise=True)
    assert probe._loss_call is loss  # pylint: disable=protected-access
    assert measured.loss == pytest.approx(Probe(probe.network, _ScaledLoss()).measure(batches).loss, rel=1e-6)
    assert ms.get_context("mode") == exec_mode


class _WholeBatchLoss(_ScaledLoss):
    """A loss that needs a whole batch of 32, compiled or eager."""

    def construct(self, logits, labels):
        return self.ce(logits.reshape(32, 2), labels.reshape(32)) * self.scale


def test_a_loss_that_fails_on_part_of_a_batch_stays_compiled():
    """The noise's groups are smaller than a batch: a loss that needs its whole batch fails on them eagerly too, so
    the noise is unknown and the loss stays compiled."""
    ms.set_context(mode=ms.GRAPH_MODE)
    probe = Probe(Net(), _WholeBatchLoss(), compiled=True)
    measured = probe.measure(read_batches(_data(64, batch=32), 2), noise=True)
    assert measured.loss is not None and measured.loss_se is None
    assert type(probe._loss_call).__name__ == "_CompiledLoss"  # pylint: disable=protected-access


def test_mode_snapshot_is_a_context_manager():
    net = Net()
    net.set_train(True)
    with ModeSnapshot(net):
        net.set_train(False)
    assert net.training and net.fc1.training


def test_empty_eval_dataset_is_a_clear_error():
    empty = _data(32).skip(10)
    with pytest.raises(CheckSkipped, match="empty"):
        Evaluator(empty).run(Net(), None, 1)


def test_a_mode_switch_problem_is_not_also_reported_as_underfitting():
    base = Metric("accuracy", 0.5, True)
    record = EvalRecord(epoch=1, train_loss=1.0, eval_loss=1.0, train_metric=Metric("accuracy", 0.52, True),
                        train_baseline=base)
    assert {f.code for f in evaluation_findings([record], CFG)} == {"MSD402"}
    assert {f.code for f in evaluation_findings([record], CFG, (7.0, ["bn"]))} == {"MSD405"}


# --- the task decides the metric (issue 13 point 9) -----------------------------------------------------

_R = np.random.default_rng(0)
_IDS = _R.integers(0, 4, 32)
TASKS = {
    "binary-logit": ((32, 1), _R.integers(0, 2, (32, 1)).astype(np.float32), nn.BCEWithLogitsLoss(), "binary", 0.0),
    "binary-flat-probability": ((32,), _R.integers(0, 2, 32).astype(np.float32), nn.BCELoss(), "binary", 0.5),
    "multiclass": ((32, 4), _IDS.astype(np.int32), nn.CrossEntropyLoss(), "multiclass", -1),
    "multiclass-onehot": ((32, 4), np.eye(4, dtype=np.float32)[_IDS], nn.CrossEntropyLoss(), "multiclass", -1),
    "multilabel": ((32, 4), _R.integers(0, 2, (32, 4)).astype(np.float32), nn.BCEWithLogitsLoss(), "multilabel", 0.0),
    "per-token": ((32, 6, 9), _R.integers(0, 9, (32, 6)).astype(np.int32), None, "multiclass", 2),
    "segmentation": ((32, 3, 5, 5), _R.integers(0, 3, (32, 5, 5)).astype(np.int32), None, "multiclass", 1),
    "autoencoder": ((32, 1, 8, 8), _R.random((32, 1, 8, 8)).astype(np.float32), nn.MSELoss(), "regression", None),
    "flat-autoencoder": ((32, 64), _R.random((32, 64)).astype(np.float32), None, "regression", None),
    "regression": ((32, 1), _R.standard_normal(32).astype(np.float32), nn.MSELoss(), "regression", None),
}


@pytest.mark.parametrize("case", sorted(TASKS))
def test_the_task_is_inferred_from_the_loss_and_the_shapes(case):
    from mindspore_doctor.probes.evaluation import infer_task

    shape, labels, loss, kind, detail = TASKS[case]
    outputs = _R.standard_normal(shape)
    task = infer_task(outputs, labels, loss)
    assert task.kind == kind
    if kind == "multiclass":
        assert task.class_axis % len(shape) == detail % len(shape)
    elif kind in ("binary", "multilabel"):
        assert task.threshold == detail


def test_each_task_scores_a_perfect_model_above_its_baseline():
    from mindspore_doctor.probes.evaluation import infer_task

    for case, (shape, labels, loss, kind, _) in TASKS.items():
        task = infer_task(_R.standard_normal(shape), labels, loss)
        if kind == "multiclass":
            ids = labels.argmax(-1) if labels.shape == shape else labels.reshape(np.delete(shape, task.class_axis))
            perfect = np.moveaxis(np.eye(shape[task.class_axis])[ids], -1, task.class_axis)
        elif kind in ("binary", "multilabel"):
            perfect = labels.reshape(shape) * 10.0 - 5.0 + task.threshold
        else:
            perfect = labels.reshape(shape)
        model, base = task.metric(perfect, labels), task.baseline(shape, labels)
        assert worse_than_baseline(model, base, CFG) == [], case
        assert worse_than_baseline(base, base, CFG) != [], case  # the trivial predictor itself is no better


def test_per_token_accuracy_leaves_out_ignored_positions():
    from mindspore_doctor.probes.evaluation import infer_task

    labels = np.full((4, 5), -100, np.int64)
    labels[:, 0] = 2
    outputs = np.zeros((4, 5, 3))
    outputs[:, :, 2] = 1.0  # right on the one real position, "wrong" on the padding
    task = infer_task(outputs, labels, nn.CrossEntropyLoss(ignore_index=-100))
    assert task.ignore_index == -100 and task.metric(outputs, labels).value == 1.0


def test_shapes_that_fit_no_task_are_skipped_with_the_reason():
    from mindspore_doctor.probes.evaluation import infer_task

    with pytest.raises(CheckSkipped, match=r"shape \(32, 5\) and labels of shape \(32, 3\)"):
        infer_task(np.zeros((32, 5)), np.zeros((32, 3), np.float32))
    with pytest.raises(CheckSkipped, match="do not pair"):
        infer_task(np.zeros((32, 5)), np.zeros((16,), np.int32))


def test_a_partial_batch_runs_compiled_padded_to_the_compiled_batch():
    """The last batch of 8 runs through the graph compiled for 32, its samples repeated (checked against the eager
    pass once): no eager pass at the later evaluations, and the eager outputs."""
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Net()
    batches = read_batches(_data(72, batch=32), 3)
    probe = Probe(net, compiled=True)
    probe.measure(batches)
    assert probe._padded == {(((8, 8), "<f4"),): True}  # pylint: disable=protected-access
    with patch.object(Probe, "_eager_outputs", side_effect=AssertionError("eager")):
        measured = probe.measure(batches)
    np.testing.assert_allclose(measured.outputs, Probe(net).measure(batches).outputs, rtol=1e-5, atol=1e-6)
    assert len(probe._forward.compile_cache) == 1  # pylint: disable=protected-access


class _BatchCentred(nn.Cell):
    """Mixes the samples of a batch in eval mode too: its outputs depend on the other samples."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(8, 2)

    def construct(self, x):
        return self.dense(x - x.sum(axis=0, keepdims=True) / 32)


def test_a_network_that_mixes_the_samples_runs_its_partial_batch_eagerly():
    ms.set_context(mode=ms.GRAPH_MODE)
    net = _BatchCentred()
    batches = read_batches(_data(72, batch=32), 3)
    probe = Probe(net, compiled=True)
    first, second = probe.measure(batches), probe.measure(batches)
    assert probe._padded == {(((8, 8), "<f4"),): False}  # pylint: disable=protected-access
    eager = Probe(net).measure(batches)
    for measured in (first, second):
        np.testing.assert_allclose(measured.outputs, eager.outputs, rtol=1e-5, atol=1e-6)


def test_an_eager_pass_that_fails_leaves_no_error_for_the_users_next_op():
    """An eager failure can leave the errors of the ops queued after it in MindSpore's PyNative pipeline, raised at
    the user's next op that waits: ``eager()`` waits them out when its block fails."""
    loss = _WholeBatchLoss()
    surfaced = 0
    for _ in range(40):
        try:
            with eager():
                loss(ms.Tensor(np.zeros((2, 2), np.float32)), ms.Tensor(np.zeros(2, np.int32))).asnumpy()
        except Exception:  # noqa: BLE001 - the pass fails, as it should
            pass
        for _ in range(3):  # the user's next ops
            try:
                ms.Parameter(ms.Tensor(np.zeros((32, 8), np.float32)), name="w").requires_grad = True
                ms.Tensor(np.ones(3, np.float32)).reshape(3).asnumpy()
            except Exception:  # noqa: BLE001 - what the user would have met
                surfaced += 1
    assert surfaced == 0
