"""The in-graph probes themselves: one compiled graph, the activation sample, and the statistics taken from it."""
from __future__ import annotations

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.probes import host, instrument
from mindspore_doctor.probes.instrument import (
    SAMPLE_COLS,
    SAMPLE_PAD,
    SAMPLE_ROWS,
    Instrumentation,
    activation_stats,
)
from mindspore_doctor.rule import CheckSkipped
from mindspore_doctor.signals import StepSignals

# --- statistics from a sample (numpy only) -------------------------------------------------------


def _padded(values: np.ndarray) -> np.ndarray:
    sample = np.full((SAMPLE_ROWS, SAMPLE_COLS), SAMPLE_PAD, np.float32)
    sample[:values.shape[0], :values.shape[1]] = values
    return sample


def test_a_cell_that_never_ran_has_no_statistics():
    assert activation_stats("relu", _padded(np.empty((0, 0))), order=0) is None


def test_relu_statistics_ignore_the_padding():
    values = np.zeros((16, 10), np.float32)
    values[:, :4] = 2.0  # 4 live units, 6 dead on every sample
    stats = activation_stats("relu", _padded(values), order=3)
    assert stats.dead_fraction == 0.6 and stats.dead_unit_fraction == 0.6 and stats.units == 10
    assert stats.mean_abs == pytest.approx(0.8) and stats.order == 3 and not stats.nonfinite


def test_dead_units_need_eight_samples():
    values = np.zeros((7, 10), np.float32)
    stats = activation_stats("relu", _padded(values), order=0)
    assert stats.dead_fraction == 1.0 and stats.dead_unit_fraction == -1.0


@pytest.mark.parametrize("kind, output, saturated", [
    ("sigmoid", 1.0, True), ("sigmoid", 1e-8, True), ("sigmoid", 0.5, False), ("sigmoid", 0.9999, False),
    ("tanh", 1.0, True), ("tanh", -1.0, True), ("tanh", 0.99, False), ("tanh", 0.99999994, False),
    ("tanh", 1.0000001, False),  # MindSpore's CPU tanh overshoots 1 near |x| = 5; TanhGrad gives -2e-7, not 0
])
def test_saturation_is_the_local_derivative_of_the_float32_output(kind, output, saturated):
    stats = activation_stats(kind, _padded(np.full((16, 8), output, np.float32)), order=0)
    assert stats.saturated_fraction == (1.0 if saturated else 0.0)
    assert stats.dead_fraction == 0.0 and stats.dead_unit_fraction == -1.0  # not ReLU-like


def test_a_nonfinite_output_is_flagged():
    values = np.ones((16, 8), np.float32)
    values[3, 5] = np.nan
    assert activation_stats("gelu", _padded(values), order=0).nonfinite == 1


def test_a_full_sample_has_no_padding_to_drop():
    values = np.arange(SAMPLE_ROWS * SAMPLE_COLS, dtype=np.float32).reshape(SAMPLE_ROWS, SAMPLE_COLS) - 100.0
    stats = activation_stats("relu", values, order=1)
    assert stats.units == SAMPLE_COLS and stats.dead_fraction == pytest.approx(101 / values.size)
    assert stats.mean_abs == float(np.abs(values.astype(np.float64)).mean())


def test_packed_host_sums_are_the_chunked_ones_bit_for_bit():
    """A probe step reads every weight's |w| and |update| sums; packing the small ones into one scratch pass must
    give the numbers the per-tensor chunked pass gives, the tensors larger than the scratch, empty ones and NaN
    included."""
    rng = np.random.default_rng(0)
    sizes = [300, 0, 7, 1000, 2500, 64, 999, 1, 4096, 33]
    arrays = [(rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4)).astype(np.float32) for n in sizes]
    arrays[4][17] = np.nan
    minus = [None if i % 3 else (a + np.float32(1e-3)).astype(np.float32) for i, a in enumerate(arrays)]
    sums = instrument._AbsSums(len(arrays))
    sums.scratch = np.empty(1024, np.float64)  # small: the arrays pack, flush and take the chunked pass
    expected = [instrument._abs_sum_max(a, np.empty(1024, np.float64), m) for a, m in zip(arrays, minus)]
    for i, (a, m) in enumerate(zip(arrays, minus)):
        sums.add(i, a, m)
    got = sums.finish()
    assert str(got) == str(expected)  # str: NaN == NaN
    assert got[1] == (0.0, 0.0) and np.isnan(got[4][0])


@pytest.mark.parametrize("dtype, size", [(np.float32, 12), (np.float16, 7), (np.int32, 1), (np.bool_, 5),
                                         (np.float32, host.COPY_MAX + 5), (np.float64, 3)])
def test_a_host_read_gives_the_values_asnumpy_gives(dtype, size):
    """The probe steps' reads copy small tensors (``get_bytes``): same values, dtype and order as ``asnumpy()``,
    also of a Parameter a graph just wrote in place."""
    values = (np.arange(size) % 5 - 2).astype(dtype)
    weight = ms.Parameter(ms.Tensor(values), name="w")
    ops.assign(weight, ms.Tensor(values[::-1].copy()))
    read = host.host_flat(weight)
    assert read.dtype == dtype and np.array_equal(read, weight.asnumpy().reshape(-1))
    assert np.array_equal(read, values[::-1])


# --- the sample the compiled step takes -----------------------------------------------------------


class ConvReluDense(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64 * 16 * 16, 10)
        self.head_act = nn.Tanh()
        self.out = nn.Dense(10, 2)

    def construct(self, x):
        return self.out(self.head_act(self.fc(self.flatten(self.relu(self.conv(x))))))


def _train_cell(net):
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = nn.TrainOneStepCell(loss, nn.Momentum(net.trainable_params(), 0.01, 0.9))
    cell.set_train()
    return cell


def test_the_compiled_step_samples_each_activation(exec_mode):
    net = ConvReluDense()
    cell = _train_cell(net)
    instrumentation = Instrumentation(net, cell.optimizer)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 3, 16, 16)).astype(np.float32)
    label = rng.integers(0, 2, 20).astype(np.int32)
    conv_out = net.conv(ms.Tensor(x)).asnumpy()  # before the step: the forward pass sees these weights

    instrumentation.set_probing(True)
    cell(ms.Tensor(x), ms.Tensor(label))
    relu_sample = net.relu._msd_sample.asnumpy()  # pylint: disable=protected-access
    flat = np.maximum(conv_out, 0).reshape(20, -1)  # 16384 units: stride 64 would be odd-adjusted to 63
    np.testing.assert_allclose(relu_sample, flat[:SAMPLE_ROWS, 0:63 * SAMPLE_COLS:63], rtol=1e-5, atol=1e-6)
    tanh_sample = net.head_act._msd_sample.asnumpy()  # pylint: disable=protected-access
    assert np.all(tanh_sample[:, 10:] == SAMPLE_PAD) and np.all(np.abs(tanh_sample[:, :10]) < 1)

    assert activation_stats("relu", relu_sample, 0).dead_fraction == pytest.approx(float((relu_sample <= 0).mean()))
    instrumentation.restore()
    assert type(net.relu) is nn.ReLU and not hasattr(net.relu, "_msd_sample")


def _reference_sample(values: np.ndarray) -> np.ndarray:
    """The activation sample as documented: the first SAMPLE_ROWS samples x SAMPLE_COLS units, odd stride, padded."""
    flat = values.reshape(values.shape[0], -1) if values.ndim >= 2 else values.reshape(1, -1)
    units = flat.shape[1]
    stride = units // SAMPLE_COLS if units >= SAMPLE_COLS else 1
    stride = stride - 1 if stride > 2 and stride % 2 == 0 else stride
    return _padded(flat[:SAMPLE_ROWS, 0:stride * SAMPLE_COLS:stride])


class _Sampled(nn.Cell):
    def construct(self, x):
        return instrument._output_sample(x)  # pylint: disable=protected-access


@pytest.mark.parametrize("shape", [(32, 128), (20, 3, 16, 16), (4, 3, 10, 10), (64, 1000), (2, 70000), (5,), ()])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_sample_is_the_documented_grid_for_every_shape(exec_mode, shape, dtype):
    values = np.random.default_rng(0).uniform(0, 1, shape).astype(dtype)
    sample = _Sampled()(ms.Tensor(values)).asnumpy()
    assert sample.shape == (SAMPLE_ROWS, SAMPLE_COLS) and sample.dtype == np.float32
    np.testing.assert_array_equal(sample, _reference_sample(values.astype(np.float32)))


def test_a_dynamic_shape_step_is_sampled_too():
    """``set_inputs`` with a None dimension: positions cannot be fixed when the graph compiles; the slice still
    samples (a batch of 8 fills 8 rows), and training runs."""
    ms.set_context(mode=ms.GRAPH_MODE)
    net = nn.SequentialCell(nn.Dense(64, 32), nn.ReLU(), nn.Dense(32, 10))
    cell = _train_cell(net)
    cell.set_inputs(ms.Tensor(shape=[None, 64], dtype=ms.float32), ms.Tensor(shape=[None], dtype=ms.int32))
    instrumentation = Instrumentation(net, cell.optimizer)
    rng = np.random.default_rng(0)
    for batch in (32, 8):
        instrumentation.set_probing(True)
        cell(ms.Tensor(rng.standard_normal((batch, 64)).astype(np.float32)),
             ms.Tensor(rng.integers(0, 10, batch).astype(np.int32)))
    sample = net[1]._msd_sample.asnumpy()  # pylint: disable=protected-access
    assert np.all(sample[8:] == SAMPLE_PAD) and np.all(sample[:8, :32] >= 0) and np.all(sample[:8, 32:] == SAMPLE_PAD)
    instrumentation.restore()


def _probed_conv_net():
    """A probed ConvReluDense in its train cell, and a batch of 4."""
    net = ConvReluDense()
    cell = _train_cell(net)
    x, label = ms.Tensor(np.ones((4, 3, 16, 16), np.float32)), ms.Tensor(np.zeros(4, np.int32))
    return net, cell, Instrumentation(net, cell.optimizer), x, label


def test_pynative_samples_only_on_probe_steps():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net, cell, instrumentation, x, label = _probed_conv_net()
    instrumentation.set_probing(False)
    cell(x, label)
    assert np.all(net.relu._msd_sample.asnumpy() == SAMPLE_PAD)  # pylint: disable=protected-access
    instrumentation.set_probing(True)
    cell(x, label)
    assert not np.all(net.relu._msd_sample.asnumpy() == SAMPLE_PAD)  # pylint: disable=protected-access
    assert instrumentation.optimizer_calls == 2  # Momentum's own global_step: it keeps its class
    instrumentation.restore()


def test_the_doctors_own_forward_passes_take_no_activation_sample(exec_mode):
    """The data checks' and the evaluation's passes (eager, or the evaluation's graph of its own) take no sample:
    eagerly it is a gather and a copy per activation cell (most of a ShuffleNetV2's evaluation time), and no
    probe step reads it."""
    from mindspore_doctor.forward import forward_in_eval_mode, traceless
    from mindspore_doctor.probes.evaluation import Probe

    net, cell, instrumentation, x, label = _probed_conv_net()
    instrumentation.set_probing(True)
    cell(x, label)
    taken = net.relu._msd_sample.asnumpy().copy()  # pylint: disable=protected-access
    forward_in_eval_mode(net, ms.Tensor(np.full((4, 3, 16, 16), 7.0, np.float32)))
    with traceless(net):
        net(ms.Tensor(np.full((4, 3, 16, 16), -3.0, np.float32)))
    evaluation = Probe(net, compiled=True)  # in GRAPH_MODE the evaluation's graph of its own, compiled here
    for value in (5.0, -2.0):
        evaluation.measure([(np.full((4, 3, 16, 16), value, np.float32), np.zeros(4, np.int32))])
    np.testing.assert_array_equal(net.relu._msd_sample.asnumpy(), taken)  # pylint: disable=protected-access
    assert net.relu._msd_sampling is True  # put back: the probe step samples  # pylint: disable=protected-access
    cell(ms.Tensor(np.full((4, 3, 16, 16), 2.0, np.float32)), label)  # the step itself samples as before
    assert not np.array_equal(net.relu._msd_sample.asnumpy(), taken)  # pylint: disable=protected-access
    instrumentation.restore()


@pytest.mark.parametrize("max_parameters, max_growth, graphs", [(0, 0.5, 1), (16, 0.5, 2), (16, -1.0, 1)],
                         ids=["one-graph", "probe-phase", "probe-phase-too-large"])
def test_probe_steps_run_their_own_graph_only_on_a_small_network(max_parameters, max_growth, graphs, monkeypatch):
    """A larger network's probe steps run the same compiled step as the others (a second graph cost more memory
    than the budget); a small one's run a graph of their own, and the other steps the user's own graph, unless the
    probe graph's compile grew the process too much: then it runs on every step."""
    monkeypatch.setattr(instrument, "PROBE_PHASE_MAX_PARAMETERS", max_parameters)
    monkeypatch.setattr(instrument, "PROBE_PHASE_MAX_GROWTH", max_growth)

    def trained(doctor):
        ms.set_seed(0)
        net = ConvReluDense()
        rng = np.random.default_rng(0)
        data = ds.NumpySlicesDataset({"x": rng.standard_normal((64, 3, 16, 16)).astype(np.float32),
                                      "label": rng.integers(0, 2, 64).astype(np.int32)}, shuffle=False).batch(16)
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.SGD(net.trainable_params(), 0.01))  # its gradients are read in the graph
        model.train(2, data, callbacks=[doctor] if doctor else [], dataset_sink_mode=False)
        return model.train_network, [p.asnumpy() for p in net.trainable_params()]

    doctor = Doctor(probe_every=2, ignore=("MSD3",))
    probed, weights = trained(doctor)
    plain, plain_weights = trained(None)
    assert len(probed.compile_cache) == graphs and len(plain.compile_cache) == 1
    assert probed.phase == plain.phase == "train"
    assert all(np.array_equal(a, b) for a, b in zip(weights, plain_weights))
    probed_steps = doctor.history.probed()
    assert [s.step for s in probed_steps] == [1, 2, 4, 6, 8]
    assert all(len(s.grad_rms) == 5 and list(s.activations) == ["relu", "head_act"] for s in probed_steps)


class DeepReluMLP(nn.Cell):
    """Ten ReLU cells in a row."""

    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell([cell for _ in range(10) for cell in (nn.Dense(8, 8), nn.ReLU())])
        self.head = nn.Dense(8, 2)

    def construct(self, x):
        return self.head(self.body(x))


@pytest.mark.parametrize("max_parameters, own_train_cell, sampled",
                         [(0, True, ["body.1", "body.9", "body.19"]), (64, True, None), (0, False, None)],
                         ids=["one-graph", "probe-phase", "forward-pass"])
def test_a_compiled_step_samples_at_most_sampled_activations_spread_through_the_network(
        max_parameters, own_train_cell, sampled, monkeypatch):
    """Sampled on every step, each cell costs a gather and a copy: the first, the last and evenly between, the
    others named in an MSD002; a probe phase of its own, or the forward pass of probe steps, samples every cell."""
    monkeypatch.setattr(instrument, "PROBE_PHASE_MAX_PARAMETERS", max_parameters)

    def trained(doctor):
        return _weights_after(lambda p: nn.SGD(p, 0.01), doctor, DeepReluMLP, own_train_cell)

    doctor = Doctor(probe_every=2, ignore=("MSD3",), sampled_activations=3)
    assert all(np.array_equal(a, b) for a, b in zip(trained(doctor), trained(None)))
    cells = [f"body.{i}" for i in range(1, 20, 2)]
    assert all(list(s.activations) == (sampled or cells) for s in doctor.history.probed())
    skipped = [f for f in doctor.report.findings if f.code == "MSD002" and "not sampled" in f.message]
    if sampled:
        assert len(skipped) == 1 and skipped[0].severity == "info"
        assert "7 of the network's 10 activation cells" in skipped[0].message and "`body.3`" in skipped[0].message
    else:
        assert not skipped


# --- every optimizer MindSpore runs on CPU: same weights, gradients probed on every probe step ------------

_SCHEDULE = nn.PolynomialDecayLR(1e-3, 1e-5, 10, 1.0)
OPTIMIZERS = {
    "SGD": lambda p: nn.SGD(p, 0.05),
    "Momentum": lambda p: nn.Momentum(p, 0.05, 0.9),
    "Momentum+schedule": lambda p: nn.Momentum(p, nn.ExponentialDecayLR(0.05, 0.9, 4), 0.9),
    "Adam": lambda p: nn.Adam(p, 1e-3),
    "Adam+weight_decay": lambda p: nn.Adam(p, 1e-3, weight_decay=0.01),
    "AdamWeightDecay": lambda p: nn.AdamWeightDecay(p, 1e-3, weight_decay=0.01),
    "AdamWeightDecay+schedule": lambda p: nn.AdamWeightDecay(p, _SCHEDULE, weight_decay=0.01),
    "AdamWeightDecay+groups": lambda p: nn.AdamWeightDecay(
        [{"params": [q for q in p if "bias" not in q.name], "weight_decay": 0.01},
         {"params": [q for q in p if "bias" in q.name], "lr": 1e-2}], 1e-3),
    "LazyAdam": lambda p: nn.LazyAdam(p),
    "AdaMax": lambda p: nn.AdaMax(p),
    "RMSProp": lambda p: nn.RMSProp(p, 1e-3),
    "Adagrad": lambda p: nn.Adagrad(p, learning_rate=0.05),
    "ProximalAdagrad": lambda p: nn.ProximalAdagrad(p),
    "Adadelta": lambda p: nn.Adadelta(p),
    "FTRL": lambda p: nn.FTRL(p),
    "ASGD": lambda p: nn.ASGD(p),
    "Rprop": lambda p: nn.Rprop(p),
}  # Lamb and LARS have no CPU kernel in MindSpore 2.10


class TinyMLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 16)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(16, 2)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class OwnTrainStep(nn.TrainOneStepCell):
    """A user's train cell of named inputs: what it hands its loss network is not known, so the train step samples
    the activations."""

    def construct(self, x, label):
        return super().construct(x, label)


def _weights_after(make_optimizer, doctor, network=TinyMLP, own_train_cell=False):
    ms.set_seed(0)
    net = network()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 8)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "label": (x[:, 0] > 0).astype(np.int32)}, shuffle=False).batch(16)
    loss_fn, optimizer = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), make_optimizer(
        net.trainable_params())
    model = (Model(OwnTrainStep(nn.WithLossCell(net, loss_fn), optimizer)) if own_train_cell
             else Model(net, loss_fn, optimizer))
    model.train(2, data, callbacks=[doctor] if doctor else [], dataset_sink_mode=False)
    return [p.asnumpy() for p in net.trainable_params()]


@pytest.mark.parametrize("max_parameters", [16, 0], ids=["probe-phase", "one-graph"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_every_optimizer_trains_bitwise_the_same_and_is_probed(name, max_parameters, monkeypatch):
    """The probes wrap the user's optimizer, with a switch or under a phase of their own: a formulation MindSpore
    compiled wrongly for AdamWeightDecay alone (lost probes, or an optimizer that stopped learning) is caught here."""
    monkeypatch.setattr(instrument, "PROBE_PHASE_MAX_PARAMETERS", max_parameters)
    doctor = Doctor(ignore=("MSD3",), probe_every=2)
    with_doctor = _weights_after(OPTIMIZERS[name], doctor)
    without = _weights_after(OPTIMIZERS[name], None)
    assert all(np.array_equal(a, b) for a, b in zip(with_doctor, without))
    probed = doctor.history.probed()
    assert [s.step for s in probed] == [1, 2, 4, 6, 8, 10, 12]
    assert all(len(s.grad_rms) == 4 and all(v > 0 for v in s.grad_rms.values()) for s in probed)


class BatchNormDropoutNet(nn.Cell):
    """Convolution, BatchNorm, ReLU, dropout (MindSpore's, and one inside a cell of the user's, as mindcv's
    DropPath holds it), dense, Sigmoid."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, pad_mode="same")
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.drop = nn.Dropout(p=0.5)
        self.path = DropPathLike()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(8 * 8 * 8, 2)
        self.head_act = nn.Sigmoid()

    def construct(self, x):
        return self.head_act(self.fc(self.flatten(self.path(self.drop(self.relu(self.bn(self.conv(x))))))))


class DropPathLike(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(p=0.2)

    def construct(self, x):
        if not self.training:
            return x
        return x * self.dropout(ops.ones((x.shape[0], 1, 1, 1), x.dtype))


def test_probe_steps_sample_the_activations_in_a_forward_pass_of_their_own(monkeypatch):
    """With ``Model.train``'s train cell the user's train graph carries no sample: the probe steps sample in a
    graph of the Doctor's own, after the step; the step's graph is the user's (one compiled, the same weights and
    BatchNorm statistics), and the samples change on probe steps only."""
    monkeypatch.setattr(instrument, "PROBE_PHASE_MAX_PARAMETERS", 0)
    monkeypatch.setattr(instrument, "FORWARD_SAMPLES_MIN_CELLS", 2)
    changed = []

    class SampleWatch(ms.train.Callback):
        def __init__(self, net):
            self.net, self.last = net, None

        def on_train_step_end(self, run_context):
            buffers = instrument._BUFFERS.get(self.net.relu)  # pylint: disable=protected-access
            now = None if buffers is None else buffers["_msd_sample"].asnumpy().copy()
            changed.append(now is not None and (self.last is None or not np.array_equal(now, self.last)))
            self.last = now
            assert type(self.net.relu) is nn.ReLU  # the user's class, on every step

    def trained(doctor):
        ms.set_seed(0)
        net = BatchNormDropoutNet()
        net.drop.p, net.drop.keep_prob = 0.0, 1.0  # no dropout in training: its mask differs run to run on CPU
        rng = np.random.default_rng(0)
        data = ds.NumpySlicesDataset({"x": rng.standard_normal((64, 3, 8, 8)).astype(np.float32),
                                      "label": rng.integers(0, 2, 64).astype(np.int32)}, shuffle=False).batch(8)
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net.trainable_params(), 0.01, 0.9))
        model.train(1, data, callbacks=[doctor, SampleWatch(net)] if doctor else [], dataset_sink_mode=False)
        return model.train_network, {p.name: p.asnumpy() for p in net.get_parameters()}

    doctor = Doctor(probe_every=3, ignore=("MSD3",))
    probed, weights = trained(doctor)
    plain, plain_weights = trained(None)
    assert len(probed.compile_cache) == len(plain.compile_cache) == 1
    assert weights.keys() == plain_weights.keys() and all(np.array_equal(weights[k], plain_weights[k])
                                                          for k in weights)  # BatchNorm's moving statistics too
    probed_steps = doctor.history.probed()
    assert [s.step for s in probed_steps] == [1, 3, 6]
    assert all(list(s.activations) == ["relu", "head_act"] for s in probed_steps)
    assert changed == [step in (1, 3, 6) for step in range(1, 9)]


class NoisyNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(8, 8)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.fc(x + 0.1 * ops.standard_normal(x.shape)))


class NoisyByPrimitive(nn.Cell):
    def __init__(self):
        super().__init__()
        self.noise = ops.UniformReal(seed=3)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(x + self.noise(x.shape))


@pytest.mark.parametrize("network, safe", [(BatchNormDropoutNet, True), (TinyMLP, True), (NoisyNet, False),
                                           (NoisyByPrimitive, False)],
                         ids=["dropout-and-batchnorm", "mlp", "random-function", "random-primitive"])
def test_a_network_drawing_random_numbers_beyond_dropout_is_sampled_by_its_train_step(network, safe):
    """A random op's state is shared by every graph that runs it: a pass of the Doctor's own through one would change
    the user's next draws. Dropout cells run in eval mode in that pass; any other draw keeps the samples in the train
    step."""
    loss_net = nn.WithLossCell(network(), nn.MSELoss())
    assert instrument.forward_samples_safely(loss_net) is safe


class PassesItsInputs(nn.TrainOneStepCell):
    """As mindcv's ``TrainStep``: ``self.network(*inputs)`` in a construct of its own."""

    def construct(self, *inputs):
        loss = self.network(*inputs)
        return ops.depend(loss, self.optimizer(self.grad(self.network, self.weights)(*inputs, ops.ones_like(loss))))


class RebindsItsInputs(nn.TrainOneStepCell):
    def construct(self, *inputs):
        inputs = inputs[:1] + inputs[1:]
        loss = self.network(*inputs)
        return ops.depend(loss, self.optimizer(self.grad(self.network, self.weights)(*inputs, ops.ones_like(loss))))


@pytest.mark.parametrize("train_cell, known", [(nn.TrainOneStepCell, True), (PassesItsInputs, True),
                                               (OwnTrainStep, False), (RebindsItsInputs, False)],
                         ids=["mindspore", "passes-its-inputs", "named-inputs", "rebinds-its-inputs"])
def test_the_sample_pass_calls_the_loss_network_as_a_known_train_cell_does(train_cell, known):
    net = TinyMLP()
    loss_net = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = train_cell(loss_net, nn.SGD(net.trainable_params(), 0.01))
    assert instrument.called_loss_network(cell) is (loss_net if known else None)


def test_a_sample_pass_that_cannot_run_stops_the_activation_reads(monkeypatch):
    monkeypatch.setattr(instrument, "FORWARD_SAMPLES_MIN_CELLS", 1)
    ms.set_context(mode=ms.GRAPH_MODE)
    net = TinyMLP()
    cell = _train_cell(net)
    instrumentation = Instrumentation(net, cell.optimizer, loss_network=cell.network)
    instrumentation.set_probing(True)
    with pytest.raises(CheckSkipped, match="no inputs"):
        instrumentation.sample_activations(None)
    signals = StepSignals(step=1)
    instrumentation.read_into(signals)
    assert not signals.activations and not instrumentation.activations
    instrumentation.restore()
    assert type(net.relu) is nn.ReLU and not hasattr(net.relu, "_msd_sample")


def _probed_step_sums(net, optimizer, instrumentation_of=Instrumentation, steps=(False, True, False)):
    """Train ``net`` three steps, the second probed, as the Doctor does; (its exact Σg²/2 per parameter, what the
    probe read into the step's signals, the graph's sums buffer then — None where the optimizer is not probed in the
    graph —, the instrumentation)."""
    loss_net = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    cell = nn.TrainOneStepCell(loss_net, optimizer, sens=optimizer.loss_scale)  # the gradients scaled, as it expects
    cell.set_train()
    instrumentation = instrumentation_of(net, optimizer)
    rng = np.random.default_rng(1)
    x = ms.Tensor(rng.standard_normal((16, 8)).astype(np.float32))
    label = ms.Tensor(rng.integers(0, 2, 16).astype(np.int32))
    for probing in steps:  # the probed step is the second: its weights, its batch
        if probing:
            expected = [0.5 * float((g.asnumpy().astype(np.float64) ** 2).sum())
                        for g in ms.grad(loss_net, grad_position=None, weights=cell.weights)(x, label)]
        instrumentation.set_probing(probing)
        cell(x, label)
        if probing:
            signals = StepSignals(step=2)
            instrumentation.read_into(signals)
            in_graph = (instrumentation.grad_sums.asnumpy().copy()  # asnumpy is a view of the buffer on CPU
                        if hasattr(optimizer, "_msd_grad_sums") else None)
    read = [signals.grad_norm[n] ** 2 / 2 if n in signals.grad_norm else None for n in instrumentation.parameter_names]
    return expected, read, in_graph, instrumentation


@pytest.mark.parametrize("every_step", [True, False], ids=["sums-every-step", "switched"])
def test_gradient_sums_are_those_of_the_step_that_was_probed(every_step, monkeypatch):
    """Read in the graph after the probed step, as the Doctor does: with the switch (a large network) or with the
    sums on every step (a small one, ``SUMS_EVERY_STEP_ELEMENTS``)."""
    monkeypatch.setattr(instrument, "SUMS_EVERY_STEP_ELEMENTS", 1 << 15 if every_step else 0)
    net = TinyMLP()
    optimizer = nn.SGD(net.trainable_params(), 0.01, momentum=0.9)
    expected, read, in_graph, instrumentation = _probed_step_sums(net, optimizer)
    assert instrumentation.sums_every_step is every_step
    np.testing.assert_allclose(in_graph, expected, rtol=1e-5)
    np.testing.assert_allclose(read, expected, rtol=1e-5)
    assert instrumentation.optimizer_calls == (3 if every_step else 1)
    instrumentation.restore()


def _groups(p, decay):
    return [{"params": [q for q in p if "bias" not in q.name], "weight_decay": decay},
            {"params": [q for q in p if "bias" in q.name], "lr": 1e-2}]


STATE_OPTIMIZERS = {
    "Momentum": lambda p: nn.Momentum(p, 0.05, 0.9),
    "Momentum+weight_decay": lambda p: nn.Momentum(p, 0.05, 0.9, weight_decay=0.01),
    "Momentum+nesterov+groups+schedule": lambda p: nn.Momentum(
        _groups(p, 0.02), nn.ExponentialDecayLR(0.05, 0.9, 4), 0.9, use_nesterov=True),
    "Adam": lambda p: nn.Adam(p, 1e-3),
    "Adam+groups": lambda p: nn.Adam(_groups(p, 0.01), 1e-3),
    "Momentum+weight_decay+loss_scale": lambda p: nn.Momentum(p, 0.05, 0.9, weight_decay=0.01, loss_scale=1000.0),
    "Adam+weight_decay+loss_scale": lambda p: nn.Adam(p, 1e-3, weight_decay=0.01, loss_scale=128.0),
    "AdamWeightDecay+groups": lambda p: nn.AdamWeightDecay(_groups(p, 0.01), 1e-3),
}


@pytest.mark.parametrize("whole", [instrument.UPDATE_SAMPLE, 16], ids=["weights-copied-whole", "weights-strided"])
@pytest.mark.parametrize("name", list(STATE_OPTIMIZERS))
def test_gradients_are_read_on_the_host_from_the_optimizers_state(name, whole, monkeypatch):
    """``nn.Momentum``, ``nn.Adam``, ``nn.AdamWeightDecay``: the optimizer keeps its own class, nothing of the
    Doctor's runs in its step; the host derives each gradient from the optimizer's state, to the sums of the gradients
    the probed step computed, whether the update's copy of a decayed weight is whole or a strided sample (then the
    derivation copies it whole); several steps between two reads of the state leave the gradients unread (a sunk
    dataset)."""
    monkeypatch.setattr(instrument, "UPDATE_SAMPLE", whole)
    net = TinyMLP()
    optimizer = STATE_OPTIMIZERS[name](net.trainable_params())
    own_class = type(optimizer)
    for steps in ((False, True, False), (False, True, True, False)):
        expected, read, in_graph, instrumentation = _probed_step_sums(net, optimizer, steps=steps)
        np.testing.assert_allclose(read, expected, rtol=1e-5)
        assert in_graph is None and type(optimizer) is own_class
        instrumentation.restore()

    class OneCall(Instrumentation):
        """Two optimizer steps between ``set_probing`` and the read, as a sunk dataset's call runs."""

        def set_probing(self, probing):
            super().set_probing(probing)
            if probing:
                self.optimizer(tuple(ms.ops.zeros_like(p) for p in self.optimizer.parameters))

    _, read, _, instrumentation = _probed_step_sums(net, optimizer, OneCall)
    assert read == [None] * 4
    instrumentation.restore()


class HalfScaledMLP(TinyMLP):
    """A float16 weight beside float32 ones: its gradient is not derived."""

    def __init__(self):
        super().__init__()
        self.scale = ms.Parameter(ms.Tensor(np.linspace(0.5, 1.5, 2).astype(np.float16)), name="scale")

    def construct(self, x):
        return super().construct(x) * self.scale.astype(ms.float32)


@pytest.mark.parametrize("every_step", [True, False], ids=["sums-every-step", "switched"])
@pytest.mark.parametrize("make_optimizer", [
    lambda p: nn.SGD(p, 0.05, momentum=0.9, weight_decay=0.01, loss_scale=1000.0),
    lambda p: nn.Adam(p, 1e-3, weight_decay=0.01, loss_scale=128.0, use_lazy=True),
], ids=["SGD", "LazyAdam"])
def test_a_loss_scaled_optimizers_gradients_read_in_the_graph_are_unscaled(make_optimizer, every_step, monkeypatch):
    """An optimizer with a loss scale of its own takes the gradients ``s`` times larger, and so does the graph's read
    of them, at the optimizer and where the decay wrote them: the host scales the sums back."""
    monkeypatch.setattr(instrument, "SUMS_EVERY_STEP_ELEMENTS", 1 << 15 if every_step else 0)
    net = TinyMLP()
    optimizer = make_optimizer(net.trainable_params())
    expected, read, in_graph, instrumentation = _probed_step_sums(net, optimizer)
    assert in_graph is not None and not instrumentation._derived_names  # pylint: disable=protected-access
    np.testing.assert_allclose(read, expected, rtol=1e-5)
    instrumentation.restore()


@pytest.mark.parametrize("every_step", [True, False], ids=["sums-every-step", "switched"])
def test_a_gradient_the_host_cannot_derive_is_read_in_the_graph_beside_the_derived(every_step, monkeypatch):
    """The optimizer is probed in the graph for the float16 weight's gradient alone; the graph's buffer holds no
    sum for the derived ones."""
    monkeypatch.setattr(instrument, "SUMS_EVERY_STEP_ELEMENTS", 1 << 15 if every_step else 0)
    net = HalfScaledMLP()
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9, weight_decay=0.01)
    expected, read, in_graph, instrumentation = _probed_step_sums(net, optimizer)
    half = instrumentation.parameter_names.index("scale")
    assert instrumentation.sums_every_step is every_step
    np.testing.assert_allclose(read, expected, rtol=2e-3)  # the float16 gradient's own rounding
    in_graph = in_graph + optimizer._msd_decay_sums.asnumpy()  # read where the decay wrote it  # pylint: disable=protected-access
    assert in_graph[half] > 0 and not np.delete(in_graph, half).any()
    assert instrumentation.optimizer_calls == (3 if every_step else 1)
    instrumentation.restore()


def test_an_optimizer_that_changes_the_step_is_read_in_the_graph():
    """Whatever MindSpore's own step does not hold — a subclass's ``construct``, lazy Adam — keeps the graph's reads;
    a subclass adding only attributes, a loss scale keep the host's."""

    class Logged(nn.Momentum):
        pass

    class Clipped(nn.Momentum):
        def construct(self, gradients):
            return super().construct(ms.ops.clip_by_global_norm(gradients, 1.0))

    net = TinyMLP()
    cases = {Logged(net.trainable_params(), 0.05, 0.9): 4, Clipped(net.trainable_params(), 0.05, 0.9): 0,
             nn.Momentum(net.trainable_params(), 0.05, 0.9, loss_scale=128.0): 4, nn.SGD(net.trainable_params()): 0,
             nn.Adam(net.trainable_params(), use_lazy=True): 0, nn.AdamWeightDecay(net.trainable_params()): 4}
    for optimizer, derived in cases.items():
        instrumentation = Instrumentation(net, optimizer)
        assert len(instrumentation._derived_names) == derived, type(optimizer).__name__  # pylint: disable=protected-access
        instrumentation.restore()


def test_activation_kinds_cover_mint_cells_and_user_subclasses():
    from mindspore import mint

    from mindspore_doctor.probes.instrument import activation_kind

    class MyReLU(nn.ReLU):
        pass

    assert activation_kind(mint.nn.GELU()) == "gelu" and activation_kind(mint.nn.ReLU()) == "relu"
    assert activation_kind(MyReLU()) == "relu"
    assert activation_kind(nn.Dense(2, 2)) is None and activation_kind(nn.LeakyReLU()) is None


def test_a_run_that_raises_in_a_probe_step_puts_the_train_cells_phase_back():
    """The Doctor set the probe phase at the step's begin; another callback raises before the step runs: the train
    cell is left under its own phase, and the user's error goes on."""
    from mindspore.train.callback import Callback

    class Interrupt(Callback):
        def on_train_step_begin(self, run_context):
            raise KeyboardInterrupt

    ms.set_seed(0)
    net = TinyMLP()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "label": (x[:, 0] > 0).astype(np.int32)}, shuffle=False).batch(16)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), nn.SGD(net.trainable_params()))
    with pytest.raises(KeyboardInterrupt):
        model.train(1, data, callbacks=[Doctor(ignore=("MSD3",)), Interrupt()], dataset_sink_mode=False)
    assert model.train_network.phase == "train"
    model.train(1, data, dataset_sink_mode=False)  # trains on, without the Doctor
    assert len(model.train_network.compile_cache) == 1
