"""The Doctor never breaks a program that trains without it: probes that cannot go in safely stay out (MSD002), a
failed install leaves nothing behind, a second Doctor is refused cleanly, a reused Doctor starts a new run.

The shapes users write are in the compatibility matrix (tests/test_compatibility.py); failures while training in
tests/test_fault_injection.py.
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn, ops
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.probes import instrument
from mindspore_doctor.probes.swap import CannotProbe, is_probed, probed_class, user_class


@pytest.fixture(autouse=True)
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.GRAPH_MODE)


def _dataset(batches: int = 4):
    import mindspore.dataset as ds

    rng = np.random.RandomState(3)
    x = rng.randn(16 * batches, 6).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(16)


def _net():
    ms.set_seed(1)
    return nn.SequentialCell(nn.Dense(6, 16), nn.ReLU(), nn.Dense(16, 2))


def _train(optimizer_class, doctors, epochs=2, **kwargs):
    net = _net()
    optimizer = optimizer_class(net.trainable_params(), **kwargs)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
    model.train(epochs, _dataset(), callbacks=list(doctors), dataset_sink_mode=False)
    return net, optimizer


def _weights(net):
    return [p.asnumpy().copy() for p in net.trainable_params()]


class BothSuperForms(nn.Optimizer):
    """A from-scratch optimizer using both ``super()`` and ``super(BothSuperForms, self)``: in eager PyNative no
    probed class keeps both meaning what they mean, so its gradient probe stays out."""

    def __init__(self, params, learning_rate=0.1):
        super().__init__(learning_rate, params)

    def rate(self):
        return super(BothSuperForms, self).get_lr()

    def construct(self, gradients):
        lr = super().get_lr() * 0 + self.rate()
        for weight, gradient in zip(self._parameters, gradients):
            ops.assign_sub(weight, lr * gradient)
        return True


def test_unsafe_optimizer_class_is_left_alone_in_pynative_and_named():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    plain, _ = _train(BothSuperForms, [])
    doctor = Doctor()
    net, optimizer = _train(BothSuperForms, [doctor])
    assert type(optimizer) is BothSuperForms
    assert all(np.array_equal(a, b) for a, b in zip(_weights(plain), _weights(net)))
    skipped = [f for f in doctor.report.findings if f.code == "MSD002" and "gradient probe" in f.message]
    assert len(skipped) == 1 and "BothSuperForms" in skipped[0].message
    assert set(skipped[0].evidence["codes"]) >= {"MSD207", "MSD208", "MSD209"}
    probes = doctor.history.probed()
    assert probes and all(not s.grad_norm for s in probes) and any(s.activations for s in probes)


def test_both_super_forms_compiled_are_probed_in_graph_mode():
    plain, _ = _train(BothSuperForms, [])
    doctor = Doctor()
    net, _ = _train(BothSuperForms, [doctor])
    assert all(np.array_equal(a, b) for a, b in zip(_weights(plain), _weights(net)))
    assert any(s.grad_norm for s in doctor.history.probed())
    assert not [f for f in doctor.report.findings if f.code == "MSD002" and "gradient probe" in f.message]


def test_probed_class_keeps_name_and_module_and_user_class():
    class UserMomentum(nn.Momentum):
        def construct(self, gradients):
            return super().construct(gradients)

    net = _net()
    optimizer = UserMomentum(net.trainable_params(), 0.1, 0.9)
    probed = probed_class(UserMomentum, instrument._optimizer_probe)  # pylint: disable=protected-access
    assert (probed.__name__, probed.__qualname__, probed.__module__) == (
        "UserMomentum", UserMomentum.__qualname__, __name__)
    library = probed_class(nn.ReLU, instrument._activation_probe)  # pylint: disable=protected-access
    assert library.__name__ == "ReLU" and library.__module__ == nn.ReLU.__module__
    optimizer.__class__ = probed
    try:
        assert is_probed(optimizer) and user_class(optimizer) is UserMomentum
        with pytest.raises(CannotProbe, match="already carries probes"):
            probed_class(type(optimizer), instrument._optimizer_probe)  # pylint: disable=protected-access
    finally:
        optimizer.__class__ = UserMomentum


def test_second_doctor_on_a_probed_optimizer_is_refused_and_the_first_keeps_working():
    """``nn.SGD``: its gradients are read in the graph, so its class carries the first Doctor's probes."""
    first, second = Doctor(probe_every=2), Doctor(probe_every=2)
    plain, _ = _train(nn.SGD, [], learning_rate=0.1)
    net, optimizer = _train(nn.SGD, [first, second], learning_rate=0.1)
    assert type(optimizer) is nn.SGD
    assert all(np.array_equal(a, b) for a, b in zip(_weights(plain), _weights(net)))
    assert any(s.grad_norm for s in first.history.probed())
    refused = [f for f in second.report.findings if f.code == "MSD002" and "already carries probes" in f.message]
    assert refused, [f.message for f in second.report.findings]
    assert not [f for f in first.report.findings if f.code in ("MSD001", "MSD002") and "probe" in f.message
                and "not judged" not in f.message]
    assert not any(is_probed(cell) for _, cell in net.cells_and_names())


def test_reused_doctor_starts_a_fresh_run():
    doctor = Doctor(probe_every=2)
    net = _net()
    optimizer = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), optimizer)
    model.train(2, _dataset(), callbacks=[doctor], dataset_sink_mode=False)
    first_report = doctor.report
    assert len(doctor.history.steps) == 8
    model.train(1, _dataset(), callbacks=[doctor], dataset_sink_mode=False)
    assert doctor.report is not first_report
    assert [s.step for s in doctor.history.steps] == [1, 2, 3, 4]
    assert any(s.grad_norm for s in doctor.history.probed())
    assert type(optimizer) is nn.Momentum


def test_failed_install_leaves_nothing_swapped(monkeypatch):
    calls = {"n": 0}
    real_swap = instrument.swap

    def failing_on_the_activation(cell, probed, state):
        calls["n"] += 1
        if calls["n"] == 2:  # the optimizer went in, then the first activation fails
            raise RuntimeError("injected")
        return real_swap(cell, probed, state)

    monkeypatch.setattr(instrument, "swap", failing_on_the_activation)
    plain, _ = _train(nn.SGD, [], learning_rate=0.01)  # SGD: probed in the graph (Adam's gradients are derived)
    doctor = Doctor()
    net, optimizer = _train(nn.SGD, [doctor], learning_rate=0.01)
    assert type(optimizer) is nn.SGD and not optimizer.__dict__.keys() & {"_msd_probing", "_msd_grad_sums"}
    assert not any(is_probed(cell) for _, cell in net.cells_and_names())
    assert all(np.array_equal(a, b) for a, b in zip(_weights(plain), _weights(net)))
    failure = [f for f in doctor.report.findings if f.code == "MSD001"]
    assert failure and "injected" in failure[0].message


def test_restore_puts_classes_back_when_switching_the_probe_off_fails(monkeypatch):
    net = _net()
    optimizer = nn.SGD(net.trainable_params(), 0.1, momentum=0.9)
    probes = instrument.Instrumentation(net, optimizer)
    assert is_probed(optimizer)

    def broken(_probing):
        raise RuntimeError("device gone")

    monkeypatch.setattr(probes, "set_probing", broken)
    with pytest.raises(RuntimeError, match="device gone"):
        probes.restore()
    assert type(optimizer) is nn.SGD and "_msd_probing" not in optimizer.__dict__
    assert not any(is_probed(cell) for _, cell in net.cells_and_names())


def test_probed_optimizer_compiles_once_in_pynative(capfd, caplog):
    """The nn optimizers' ``@jit`` construct compiles the probed class too: under any other name than ``construct``
    MindSpore took the gradients for constants and compiled at every step (8x slower, measured)."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net = _net()
    optimizer = nn.SGD(net.trainable_params(), 1e-3)
    probes = instrument.Instrumentation(net, optimizer)
    assert is_probed(optimizer)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                               optimizer)
    x, y = (ms.Tensor(a) for a in next(_dataset().create_tuple_iterator(output_numpy=True)))
    try:
        for probing in (True, False, False, True):
            probes.set_probing(probing)
            step(x, y)
        assert probes.optimizer_calls == 2
    finally:
        probes.restore()
    assert "recompil" not in capfd.readouterr().err + caplog.text


class _Tagger(nn.Cell):
    """Embedding, BiLSTM, Dense; the loss inside (a CRF-like tagger's shape)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(30, 8)
        self.lstm = nn.LSTM(8, 8, bidirectional=True, batch_first=True)
        self.dense = nn.Dense(16, 3)

    def construct(self, tokens, tags):
        out, _ = self.lstm(self.embedding(tokens))
        return ops.cross_entropy(self.dense(out).reshape(-1, 3), tags.reshape(-1))


def _train_tagger(weight_decay, doctor=None):
    import mindspore.dataset as ds

    ms.set_seed(2)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 30, (32, 10)).astype(np.int32)
    data = ds.NumpySlicesDataset({"tokens": tokens, "tags": (tokens % 3).astype(np.int32)}, shuffle=False).batch(16)
    net = _Tagger()
    optimizer = nn.Momentum(net.trainable_params(), 0.5, 0.9, weight_decay=weight_decay)
    Model(nn.TrainOneStepCell(net, optimizer)).train(2, data, callbacks=[doctor] if doctor else [],
                                                     dataset_sink_mode=False)
    return _weights(net)


@pytest.mark.parametrize("weight_decay", [1e-4, 0.0])
def test_summed_gradients_under_weight_decay_are_read_where_the_decay_wrote_them(weight_decay):
    """An LSTM's gradient is summed over time steps (an AddN): a second reader of it changed the decayed update in
    the last bit (MindSpore 2.10 CPU merges it into the decay's AddN only while the decay is its one reader). The
    probe reads it from the decayed gradient instead: weights bit for bit, every gradient measured."""
    doctor = Doctor(probe_every=2)
    assert all(np.array_equal(a, b) for a, b in zip(_train_tagger(weight_decay), _train_tagger(weight_decay, doctor)))
    probed = [s for s in doctor.history.probed() if s.grad_norm]
    assert probed and all({"dense.weight", "lstm.weight_ih_l0", "embedding.embedding_table"} <= s.grad_norm.keys()
                          for s in probed)
    assert all(0 < s.grad_norm["lstm.weight_ih_l0"] < 10 for s in probed)
    assert not [f for f in doctor.report.findings if f.code == "MSD002" and "lstm." in f.message]
    assert all(s.update_ratio.keys() >= {"lstm.weight_ih_l0", "dense.weight"} for s in probed)

def test_a_gradient_read_from_the_decayed_one_is_the_gradient():
    """Step 1 starts from the same weights with and without decay: the same gradients, read two ways."""
    norms = {}
    for weight_decay in (0.0, 1e-2):
        doctor = Doctor(probe_every=2)
        _train_tagger(weight_decay, doctor)
        first = next(s for s in doctor.history.probed() if s.grad_norm)
        assert first.step == 1
        norms[weight_decay] = first.grad_norm
    assert norms[0.0].keys() == norms[1e-2].keys()
    for name, norm in norms[0.0].items():
        assert norms[1e-2][name] == pytest.approx(norm, rel=1e-4, abs=1e-7), name
