"""What the benchmark programs share: the answer key, synthetic data, small networks, a training loop.

A program is a module in ``programs/`` with

- ``FAULT``: a :class:`Fault` (what is wrong, the codes the Doctor must report);
- ``train(callbacks) -> Outcome``: the user's training, plain MindSpore, with
  ``callbacks`` appended to its own (the runner passes the Doctor there):
  ``fit`` (``Model.train``) or ``fit_functional`` (a hand-written loop the
  Doctor watches through ``doctor.watch``);
- ``effect(outcome)``: asserts, on the run *without* the Doctor, that the fault
  really has its effect (or, for a healthy program, that it learns);
- optional ``doctor_options() -> dict``: Doctor options that must be built
  fresh (an ``eval_dataset``);
- optional ``build()`` and ``dataset()``: for ``Fault(sanity=True)``, the
  arguments of ``mindspore_doctor.sanity``.

Data is synthetic but learnable (class-dependent patterns plus noise), so a
healthy program really learns and a broken one visibly does not.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
from mindspore import nn, ops
from mindspore.train import Callback, Model

CATEGORIES = (
    "learning-rate", "data", "loss-wiring", "initialisation", "frozen-shared", "mode", "vanishing-exploding",
    "nan", "optimizer", "evaluation", "distributed", "healthy",
)


@dataclass(frozen=True)
class Fault:
    """The answer key of one program."""

    description: str
    """What the user got wrong, in one sentence ("keep_prob=0.1 where p=0.1 was meant")."""
    expect: frozenset[str]
    """Codes the Doctor must report at warning or error severity; empty for a healthy program."""
    arch: str
    """mlp, cnn, residual, lstm, transformer."""
    data: str
    """images, tabular, sequences, tokens, regression."""
    category: str
    """One of CATEGORIES."""
    accept: frozenset[str] = frozenset()
    """Secondary symptoms of the same fault: reporting them is not a false alarm."""
    onset_step: int = 1
    """The first step at which the fault can be seen (steps-to-detection counts from here)."""
    fast: bool = False
    """Part of the CI subset (runs in a few seconds)."""
    sanity: bool = False
    """Also run ``mindspore_doctor.sanity(build, dataset())`` and score its findings."""
    launcher: str = "python"
    """``python``, or ``msrun`` for the 2-rank data-parallel programs."""
    mode: str = "graph"
    """``graph`` or ``pynative``."""
    deterministic: bool = True
    """False when the program does not repeat bit for bit even without the Doctor (MindSpore's CPU Dropout;
    an out-of-range label that makes the loss read arbitrary memory): final weights are then not compared."""
    options: dict[str, Any] = field(default_factory=dict)
    """Doctor options this program needs beyond the defaults (kept rare: defaults are what users get)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "expect", frozenset(self.expect))
        object.__setattr__(self, "accept", frozenset(self.accept))
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}; one of {CATEGORIES}")
        if (self.category == "healthy") != (not self.expect):
            raise ValueError("a healthy program expects no codes, a faulty one at least one")

    @property
    def healthy(self) -> bool:
        return not self.expect


@dataclass
class Outcome:
    """What a training run produced, for ``effect`` to judge."""

    losses: list[float]
    """The training loss at every step."""
    network: nn.Cell
    metrics: dict[str, float] = field(default_factory=dict)
    """Evaluation metrics after training (``accuracy``, ``loss``, ``mae``) when an eval set was given."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def first_loss(self) -> float:
        return self.losses[0]

    def mean_loss(self, first: int | None = None, last: int | None = None) -> float:
        """Mean finite loss over the first or last N steps (NaN if none is finite)."""
        values = self.losses[:first] if first else self.losses[-last:] if last else self.losses
        finite = [v for v in values if math.isfinite(v)]
        return float(np.mean(finite)) if finite else math.nan

    @property
    def nonfinite_step(self) -> int | None:
        """The 1-based step of the first non-finite loss."""
        return next((i + 1 for i, v in enumerate(self.losses) if not math.isfinite(v)), None)


# --- synthetic data ----------------------------------------------------------------------


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def tabular(n: int = 512, features: int = 16, classes: int = 4, seed: int = 0,
            noise: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian class clusters: standardised features, int32 labels, balanced classes."""
    r = rng(seed)
    centers = rng(1234).standard_normal((classes, features)).astype(np.float32) * 1.5
    y = (np.arange(n) % classes).astype(np.int32)
    r.shuffle(y)
    x = centers[y] + noise * r.standard_normal((n, features)).astype(np.float32)
    x = (x - x.mean(0)) / x.std(0)
    return x.astype(np.float32), y


def regression(n: int = 512, features: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """y = a smooth function of x plus noise, shape (n, 1), float32; x standardised."""
    r = rng(seed)
    x = r.standard_normal((n, features)).astype(np.float32)
    w = rng(4321).standard_normal((features, 1)).astype(np.float32)
    y = np.tanh(x @ w) + 0.1 * r.standard_normal((n, 1)).astype(np.float32)
    return x, y.astype(np.float32)


def images(n: int = 512, classes: int = 4, channels: int = 1, size: int = 16, seed: int = 0,
           noise: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """NCHW images: each class a fixed random template plus noise, roughly zero-mean unit-variance."""
    r = rng(seed)
    templates = rng(99).standard_normal((classes, channels, size, size)).astype(np.float32)
    y = (np.arange(n) % classes).astype(np.int32)
    r.shuffle(y)
    x = templates[y] + noise * r.standard_normal((n, channels, size, size)).astype(np.float32)
    return (x / np.sqrt(1 + noise ** 2)).astype(np.float32), y


def sequences(n: int = 512, steps: int = 12, features: int = 8, classes: int = 4, seed: int = 0,
              noise: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """(n, steps, features) float sequences whose class sets a sinusoid's frequency and phase per feature."""
    r = rng(seed)
    y = (np.arange(n) % classes).astype(np.int32)
    r.shuffle(y)
    t = np.arange(steps, dtype=np.float32)[None, :, None]
    phase = rng(7).uniform(0, np.pi, (classes, 1, features)).astype(np.float32)
    x = np.sin(0.4 * (y[:, None, None] + 1) * t + phase[y]) + noise * r.standard_normal((n, steps, features))
    return x.astype(np.float32), y


def tokens(n: int = 512, steps: int = 16, vocab: int = 64, classes: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n, steps) int32 token ids; each class draws most tokens from its own slice of the vocabulary."""
    r = rng(seed)
    y = (np.arange(n) % classes).astype(np.int32)
    r.shuffle(y)
    span = vocab // classes
    own = y[:, None] * span + r.integers(0, span, (n, steps))
    noise = r.integers(0, vocab, (n, steps))
    x = np.where(r.random((n, steps)) < 0.7, own, noise)
    return x.astype(np.int32), y


def dataset(x: np.ndarray, y: np.ndarray, batch: int = 32, shuffle: bool = True, columns: tuple[str, str] = ("x", "label"),
            drop_remainder: bool = True) -> mds.Dataset:
    """A batched NumpySlicesDataset, shuffled with a fixed seed so runs repeat."""
    ds = mds.NumpySlicesDataset({columns[0]: x, columns[1]: y}, shuffle=shuffle)
    return ds.batch(batch, drop_remainder=drop_remainder)


# --- small networks, written the way a competent user writes them -----------------------------


class MLP(nn.Cell):
    def __init__(self, features: int = 16, classes: int = 4, hidden: int = 64, depth: int = 2,
                 activation: Callable[[], nn.Cell] = nn.ReLU):
        super().__init__()
        layers: list[nn.Cell] = []
        width = features
        for _ in range(depth):
            layers += [nn.Dense(width, hidden), activation()]
            width = hidden
        self.body = nn.SequentialCell(layers)
        self.head = nn.Dense(width, classes)

    def construct(self, x):
        return self.head(self.body(x))


class CNN(nn.Cell):
    """Two conv blocks and a dense head, for 1x16x16 images."""

    def __init__(self, classes: int = 4, channels: int = 1, width: int = 8, size: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, pad_mode="same")
        self.conv2 = nn.Conv2d(width, 2 * width, 3, pad_mode="same")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(2 * width * (size // 4) ** 2, classes)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        return self.fc(self.flatten(x))


class ResidualBlock(nn.Cell):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, pad_mode="same", has_bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, pad_mode="same", has_bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def construct(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class ResNetTiny(nn.Cell):
    """Stem + residual blocks + global pooling, for small NCHW images."""

    def __init__(self, classes: int = 4, channels: int = 1, width: int = 8, blocks: int = 2):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(channels, width, 3, pad_mode="same", has_bias=False),
                                      nn.BatchNorm2d(width), nn.ReLU())
        self.blocks = nn.SequentialCell([ResidualBlock(width) for _ in range(blocks)])
        self.pool = ops.ReduceMean(keep_dims=False)
        self.fc = nn.Dense(width, classes)

    def construct(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(self.pool(x, (2, 3)))


class LSTMClassifier(nn.Cell):
    """LSTM over (batch, steps, features); the last step's output feeds the head."""

    def __init__(self, features: int = 8, classes: int = 4, hidden: int = 32):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


class TransformerClassifier(nn.Cell):
    """Token embedding + a small nn.TransformerEncoder + mean pooling + head."""

    def __init__(self, vocab: int = 64, classes: int = 4, d_model: int = 32, heads: int = 4, layers: int = 1,
                 steps: int = 16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = ms.Parameter(ms.Tensor(rng(5).normal(0, 0.02, (1, steps, d_model)).astype(np.float32)),
                                     name="position")
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.fc = nn.Dense(d_model, classes)

    def construct(self, x):
        h = self.encoder(self.embed(x) + self.position)
        return self.fc(h.mean(axis=1))


def cross_entropy() -> nn.Cell:
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def momentum(net: nn.Cell, lr: float = 0.05) -> nn.Optimizer:
    return nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)


def adam(net: nn.Cell, lr: float = 1e-3) -> nn.Optimizer:
    return nn.Adam(net.trainable_params(), learning_rate=lr)


# --- training ------------------------------------------------------------------------------


class LossLog(Callback):
    """Records the loss of every step (the program's own bookkeeping, as a user would log it)."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_train_step_end(self, run_context: Any) -> None:
        out = run_context.original_args().net_outputs
        loss = out[0] if isinstance(out, (tuple, list)) else out
        self.losses.append(float(loss.asnumpy()))


class StepClock:
    """Two callbacks around the others: ``begin`` goes first in the list, ``end`` last; steps are timed between."""

    def __init__(self) -> None:
        clock = self
        self.step_seconds: list[float] = []
        self._started = 0.0

        class _Begin(Callback):
            def on_train_step_begin(self, run_context: Any) -> None:
                clock._started = time.perf_counter()

        class _End(Callback):
            def on_train_step_end(self, run_context: Any) -> None:
                clock.step_seconds.append(time.perf_counter() - clock._started)

        self.begin, self.end = _Begin(), _End()

    def wrap(self, callbacks: Iterable[Any]) -> list[Any]:
        return [self.begin, *callbacks, self.end]


def fit(net: nn.Cell, loss_fn: nn.Cell | None, optimizer: nn.Optimizer | None, train_ds: mds.Dataset, epochs: int,
        callbacks: Iterable[Any], eval_ds: mds.Dataset | None = None, metric: str = "accuracy",
        model: Model | None = None) -> Outcome:
    """``Model.train`` as a user calls it, logging the loss, then ``Model.eval`` on ``eval_ds`` if given.

    ``metric``: ``accuracy`` (classification) or ``mae`` (regression). Pass a
    ready ``model`` for a user-built train cell.
    """
    log = LossLog()
    metrics = {"accuracy": {"accuracy": nn.Accuracy(), "loss": nn.Loss()}, "mae": {"mae": nn.MAE(), "loss": nn.Loss()}}
    if model is None:
        model = Model(net, loss_fn, optimizer, metrics=metrics[metric] if eval_ds is not None else None)
    model.train(epochs, train_ds, callbacks=[log, *callbacks], dataset_sink_mode=False)
    result = model.eval(eval_ds, dataset_sink_mode=False) if eval_ds is not None else {}
    return Outcome(losses=log.losses, network=net, metrics={k: float(v) for k, v in result.items()})


def quick_start_step(net: nn.Cell, loss_fn: nn.Cell, optimizer: Any) -> Callable[[Any, Any], Any]:
    """The training step of MindSpore's quick start: ``value_and_grad`` over the optimizer's parameters, then
    ``optimizer(grads)``, compiled with ``@ms.jit``; returns the loss."""
    def forward(data, label):
        return loss_fn(net(data), label)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

    @ms.jit
    def train_step(data, label):
        loss, grads = grad_fn(data, label)
        optimizer(grads)
        return loss

    return train_step


def fit_functional(net: nn.Cell, loss_fn: nn.Cell, optimizer: Any, train_ds: mds.Dataset, epochs: int,
                   callbacks: Iterable[Any], eval_ds: mds.Dataset | None = None, metric: str = "accuracy") -> Outcome:
    """MindSpore's quick-start loop (``value_and_grad`` + a ``@ms.jit`` step, which runs compiled in PyNative
    too), logging the loss, then ``Model.eval`` on ``eval_ds`` if given. A ``Doctor`` among ``callbacks``
    watches the loop through ``doctor.watch``; the others (the runner's step clock) get their step hooks."""
    from mindspore_doctor import Doctor

    callbacks = list(callbacks)
    doctor = next((c for c in callbacks if isinstance(c, Doctor)), None)
    hooks = [c for c in callbacks if c is not doctor]

    train_step = quick_start_step(net, loss_fn, optimizer)
    losses: list[float] = []
    watching = doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=train_ds, epochs=epochs) if doctor \
        else contextlib.nullcontext()
    with watching as run:
        for _ in range(epochs):
            net.set_train()
            for data, label in train_ds.create_tuple_iterator():
                for hook in hooks:
                    hook.on_train_step_begin(None)
                loss = train_step(data, label)
                if run is not None:
                    run.step(loss, data, label)
                for hook in hooks:
                    hook.on_train_step_end(None)
                losses.append(float(loss.asnumpy()))
            if run is not None:
                run.epoch_end()
    metrics = {"accuracy": {"accuracy": nn.Accuracy(), "loss": nn.Loss()}, "mae": {"mae": nn.MAE(), "loss": nn.Loss()}}
    result = Model(net, loss_fn, metrics=metrics[metric]).eval(eval_ds, dataset_sink_mode=False) if eval_ds else {}
    return Outcome(losses=losses, network=net, metrics={k: float(v) for k, v in result.items()},
                   extra={"loop": "functional"})


def accuracy(net: nn.Cell, x: np.ndarray, y: np.ndarray, train_mode: bool = False) -> float:
    """Accuracy of ``net`` on arrays, in eval mode unless asked otherwise (restores the mode)."""
    was = net.training
    net.set_train(train_mode)
    try:
        logits = net(ms.Tensor(x)).asnumpy()
    finally:
        net.set_train(was)
    return float((logits.argmax(-1) == y).mean())
