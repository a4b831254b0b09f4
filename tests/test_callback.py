"""The Doctor callback on real (tiny) trainings: each MSD2xx rule fires on a broken network, healthy ones stay quiet."""
from __future__ import annotations

import json

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.common.initializer import Constant, Normal
from mindspore.train import Callback, LossMonitor, Model, ModelCheckpoint, CheckpointConfig, TimeMonitor

from benchmarks.compat import PortableLossScaleCell
from mindspore_doctor import Doctor
from mindspore_doctor.rules import training as training_rules

QUIET = ("MSD3",)  # data checks have their own tests; these tiny synthetic sets are legitimately small


def _dataset(n=128, features=8, classes=2, batch=16, image=None, poison_batch=None, target="class"):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, *(image or (features,)))).astype(np.float32)
    flat = x.reshape(n, -1)
    label = (flat[:, 0] > 0).astype(np.int32) % classes if target == "class" else np.zeros((n, 1), np.float32)
    if poison_batch is not None:
        x[poison_batch * batch] = np.inf
    return ds.NumpySlicesDataset({"x": x, "label": label}, shuffle=False).batch(batch)


class MLP(nn.Cell):
    def __init__(self, features=8, hidden=16, classes=2, act=None, scale=1.0, bias=0.0):
        super().__init__()
        self.fc1 = nn.Dense(features, hidden, bias_init=Constant(bias))
        self.relu1 = act or nn.ReLU()
        self.fc2 = nn.Dense(hidden, classes)
        self.scale = scale

    def construct(self, x):
        return self.fc2(self.relu1(self.fc1(x * self.scale)))


def _train(net, data, doctor, *, loss=None, opt=None, epochs=2, lr=0.05, sink=False, callbacks=(), **model_kw):
    loss = loss or nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = opt or nn.Momentum(net.trainable_params(), lr, 0.9)
    model = Model(net, loss, opt, **model_kw)
    model.train(epochs, data, callbacks=[*callbacks, doctor], dataset_sink_mode=sink)
    return model


def _problems(doctor):
    return {f.code for f in doctor.report.at_least("warning")}


# --- do no harm ------------------------------------------------------------------------------


class SmallConvNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(4 * 8 * 8, 2)

    def construct(self, x):
        return self.fc(self.flatten(self.relu(self.conv(x))))


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_final_weights_bitwise_identical_with_and_without_doctor(exec_mode, optimizer, tmp_path):
    def run(options):
        ms.set_seed(0)
        net = SmallConvNet()
        opt = (nn.Adam(net.trainable_params(), 1e-3) if optimizer == "adam"
               else nn.Momentum(net.trainable_params(), 0.05, 0.9))
        callbacks = [Doctor(ignore=QUIET, **options)] if options is not None else []
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt)
        model.train(2, _dataset(n=96, image=(1, 8, 8)), callbacks=callbacks, dataset_sink_mode=False)
        return {p.name: p.asnumpy() for p in model._train_network.get_parameters()}  # pylint: disable=protected-access

    plain = run(None)
    # defaults; a probe on every third step; every export on (histograms of the updates on each probe step)
    for options in ({}, {"probe_every": 3}, {"probe_every": 2, "summary_dir": str(tmp_path), "tensorboard": True}):
        doctored = run(options)
        assert plain.keys() == doctored.keys()  # no probe buffer leaks into the train network
        for name, value in plain.items():
            assert np.array_equal(value, doctored[name]), (options, name)


class TokenTransformer(nn.Cell):
    """Embedding + learned positions + nn.TransformerEncoder (no dropout: CPU Dropout is not reproducible)."""

    def __init__(self, vocab=32, steps=8, d_model=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = ms.Parameter(ms.Tensor(np.zeros((1, steps, d_model), np.float32)), name="position")
        layer = nn.TransformerEncoderLayer(d_model, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1)
        self.fc = nn.Dense(d_model, 2)

    def construct(self, x):
        return self.fc(self.encoder(self.embed(x) + self.position).mean(axis=1))


def test_transformer_weights_bitwise_identical_and_parameter_names_kept():
    """The data checks' one forward pass runs the user's construct eagerly; nn.MultiheadAttention records
    `q_is_k` on itself there, which changed how the later graph rounded the embedding gradients."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 32, (64, 8)).astype(np.int32)
    columns = {"x": tokens, "label": (tokens[:, 0] % 2).astype(np.int32)}

    def run(callbacks):
        ms.set_seed(0)
        net = TokenTransformer()
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Adam(net.trainable_params(), 1e-3))
        model.train(1, ds.NumpySlicesDataset(columns, shuffle=False).batch(16), callbacks=callbacks,
                    dataset_sink_mode=False)
        return {p.name: p.asnumpy() for p in model._train_network.get_parameters()}  # pylint: disable=protected-access

    plain, doctored = run([]), run([Doctor(ignore=QUIET)])
    assert plain.keys() == doctored.keys()
    assert [n for n in plain if not np.array_equal(plain[n], doctored[n])] == []


class AlwaysBatchStatsNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.bn = nn.BatchNorm1d(16, use_batch_statistics=True)  # updates its moving statistics in eval mode too
        self.fc2 = nn.Dense(16, 2)

    def construct(self, x):
        return self.fc2(ops.relu(self.bn(self.fc1(x))))


def test_forward_passes_of_the_doctor_leave_batchnorm_statistics_alone():
    def run(callbacks):
        ms.set_seed(0)
        net = AlwaysBatchStatsNet()
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net.trainable_params(), 0.05, 0.9))
        model.train(1, _dataset(n=64), callbacks=callbacks, dataset_sink_mode=False)
        return {p.name: p.asnumpy() for p in net.get_parameters()}

    plain, doctored = run([]), run([Doctor(ignore=QUIET)])
    assert [n for n in plain if not np.array_equal(plain[n], doctored[n])] == []


# --- healthy networks ---------------------------------------------------------------------------


class TinyResNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, pad_mode="same", has_bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv = nn.Conv2d(4, 4, 3, pad_mode="same", has_bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.pool = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(4, 2)

    def construct(self, x):
        x = self.relu(self.bn1(self.stem(x)))
        x = self.relu(x + self.bn2(self.conv(x)))
        return self.fc(self.pool(x, (2, 3)))


class TinyLSTM(nn.Cell):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8, batch_first=True)
        self.fc = nn.Dense(8, 2)

    def construct(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


class TinyLeNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, pad_mode="valid")
        self.conv2 = nn.Conv2d(4, 8, 3, pad_mode="valid")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(8, 16)
        self.fc2 = nn.Dense(16, 2)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.relu(self.conv2(x))
        x = self.pool(x)
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


HEALTHY = {
    "mlp": (lambda: MLP(), dict()),
    "lenet": (TinyLeNet, dict(image=(1, 12, 12))),
    "resnet_bn": (TinyResNet, dict(image=(1, 8, 8))),
    "lstm": (TinyLSTM, dict(image=(6, 4))),
}


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_networks_train_without_warnings(exec_mode, name):
    build, data_kw = HEALTHY[name]
    doctor = Doctor(ignore=QUIET, probe_every=4)
    _train(build(), _dataset(n=160, **data_kw), doctor, epochs=2, lr=0.02)
    assert doctor.report.at_least("warning") == [], str(doctor.report)
    assert len(doctor.history.probed()) >= 4
    assert all(np.isfinite(loss) for _, loss in doctor.history.losses)


# --- each rule fires on a network that has the problem -----------------------------------------


def test_nonfinite_loss_at_the_right_step_names_first_cell_and_saves_repro(tmp_path):
    doctor = Doctor(tmp_path, ignore=QUIET, probe_every=1)
    _train(MLP(classes=1, act=nn.Tanh()), _dataset(poison_batch=4, target="zeros"), doctor, loss=nn.MSELoss(),
           epochs=1)
    (nan,) = doctor.report.by_code("MSD201")
    assert nan.step == 5  # batch index 4 is step 5
    (first,) = doctor.report.by_code("MSD206")
    assert first.step == 5 and first.location == {"cell": "relu1"}
    bundle = np.load(tmp_path / "repro_step5.npz")
    assert np.isinf(bundle["input_0"]).any()
    meta = json.loads((tmp_path / "repro_step5.json").read_text())
    assert meta["step"] == 5
    report = json.loads((tmp_path / "doctor_report.json").read_text())
    assert {"MSD201", "MSD206"} <= {f["code"] for f in report["findings"]}
    assert json.loads((tmp_path / "doctor_history.json").read_text())["steps"][0]["step"] == 1


def test_stop_on_error_stops_training_at_the_nonfinite_loss():
    doctor = Doctor(ignore=QUIET, stop_on="error")
    _train(MLP(classes=1, act=nn.Tanh()), _dataset(poison_batch=2, target="zeros"), doctor, loss=nn.MSELoss(),
           epochs=2)
    assert doctor.history.steps[-1].step == 3  # 16 steps without the stop


class ZeroedHead(nn.Cell):
    """fc2 is multiplied by zero: its weights get no gradient."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Dense(16, 2)
        self.skip = nn.Dense(8, 2)

    def construct(self, x):
        return self.skip(x) + 0.0 * self.fc2(self.relu1(self.fc1(x)))


def test_weights_not_updating_and_vanishing_gradient():
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(ZeroedHead(), _dataset(), doctor, epochs=1)
    stuck = {f.location.get("parameter") for f in doctor.report.by_code("MSD209")}
    assert {"fc1.weight", "fc2.weight"} <= stuck and "skip.weight" not in stuck
    assert "fc1.weight" in {f.location.get("parameter") for f in doctor.report.by_code("MSD207")}


class LinearBottleneck(nn.Cell):
    """MobileNetV2's linear bottleneck in miniature: `project.1`'s beta passes through the 1x1 `expand` conv and
    the residual add, and `expand.1` (BatchNorm) removes it: its gradient is ~0 by construction."""

    def __init__(self):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(1, 8, 3, has_bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.project = nn.SequentialCell(nn.Conv2d(8, 8, 1, has_bias=False), nn.BatchNorm2d(8))
        self.expand = nn.SequentialCell(nn.Conv2d(8, 16, 1, has_bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = ops.ReduceMean(keep_dims=False)
        self.head = nn.Dense(16, 2)

    def construct(self, x):
        x = self.stem(x)
        x = x + self.project(x)
        return self.head(self.pool(self.expand(x), (2, 3)))


def test_a_beta_cancelled_by_the_next_batchnorm_is_redundant_not_frozen():
    """Issue 13: MSD209 fired on every projection-BatchNorm beta of MobileNetV2/V3 and ShuffleNetV2."""
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(LinearBottleneck(), _dataset(n=96, image=(1, 8, 8)), doctor, epochs=2)
    assert "project.1.beta" not in {f.location.get("parameter") for f in doctor.report.by_code("MSD209")}
    (redundant,) = doctor.report.by_code("MSD115")
    assert redundant.location["parameter"] == "project.1.beta" and redundant.severity.value == "info"
    assert redundant.evidence["sibling"] == "project.1.gamma" and redundant.evidence["grad_ratio"] < 1e-5
    assert not doctor.report.at_least("warning"), doctor.report


class LayerScaleMLP(nn.Cell):
    """A residual MLP block with ConvNeXt's layer scale: `gamma` is 1e-6 (kept there: in ConvNeXt it grows slowly),
    so `fc2` and `fc1` get gradients ~1e-6 of the usual by design."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Dense(8, 32)
        self.fc1 = nn.Dense(32, 128)
        self.act = nn.GELU()
        self.fc2 = nn.Dense(128, 32)
        self.gamma = ms.Parameter(ms.Tensor(np.full((32,), 1e-6, np.float32)), name="gamma", requires_grad=False)
        self.head = nn.Dense(32, 2)

    def construct(self, x):
        x = self.stem(x)
        return self.head(x + self.gamma * self.fc2(self.act(self.fc1(x))))


@pytest.mark.parametrize("optimizer, fires", [("adamw-eps1e-10", False), ("adamw-eps1e-6", True), ("sgd", True)])
def test_layer_scale_gradients_vanish_only_when_the_layer_cannot_learn(optimizer, fires):
    """Issue 13: AdamW with mindcv's eps=1e-10 normalises a 3e-9 gradient away: the layer-scaled branch moves as
    fast as the rest, it learns. With MindSpore's default eps=1e-6 the same gradient is swallowed (the branch only
    decays, at ~1e-3 of its peers' rate), and under SGD it moves by ~1e-9 of itself: vanishing, both."""
    ms.set_seed(0)
    net = LayerScaleMLP()
    opt = (nn.SGD(net.trainable_params(), 0.05) if optimizer == "sgd" else nn.AdamWeightDecay(
        net.trainable_params(), 1e-3, eps=float(optimizer.split("eps")[1]), weight_decay=0.05))
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(net, _dataset(), doctor, opt=opt, epochs=1)
    assert doctor.history.probed()[-1].grad_rms["fc2.weight"] < 1e-7  # the absolute threshold alone fires always
    vanishing = {f.location["parameter"] for f in doctor.report.by_code("MSD207")}
    assert ("fc2.weight" in vanishing) is fires, doctor.report


@pytest.mark.parametrize("lr, code", [(20.0, "MSD211"), (2e-4, "MSD210")])
def test_update_ratio_out_of_range(lr, code):
    doctor = Doctor(ignore=QUIET, probe_every=2)
    net = MLP()
    _train(net, _dataset(), doctor, opt=nn.SGD(net.trainable_params(), lr), epochs=1)
    assert code in doctor.report.codes()
    assert ({"MSD210", "MSD211"} - {code}).isdisjoint(doctor.report.codes())


def test_dead_relu():
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(MLP(bias=-100.0), _dataset(), doctor, epochs=1)
    (dead,) = doctor.report.by_code("MSD212")
    assert dead.location == {"cell": "relu1"} and dead.evidence["dead_fraction"] == 1.0


def test_dead_relu_with_probes_200_steps_apart():
    """Issue 13: a fixed 64-step look-back saw one probe at probe_every=200: no probe rule ever fired."""
    doctor = Doctor(ignore=QUIET, probe_every=200)
    _train(MLP(bias=-100.0), _dataset(n=208, batch=4), doctor, epochs=4)  # 208 steps: probes at 1 and 200
    assert [s.step for s in doctor.history.probed()] == [1, 200]
    (dead,) = doctor.report.by_code("MSD212")
    assert dead.step == 200 and dead.location == {"cell": "relu1"} and dead.severity.value == "warning"


def test_saturated_sigmoid_but_not_healthy_sigmoid():
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(MLP(act=nn.Sigmoid(), bias=50.0), _dataset(), doctor, epochs=1)
    assert "MSD213" in doctor.report.codes()
    healthy = Doctor(ignore=QUIET, probe_every=2)
    _train(MLP(act=nn.Sigmoid()), _dataset(), healthy, epochs=1)
    assert "MSD213" not in healthy.report.codes()


class Deep(nn.Cell):
    def __init__(self, sigma):
        super().__init__()
        self.fc1 = nn.Dense(8, 32, weight_init=Normal(sigma))
        self.act1 = nn.ReLU()
        self.fc2 = nn.Dense(32, 32, weight_init=Normal(sigma))
        self.act2 = nn.ReLU()
        self.fc3 = nn.Dense(32, 32, weight_init=Normal(sigma))
        self.act3 = nn.ReLU()
        self.head = nn.Dense(32, 2, weight_init=Normal(sigma))

    def construct(self, x):
        return self.head(self.act3(self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))))


@pytest.mark.parametrize("sigma, code", [(0.4, "MSD215"), (1.0, "MSD216")])
def test_unexpected_initial_loss_and_activation_exploding(sigma, code):
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(Deep(sigma), _dataset(), doctor, epochs=1, lr=1e-6)
    assert code in doctor.report.codes()
    if code == "MSD215":
        assert doctor.report.by_code("MSD215")[0].step == 1


def test_well_initialised_deep_net_has_sane_initial_loss_and_activations():
    calm = Doctor(ignore=QUIET, probe_every=2)
    _train(Deep(0.1), _dataset(), calm, epochs=1, lr=1e-2)
    assert {"MSD215", "MSD216"}.isdisjoint(calm.report.codes())


class BigLoss(nn.Cell):
    def __init__(self):
        super().__init__()
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    def construct(self, logits, label):
        return self.ce(logits, label) * 1e20


@pytest.mark.parametrize("scale, fires", [(1e20, True), (1.0, False)])
def test_loss_scale_overflow_rate(scale, fires):
    net = MLP()
    opt = nn.SGD(net.trainable_params(), 1e-30)
    train_cell = PortableLossScaleCell(nn.WithLossCell(net, BigLoss()), opt,
                                                  scale_sense=ms.Tensor(scale, ms.float32))
    doctor = Doctor(ignore=QUIET + ("MSD215", "MSD111"), probe_every=4)
    Model(train_cell).train(2, _dataset(), callbacks=[doctor], dataset_sink_mode=False)
    assert all(s.overflow is not None for s in doctor.history.steps)
    assert ("MSD214" in doctor.report.codes()) is fires


def test_loss_suspiciously_low_on_all_zero_regression_targets():
    net = nn.Dense(8, 1, weight_init="zeros", bias_init="zeros")
    doctor = Doctor(ignore=QUIET + ("MSD108",), probe_every=4)
    _train(net, _dataset(target="zeros"), doctor, loss=nn.MSELoss(), epochs=1)
    assert "MSD205" in doctor.report.codes()


def test_loss_not_decreasing_with_a_frozen_learning_rate():
    doctor = Doctor(ignore=QUIET + ("MSD210", "MSD111"), loss_window=8)
    _train(MLP(), _dataset(), doctor, epochs=4, lr=1e-9)  # the first window and plateau_windows=3 more
    (stuck,) = doctor.report.by_code("MSD203")
    assert stuck.step == 32 and stuck.severity.value == "warning"  # still stuck at the end: not resolved


class FreezeBatchNormStats(Callback):
    """A user hack that leaves one BatchNorm in eval mode while the network trains."""

    def __init__(self, cell):
        self.cell = cell

    def on_train_begin(self, run_context):
        self.cell.set_train(False)


def test_cell_left_in_eval_mode_while_training():
    net = TinyResNet()
    doctor = Doctor(ignore=QUIET, probe_every=4)
    _train(net, _dataset(image=(1, 8, 8)), doctor, epochs=1, callbacks=[FreezeBatchNormStats(net.bn2)])
    (mode,) = doctor.report.by_code("MSD105")
    assert mode.location == {"cell": "bn2"}


# --- robustness ---------------------------------------------------------------------------------


def test_a_check_that_raises_becomes_msd001_and_training_finishes(monkeypatch):
    def broken(history, config):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(training_rules, "TRAINING_RULES", [(("MSD207",), broken), *training_rules.TRAINING_RULES])
    doctor = Doctor(ignore=QUIET, probe_every=2)
    _train(MLP(), _dataset(), doctor, epochs=2)
    (internal,) = doctor.report.by_code("MSD001")
    assert "probe exploded" in internal.message and "Traceback" in internal.evidence["traceback"]
    assert doctor.history.steps[-1].step == 16


class _DataFindingsAtEachStep(Callback):
    """Records, around each step, the data findings (MSD3xx) the Doctor has reported so far."""

    def __init__(self, doctor):
        self.doctor, self.seen = doctor, []

    def _record(self, when, run_context):
        codes = sorted(c for c in self.doctor.report.codes() if c.startswith("MSD3"))
        self.seen.append((when, run_context.original_args().cur_step_num, codes))

    def on_train_step_begin(self, run_context):
        self._record("begin", run_context)

    def on_train_step_end(self, run_context):
        self._record("end", run_context)


def test_the_data_checks_run_as_the_first_step_ends():
    """After the step that compiles the train graph, so that what they leave is not under its memory peak."""
    doctor = Doctor(eval_dataset=_dataset())  # the training set again: MSD309, train/eval leakage
    watcher = _DataFindingsAtEachStep(doctor)
    _train(MLP(), _dataset(), doctor, epochs=1, callbacks=[watcher])  # the watcher is called before the Doctor
    assert watcher.seen[:2] == [("begin", 1, []), ("end", 1, [])]  # the Doctor's own step 1 has not ended yet
    assert watcher.seen[2][:2] == ("begin", 2) and "MSD309" in watcher.seen[2][2]


def test_a_first_step_that_raises_still_gets_the_data_checks():
    """Labels past the network's outputs make MindSpore's CPU loss raise in the first step: the data checks, run
    as the Doctor ends, say why, and the user's own error propagates."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "label": (np.arange(64) % 5).astype(np.int32)}, shuffle=False).batch(16)
    doctor = Doctor()
    with pytest.raises(Exception) as raised:
        _train(MLP(classes=3), data, doctor, epochs=1)
    assert "Doctor" not in type(raised.value).__name__
    (labels,) = doctor.report.by_code("MSD306")
    assert labels.evidence["num_outputs"] == 3
    assert not doctor.history.steps


def test_sink_mode_trains_and_says_what_it_could_probe():
    doctor = Doctor(ignore=QUIET)
    _train(MLP(), _dataset(), doctor, epochs=2, sink=True)
    if doctor.report.meta["dataset_sink_mode"]:  # a device that really sinks: probes off, MSD002 says so
        assert any("MSD207" in f.evidence.get("codes", []) for f in doctor.report.by_code("MSD002"))
        assert [s.step for s in doctor.history.steps] == [8, 16]
    else:  # MindSpore on CPU falls back to per-step training: full probing
        assert len(doctor.history.steps) == 16 and doctor.history.probed()
    assert doctor.report.at_least("warning") == []


def test_user_built_train_cell_and_other_callbacks(tmp_path):
    from mindspore.train import SummaryCollector

    net = MLP()
    opt = nn.Adam(net.trainable_params(), 1e-2)
    train_cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True,
                                                                                            reduction="mean")), opt)
    doctor = Doctor(tmp_path / "doctor", ignore=QUIET, probe_every=4)
    checkpoint = ModelCheckpoint("net", str(tmp_path / "ckpt"), config=CheckpointConfig(save_checkpoint_steps=8))
    callbacks = [LossMonitor(8), TimeMonitor(), checkpoint, SummaryCollector(str(tmp_path / "summary")), doctor]
    Model(train_cell).train(2, _dataset(), callbacks=callbacks, dataset_sink_mode=False)
    assert len(doctor.history.probed()) >= 4 and doctor.report.at_least("warning") == []
    assert type(train_cell) is nn.TrainOneStepCell and type(net.relu1) is nn.ReLU  # classes restored
    assert train_cell.optimizer is opt
    saved = ms.load_checkpoint(str(sorted((tmp_path / "ckpt").glob("*.ckpt"))[-1]))
    assert not any("msdoctor" in name for name in saved)
    assert (tmp_path / "doctor" / "doctor_report.json").exists()


def _noisy_labels(n=512, batch=16):
    """Labels that follow x[0] > 0 only 80 % of the time: the loss stays near 0.5, the model never converges."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    label = ((x[:, 0] > 0) ^ (rng.random(n) < 0.2)).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "label": label}, shuffle=False).batch(batch)


@pytest.mark.parametrize("schedule, fires", [("decayed", False), ("constant", True)])
def test_update_ratio_judged_at_the_schedules_peak_learning_rate(schedule, fires):
    """A step schedule 0.05 -> 5e-5 ends with updates of ~1e-6 of the weights: that is the schedule, not a learning
    rate too small (issue 13: the end of every cosine schedule was "too small"). 5e-5 all along is."""
    ms.set_seed(0)
    net = MLP()
    lr = nn.piecewise_constant_lr([24, 40, 64], [0.05, 0.005, 5e-5]) if schedule == "decayed" else [5e-5] * 64
    doctor = Doctor(ignore=QUIET + ("MSD111", "MSD203"), probe_every=8)
    _train(net, _noisy_labels(n=1024), doctor, opt=nn.Momentum(net.trainable_params(), lr, 0.9), epochs=1)
    probed = doctor.history.probed()
    assert [s.learning_rate for s in probed] == pytest.approx([lr[s.step - 1] for s in probed])
    assert doctor.history.peak_learning_rate == pytest.approx(max(lr))
    assert ("MSD210" in doctor.report.codes()) is fires, doctor.report


def test_a_run_too_short_for_the_probe_rules_probes_its_last_step_and_says_what_it_could_not_judge():
    """Issue 13 follow-up: 16 steps at probe_every=50 probed step 1 only, so a network whose every ReLU is dead got
    no verdict and no word about it. The last step is probed too (training unchanged, bit for bit), MSD212 fires
    there, and one MSD002 names the rules that still need more probes."""
    def run(doctor):
        ms.set_seed(0)
        net = MLP(bias=-100.0)
        _train(net, _dataset(n=128, batch=16), doctor or Callback(), epochs=2)
        return {p.name: p.asnumpy() for p in net.trainable_params()}

    doctor = Doctor(ignore=QUIET)
    doctored, plain = run(doctor), run(None)
    assert all(np.array_equal(plain[n], doctored[n]) for n in plain)
    assert [s.step for s in doctor.history.probed()] == [1, 16]
    (dead,) = doctor.report.by_code("MSD212")
    assert dead.step == 16 and dead.severity.value == "warning"
    (skipped,) = [f for f in doctor.report.by_code("MSD002") if f.location == {"check": "probe-count"}]
    assert skipped.evidence["codes"] == ["MSD210", "MSD211"] and "probe_every=4" in skipped.message

    enough = Doctor(ignore=QUIET, probe_every=5)  # 1, 5, 10, 15: every rule can judge, no extra probe
    _train(MLP(bias=-100.0), _dataset(n=128, batch=16), enough, epochs=2)
    assert [s.step for s in enough.history.probed()] == [1, 5, 10, 15]
    assert not [f for f in enough.report.by_code("MSD002") if f.location == {"check": "probe-count"}]


def test_learning_rates_are_read_per_parameter_group():
    """mindyolo-style groups: the biases warm down from 0.1 while the weights warm up to 0.01. MSD210 scales each
    parameter's updates by its own group's schedule, so each group's rate and peak are recorded."""
    ms.set_seed(0)
    net = MLP()
    weights = [p for p in net.trainable_params() if p.name.endswith("weight")]
    biases = [p for p in net.trainable_params() if p.name.endswith("bias")]
    steps = 16
    weight_lr = [0.01 * min(1.0, (i + 1) / 8) for i in range(steps)]
    bias_lr = [0.1 - (0.1 - 0.01) * min(1.0, i / 8) for i in range(steps)]
    opt = nn.Momentum([{"params": weights, "lr": weight_lr}, {"params": biases, "lr": bias_lr}], 0.01, 0.9)
    doctor = Doctor(ignore=QUIET, probe_every=4)
    _train(net, _dataset(), doctor, opt=opt, epochs=1)
    history = doctor.history
    assert history.lr_groups == {"fc1.weight": 0, "fc2.weight": 0, "fc1.bias": 1, "fc2.bias": 1}
    for s in history.probed():
        assert s.group_learning_rates == pytest.approx([weight_lr[s.step - 1], bias_lr[s.step - 1]])
        assert s.learning_rate == pytest.approx(max(s.group_learning_rates))
    assert history.group_peak_learning_rates == pytest.approx([0.01, 0.1])
    assert history.peak_learning_rate == pytest.approx(0.1)


def test_only_a_run_with_a_single_regular_probe_gets_its_last_step_probed():
    from types import SimpleNamespace

    from mindspore_doctor.training.session import final_probe_step as _final_probe_step
    from mindspore_doctor.config import DoctorConfig

    def last(steps, first=0, every=50):
        cb = SimpleNamespace(cur_step_num=first, epoch_num=1, batch_num=steps)
        return _final_probe_step(cb, DoctorConfig(probe_every=every), needed=2)

    assert last(16) == 16 and last(49) == 49  # step 1 only
    assert last(64) is None and last(100) is None  # steps 1 and 50 (and 100): every 2-probe rule judges
    assert last(30, first=60) == 90  # resumed at step 60: no regular probe at all before 90
    assert _final_probe_step(SimpleNamespace(), DoctorConfig(), needed=2) is None  # a custom loop: length unknown


class _LossesSeen(Callback):
    """After the Doctor at each step: the step's loss as the step returned it, and the Doctor's history then."""

    def __init__(self, doctor):
        self.doctor, self.seen = doctor, []

    def on_train_step_end(self, run_context):
        args = run_context.original_args()
        steps = self.doctor.history.steps
        self.seen.append((args.cur_step_num, float(args.net_outputs.asnumpy()), [(s.step, s.loss) for s in steps[-1:]],
                          len(steps)))


def test_the_common_step_s_loss_is_in_the_history_at_its_step_for_whoever_reads_it():
    """The steps that are not probed keep only their loss and make their signals when the history is read
    (``DoctorSession._quick_step``): a reader in the middle of training sees every step so far, each with its own
    loss, and the run's history holds every step in order, probed or not."""
    doctor = Doctor(ignore=QUIET)
    watcher = _LossesSeen(doctor)
    net = MLP()
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.05, 0.9))
    model.train(2, _dataset(), callbacks=[doctor, watcher], dataset_sink_mode=False)
    assert [step for step, *_ in watcher.seen] == list(range(1, 17))
    for step, loss, last, count in watcher.seen:
        assert count == step and last == [(step, loss)]
    assert [s.step for s in doctor.history.steps] == list(range(1, 17))
    assert [s.loss for s in doctor.history.steps] == [loss for _, loss, _, _ in watcher.seen]
    assert [s.step for s in doctor.history.probed()] == [1, 16]  # step 1, and the short run's last step
