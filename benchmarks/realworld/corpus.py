"""What the real-code corpus programs share beyond ``benchmarks.faults.kit``: the real data, the recipe's parts.

A corpus program is a module in ``programs/`` shaped like a fault program
(``FAULT`` with ``category="healthy"``, ``train(callbacks) -> Outcome``,
``effect(outcome)``), plus what the runner needs to lint it, to give the Doctor
its eval split and to time it:

- ``LIBRARY``: where the architecture comes from (``"mindcv 0.3.0"``, ``"mindspore.nn"``);
- ``COVERS``: the features it exercises (depthwise conv, SE block, LayerNorm, ...);
- ``recipe() -> Recipe``: a fresh network, loss, optimizer and ``Model``, built
  the way the library's own training recipe builds them;
- ``DATA``: a :class:`Data` (training set, eval split, ``lint``'s sample inputs).

Models too heavy to train on 2 CPU cores are linted only: ``lint_only.MODELS``.
Nothing is downloaded: the networks start from their own initialisation and the
real data comes from ``data/*.npz`` (scikit-learn's bundled sets, exported once).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
from mindspore import nn
from mindspore.train import Model

from benchmarks.faults import kit

DATA = Path(__file__).resolve().parent / "data"


@dataclass
class Recipe:
    """One fresh training setup: what ``lint`` checks and what ``Model.train`` runs."""

    network: nn.Cell
    loss_fn: nn.Cell | None
    optimizer: nn.Optimizer
    model: Model
    """The ``Model`` the recipe trains with (a library trainer may wrap its own train step)."""


@dataclass
class Data:
    """A program's arrays as it feeds them: the batched training set, the eval split if any, lint's sample."""

    x: np.ndarray
    y: np.ndarray
    epochs: int
    batch: int = 32
    x_eval: np.ndarray | None = None
    y_eval: np.ndarray | None = None

    @property
    def steps_per_epoch(self) -> int:
        return len(self.x) // self.batch

    def train_dataset(self) -> mds.Dataset:
        return kit.dataset(self.x, self.y, self.batch)

    def eval_dataset(self) -> mds.Dataset | None:
        if self.x_eval is None:
            return None
        return kit.dataset(self.x_eval, self.y_eval, self.batch, shuffle=False, drop_remainder=False)

    def sample_inputs(self) -> tuple[ms.Tensor, ms.Tensor]:
        return ms.Tensor(self.x[:self.batch]), ms.Tensor(self.y[:self.batch])


def recipe(network: nn.Cell, loss_fn: nn.Cell, optimizer: nn.Optimizer, metric: str = "accuracy") -> Recipe:
    """The plain ``Model(network, loss_fn, optimizer, metrics)`` recipe."""
    metrics = {"accuracy": {"accuracy": nn.Accuracy(), "loss": nn.Loss()}, "mae": {"mae": nn.MAE(), "loss": nn.Loss()},
               "loss": {"loss": nn.Loss()}}[metric]
    return Recipe(network, loss_fn, optimizer, Model(network, loss_fn, optimizer, metrics=metrics))


def fit(setup: Recipe, data: Data, callbacks: list[Any]) -> kit.Outcome:
    """``kit.fit`` on the recipe's own ``Model``: ``data.epochs`` over its training set, then its eval split."""
    return kit.fit(setup.network, setup.loss_fn, setup.optimizer, data.train_dataset(), data.epochs, callbacks,
                   eval_ds=data.eval_dataset(), model=setup.model)


# --- real data (scikit-learn's bundled sets, exported to data/*.npz) -----------------------------


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``x`` (float32) and ``y`` of ``data/<name>.npz``: digits, wine, breast_cancer, diabetes."""
    with np.load(DATA / f"{name}.npz") as saved:
        return saved["x"].astype(np.float32), saved["y"]


def split(x: np.ndarray, y: np.ndarray, eval_fraction: float = 0.2,
          seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A shuffled train/eval split with a fixed seed: ``x_train, y_train, x_eval, y_eval``."""
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(round(len(x) * (1 - eval_fraction)))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def standardize(train: np.ndarray, *others: np.ndarray) -> list[np.ndarray]:
    """Scale every array with the training set's per-feature mean and std (the usual StandardScaler)."""
    mean, std = train.mean(0), train.std(0)
    std = np.where(std > 0, std, 1.0)
    return [((a - mean) / std).astype(np.float32) for a in (train, *others)]


def digit_images(x: np.ndarray, size: int = 8, channels: int = 1) -> np.ndarray:
    """Digits' 0..16 pixel rows as NCHW images: scaled to [0, 1], upsampled (nearest) to ``size``, normalised
    with the set's mean and std (what ``Rescale`` + ``Normalize`` in a vision pipeline do)."""
    images = (x / 16.0).reshape(-1, 1, 8, 8)
    images = images.repeat(size // 8, axis=2).repeat(size // 8, axis=3)
    images = (images - 0.3) / 0.4  # about the set's mean and std of [0, 1] pixels
    return np.repeat(images, channels, axis=1).astype(np.float32)




# --- mindcv's training recipe (its train.py: create_loss, create_scheduler, create_optimizer, create_trainer) ---


def mindcv_recipe(network: nn.Cell, steps_per_epoch: int, epochs: int, opt: str = "momentum", lr: float = 0.1,
                  weight_decay: float = 1e-4, warmup_epochs: int = 1, label_smoothing: float = 0.1,
                  scheduler: str = "cosine_decay", nesterov: bool = False, ema: bool = False,
                  clip_grad: bool = False) -> Recipe:
    """What mindcv's ``train.py`` builds from a model config: label-smoothed CE, warm-up + cosine lr, the optimizer
    with weight decay filtered off norm and bias parameters, and ``create_trainer`` (its own train step when EMA or
    gradient clipping is on)."""
    from mindcv.loss import create_loss
    from mindcv.optim import create_optimizer
    from mindcv.scheduler import create_scheduler
    from mindcv.utils import create_trainer

    loss = create_loss(name="CE", label_smoothing=label_smoothing)
    schedule = create_scheduler(steps_per_epoch, scheduler=scheduler, lr=lr, min_lr=lr * 1e-3,
                                warmup_epochs=warmup_epochs, warmup_factor=0.01, decay_epochs=epochs - warmup_epochs,
                                num_epochs=epochs)
    optimizer = create_optimizer(network.trainable_params(), opt=opt, lr=schedule, weight_decay=weight_decay,
                                 momentum=0.9, nesterov=nesterov, weight_decay_filter="norm_and_bias")
    model = create_trainer(network, loss, optimizer, metrics={"accuracy": nn.Accuracy(), "loss": nn.Loss()},
                           amp_level="O0", amp_cast_list=None, loss_scale_type="fixed", loss_scale=1.0, ema=ema,
                           clip_grad=clip_grad)
    return Recipe(network, loss, optimizer, model)


def image_batch(n: int, channels: int, size: int, classes: int) -> tuple[ms.Tensor, ms.Tensor]:
    """A random normalised NCHW batch and labels: ``lint``'s sample inputs for an image classifier."""
    r = np.random.default_rng(0)
    return (ms.Tensor(r.standard_normal((n, channels, size, size)).astype(np.float32)),
            ms.Tensor((np.arange(n) % classes).astype(np.int32)))
