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
def test_final_weights_bitwise_identical_with_and_without_doctor(exec_mode, optimizer):
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
    for options in ({}, {"probe_every": 3}):  # defaults, and a probe on every third step
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


class PortableLossScaleCell(nn.TrainOneStepWithLossScaleCell):
    """MindSpore's loss-scale cell reads an Ascend status register on CPU; check grads with isfinite instead."""

    def get_overflow_status(self, status, compute_output):
        overflow = ops.zeros((), ms.bool_)
        for grad in compute_output:
            overflow = ops.logical_or(overflow, ops.logical_not(ops.isfinite(grad).all()))
        return overflow


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
    _train(MLP(), _dataset(), doctor, epochs=3, lr=1e-9)
    assert "MSD203" in doctor.report.codes()


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
