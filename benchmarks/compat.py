"""The compatibility matrix: every optimizer and train-cell shape users write, trained plainly and under the Doctor.

Each cell of the matrix is one shape x one execution mode (GRAPH, PyNative) x one loop style (``Model.train``, a
hand-written loop under ``doctor.watch``). A cell trains the same tiny network on the same fixed data twice with
the same seed, once without the Doctor and once with ``Doctor()`` at its defaults, and compares the final weights
bit for bit. ``scripts/compat_matrix.py`` renders the table into docs/compatibility.md; tests/test_compatibility.py
runs every cell as a test.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, mint, nn, ops
from mindspore.ops import composite as C
from mindspore.ops import functional as F

from mindspore_doctor import Doctor

SAMPLES, FEATURES, CLASSES, BATCH, EPOCHS = 64, 8, 3, 16, 2
MODES = {"GRAPH": ms.GRAPH_MODE, "PyNative": ms.PYNATIVE_MODE}
LOOPS = ("Model.train", "watch")


# --- optimizers users write -------------------------------------------------------------------------------


class ClipMomentum(nn.Momentum):
    """The RNN recipe: clip, then the built-in update through ``super()``."""

    def construct(self, gradients):
        gradients = ops.clip_by_global_norm(gradients, 1.0)
        return super().construct(gradients)


class PassThroughAdam(nn.Adam):
    """A subclass that only forwards to ``super()`` (a hook point left for later)."""

    def construct(self, gradients):
        return super().construct(gradients)


class NamedSuperAdam(nn.Adam):
    """The older spelling: ``super(Class, self)``."""

    def construct(self, gradients):
        gradients = ops.clip_by_global_norm(gradients, 5.0)
        return super(NamedSuperAdam, self).construct(gradients)


_sgd_step = C.MultitypeFuncGraph("compat_sgd_step")


@_sgd_step.register("Tensor", "Tensor", "Tensor")
def _sgd_step_one(lr, weight, gradient):
    return F.depend(True, F.assign_sub(weight, lr * gradient))


class ReplacedConstruct(nn.Momentum):
    """A built-in optimizer whose ``construct`` is replaced by plain SGD (its momentum is never used)."""

    def construct(self, gradients):
        lr = self.get_lr()
        return self.hyper_map(F.partial(_sgd_step, lr), self._parameters, gradients)


class ScratchSGD(nn.Optimizer):
    """An ``nn.Optimizer`` written from scratch."""

    def __init__(self, params, learning_rate=0.1):
        super().__init__(learning_rate, params)

    def construct(self, gradients):
        lr = self.get_lr()
        return self.hyper_map(F.partial(_sgd_step, lr), self._parameters, gradients)


class ScaledSGD(ScratchSGD):
    """An optimizer whose ``construct`` takes more than the gradients."""

    def construct(self, gradients, scale):
        lr = self.get_lr() * scale
        return self.hyper_map(F.partial(_sgd_step, lr), self._parameters, gradients)


# --- train cells users write --------------------------------------------------------------------------------


class ClippingTrainStep(nn.TrainOneStepCell):
    """A ``TrainOneStepCell`` subclass with its own ``construct``."""

    def construct(self, *inputs):
        loss, grads = self.grad_fn_step(*inputs)
        grads = ops.clip_by_global_norm(grads, 1.0)
        self.optimizer(grads)
        return loss

    def grad_fn_step(self, *inputs):
        loss = self.network(*inputs)
        sens = F.fill(loss.dtype, loss.shape, 1.0)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        return loss, grads


class ExtraArgumentTrainStep(nn.TrainOneStepCell):
    """Passes the optimizer a second argument (``ScaledSGD``)."""

    def __init__(self, network, optimizer):
        super().__init__(network, optimizer)
        self.scale = Tensor(0.5, ms.float32)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.grad(self.network, self.weights)(*inputs, F.fill(loss.dtype, loss.shape, 1.0))
        self.optimizer(grads, self.scale)
        return loss


_mean_of = C.MultitypeFuncGraph("compat_mean_of")


@_mean_of.register("Number", "Tensor")
def _mean_of_one(count, total):
    return total / count


class AccumulatingTrainStep(nn.Cell):
    """Gradient accumulation: sums the gradients of ``every`` steps, then applies their mean."""

    def __init__(self, network, optimizer, every=2):
        super().__init__(auto_prefix=False)
        self.network, self.optimizer, self.every = network, optimizer, every
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True)
        self.sums = self.weights.clone(prefix="accumulated", init="zeros")
        self.count = Parameter(Tensor(0, ms.int32), name="accumulated_count", requires_grad=False)
        self.hyper_map = C.HyperMap()

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.grad(self.network, self.weights)(*inputs)
        self.hyper_map(F.assign_add, self.sums, grads)
        ops.assign_add(self.count, Tensor(1, ms.int32))
        if self.count % self.every == 0:
            mean = self.hyper_map(F.partial(_mean_of, float(self.every)), self.sums)
            self.optimizer(mean)
            self.hyper_map(F.assign, self.sums, self.hyper_map(ops.zeros_like, self.sums))
        return loss


class EmaTrainStep(nn.TrainOneStepCell):
    """A train step that keeps an exponential moving average of the weights after each update."""

    def __init__(self, network, optimizer, decay=0.9):
        super().__init__(network, optimizer)
        self.ema = self.weights.clone(prefix="ema")
        self.decay = decay

    def construct(self, *inputs):
        loss = super().construct(*inputs)
        for ema, weight in zip(self.ema, self.weights):
            ops.assign(ema, ema * self.decay + weight * (1 - self.decay))
        return loss


class PortableLossScaleCell(nn.TrainOneStepWithLossScaleCell):
    """MindSpore's loss-scale cell reads an Ascend status register, which CPU lacks; check grads with isfinite."""

    def get_overflow_status(self, status, compute_output):
        overflow = ops.zeros((), ms.bool_)
        for grad in compute_output:
            overflow = ops.logical_or(overflow, ops.logical_not(ops.isfinite(grad).all()))
        return overflow


# --- the shapes ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    what: str
    optimizer: Callable[[list[Parameter]], nn.Cell]
    train_step: Callable[[nn.Cell, nn.Cell], nn.Cell] | None = None
    """Builds the train cell from (network with loss, optimizer); None: ``nn.TrainOneStepCell`` / a functional
    ``value_and_grad`` step."""
    model_step: Callable[[nn.Cell, nn.Cell], nn.Cell] | None = None
    """The train cell for ``Model.train`` only (the loop then uses the functional step)."""
    half: bool = False
    """Dense layers compute in float16 (mixed precision: what loss scaling is for)."""
    pynative: str | None = None
    """Why the plain program cannot train in PyNative (a MindSpore limitation), when it cannot."""


def _loss_scale_step(net_with_loss: nn.Cell, optimizer: nn.Cell) -> nn.Cell:
    return PortableLossScaleCell(net_with_loss, optimizer, scale_sense=nn.DynamicLossScaleUpdateCell(2.0 ** 12, 2, 100))


SHAPES: tuple[Shape, ...] = (
    Shape("momentum", "built-in `nn.Momentum`", lambda p: nn.Momentum(p, 0.1, 0.9)),
    Shape("adam", "built-in `nn.Adam` (optimizer state writes)", lambda p: nn.Adam(p, 1e-2)),
    Shape("super-extra-work", "subclass: clips, then `super().construct(grads)`", lambda p: ClipMomentum(p, 0.1, 0.9)),
    Shape("super-only", "subclass: only `return super().construct(grads)`", lambda p: PassThroughAdam(p, 1e-2)),
    Shape("super-named", "subclass: `super(Class, self).construct(grads)`", lambda p: NamedSuperAdam(p, 1e-2)),
    Shape("replaced-construct", "subclass of `nn.Momentum` replacing `construct`",
          lambda p: ReplacedConstruct(p, 0.1, 0.9)),
    Shape("scratch", "`nn.Optimizer` written from scratch", lambda p: ScratchSGD(p)),
    Shape("extra-argument", "`construct(self, gradients, scale)`, called with two arguments", lambda p: ScaledSGD(p),
          train_step=ExtraArgumentTrainStep),
    Shape("mint-adam", "`mint.optim.Adam`, functional step in the loop; its own `TrainOneStepCell` for `Model.train`",
          lambda p: mint.optim.Adam(p, lr=1e-2), model_step=nn.TrainOneStepCell,
          pynative="mint.optim.Adam does not update the weights in eager PyNative on CPU (MindSpore 2.10)"),
    Shape("mint-sgd", "`mint.optim.SGD` (in a `TrainOneStepCell`: `Model` takes only `nn` optimizers)",
          lambda p: mint.optim.SGD(p, lr=0.1), train_step=nn.TrainOneStepCell,
          pynative="mint.optim.SGD does not update the weights in eager PyNative on CPU (MindSpore 2.10)"),
    Shape("train-step-subclass", "`TrainOneStepCell` subclass with its own `construct` (clipping)",
          lambda p: nn.Momentum(p, 0.1, 0.9), train_step=ClippingTrainStep),
    Shape("accumulation", "gradient accumulation cell (optimizer every 2nd step, under an `if`)",
          lambda p: nn.Momentum(p, 0.1, 0.9), train_step=AccumulatingTrainStep),
    Shape("ema", "EMA train step (`super().construct`, then the moving average)", lambda p: nn.Adam(p, 1e-2),
          train_step=EmaTrainStep),
    Shape("loss-scale", "float16 Dense layers, `TrainOneStepWithLossScaleCell` with `DynamicLossScaleUpdateCell` "
          "(its CPU overflow check)", lambda p: nn.Momentum(p, 0.1, 0.9), train_step=_loss_scale_step, half=True),
)


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(7)
    x = rng.randn(SAMPLES, FEATURES).astype(np.float32)
    y = (np.argmax(x[:, :CLASSES], axis=1)).astype(np.int32)
    return x, y


def _dataset() -> Any:
    import mindspore.dataset as ds

    x, y = _data()
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def _build(shape: Shape) -> tuple[nn.Cell, nn.Cell, nn.Cell]:
    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(FEATURES, 32), nn.ReLU(), nn.Dense(32, 32), nn.Tanh(), nn.Dense(32, CLASSES))
    if shape.half:
        for cell in net.cells():
            if isinstance(cell, nn.Dense):
                cell.to_float(ms.float16)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, loss_fn, shape.optimizer(net.trainable_params())


def _train_model(shape: Shape, doctor: Doctor | None) -> tuple[nn.Cell, list[float]]:
    from mindspore.train import Callback, Model

    net, loss_fn, optimizer = _build(shape)
    losses: list[float] = []

    class Losses(Callback):
        def on_train_step_end(self, run_context: Any) -> None:
            out = run_context.original_args().net_outputs
            losses.append(float((out[0] if isinstance(out, (tuple, list)) else out).asnumpy()))

    train_step = shape.train_step or shape.model_step
    if train_step is None:
        model = Model(net, loss_fn, optimizer)
    else:
        model = Model(train_step(nn.WithLossCell(net, loss_fn), optimizer))
    model.train(EPOCHS, _dataset(), callbacks=[Losses()] + ([doctor] if doctor else []), dataset_sink_mode=False)
    return net, losses


def _train_loop(shape: Shape, doctor: Doctor | None, mode: str) -> tuple[nn.Cell, list[float]]:
    net, loss_fn, optimizer = _build(shape)
    net.set_train()
    if shape.train_step is not None:
        step = shape.train_step(nn.WithLossCell(net, loss_fn), optimizer)
        watched: Any = step
    else:
        def forward(x, y):
            return loss_fn(net(x), y)

        grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

        def step(x, y):
            loss, grads = grad_fn(x, y)
            optimizer(grads)
            return loss

        if mode == "GRAPH":  # a hand-written GRAPH-mode loop compiles its step; the PyNative one runs it eagerly
            step = ms.jit(step)
        watched = net
    losses: list[float] = []
    dataset = _dataset()

    def epochs(run: Any = None) -> None:
        for _ in range(EPOCHS):
            for x, y in dataset.create_tuple_iterator():
                out = step(x, y)
                losses.append(float((out[0] if isinstance(out, (tuple, list)) else out).asnumpy()))
                if run is not None:
                    run.step(out, x, y)
            if run is not None:
                run.epoch_end()

    if doctor is None:
        epochs()
    else:
        with doctor.watch(watched, optimizer, loss_fn=loss_fn, train_dataset=dataset, epochs=EPOCHS) as run:
            epochs(run)
    return net, losses


def _train(shape: Shape, mode: str, loop: str, doctor: Doctor | None) -> tuple[list[np.ndarray], list[float]]:
    ms.set_context(mode=MODES[mode])
    net, losses = _train_model(shape, doctor) if loop == "Model.train" else _train_loop(shape, doctor, mode)
    return [p.asnumpy().copy() for p in net.trainable_params()], losses


@dataclasses.dataclass
class CellResult:
    shape: str
    mode: str
    loop: str
    trains_plainly: bool
    trains_with_doctor: bool
    identical: bool | None
    """Final weights bitwise identical with and without the Doctor; None when the plain run does not repeat."""
    repeats: bool | None
    warnings: list[str]
    probed: str
    error: str | None = None
    skipped: str | None = None


def _learned(weights_before: list[np.ndarray], weights: list[np.ndarray], losses: list[float]) -> bool:
    changed = any(not np.array_equal(a, b) for a, b in zip(weights_before, weights))
    return changed and bool(losses) and np.isfinite(losses).all()


def _probed(doctor: Doctor) -> str:
    history, report = doctor.history, doctor.report
    probes = history.probed()
    gradients = any(s.grad_norm for s in probes)
    activations = any(s.activations for s in probes)
    parts = [what for what, seen in (("gradients and updates", gradients), ("activations", activations)) if seen]
    skipped = [f.message for f in report.findings if f.code == "MSD002" and f.location.get("check") == "training-probes"]
    text = " + ".join(parts) or "nothing"
    return text + (f" (MSD002: {skipped[0]})" if skipped else "")


def run_cell(shape: Shape, mode: str, loop: str, repeat: bool = False) -> CellResult:
    """Train one cell of the matrix plainly (twice with ``repeat``) and under ``Doctor()``."""
    if mode == "PyNative" and shape.pynative:
        return CellResult(shape.name, mode, loop, False, False, None, None, [], "-", skipped=shape.pynative)
    ms.set_context(mode=MODES[mode])
    init = [p.asnumpy().copy() for p in _build(shape)[0].trainable_params()]
    plain, losses = _train(shape, mode, loop, None)
    repeats = None
    if repeat:
        again, _ = _train(shape, mode, loop, None)
        repeats = all(np.array_equal(a, b) for a, b in zip(plain, again))
    doctor = Doctor()
    try:
        probed, _ = _train(shape, mode, loop, doctor)
    except Exception as exc:  # noqa: BLE001 - the matrix records it; the test fails on it
        return CellResult(shape.name, mode, loop, _learned(init, plain, losses), False, None, repeats, [], "-",
                          error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    identical = all(np.array_equal(a, b) for a, b in zip(plain, probed))
    warnings = sorted({f.code for f in doctor.report.findings if f.severity.rank >= 1})
    return CellResult(shape.name, mode, loop, _learned(init, plain, losses), True,
                      identical if repeats is not False else None, repeats, warnings, _probed(doctor))
