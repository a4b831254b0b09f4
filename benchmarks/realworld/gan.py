"""The GAN training loop of MindSpore's tutorials, shared by the GAN corpus and fault programs.

It follows "GAN for Image Generation" and "DCGAN for Image Generation"
(https://www.mindspore.cn/tutorials/en/master/generative/gan.html, .../generative/dcgan.html): a generator and a
discriminator, one Adam each (lr 2e-4, beta1 0.5), binary cross-entropy, and a step built from two
``ms.value_and_grad`` functions, each compiled with ``@ms.jit`` — the discriminator on real (label 1) and generated
(label 0) samples, then the generator through the discriminator (label 1, the non-saturating loss). The latent codes
are drawn on the host from a seeded generator, so a run repeats bit for bit and the Doctor's run can be compared
with the plain one.

A ``Doctor`` among the callbacks watches the loop through one ``doctor.watch({"generator": ..., "discriminator":
...})``; the runner's step clock gets its hooks around each step.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable

import mindspore as ms
import mindspore.dataset as mds
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit
from benchmarks.realworld import corpus


def digits(low: float = -1.0, high: float = 1.0, images: bool = False) -> np.ndarray:
    """The real digits (0..16 pixels) scaled to [low, high]: (N, 64) vectors or (N, 1, 8, 8) images."""
    x, _ = corpus.load("digits")
    x = (low + (high - low) * x / 16.0).astype(np.float32)
    return x.reshape(-1, 1, 8, 8) if images else x


class Players(nn.Cell):
    """The two networks in one cell: what the runner compares between the plain and the Doctor's run."""

    def __init__(self, generator: nn.Cell, discriminator: nn.Cell) -> None:
        super().__init__()
        self.generator, self.discriminator = generator, discriminator


def train_gan(generator: nn.Cell, discriminator: nn.Cell, real: np.ndarray, epochs: int, callbacks: Iterable[Any],
              latent: int = 16, batch: int = 64, lr_g: float = 2e-4, lr_d: float = 2e-4,
              d_loss_fn: Callable[[Any, Any], Any] | None = None,
              names: tuple[str, str] = ("generator", "discriminator")) -> kit.Outcome:
    """The tutorial's loop on ``real``; ``Outcome.losses`` are the discriminator's, ``extra`` has the generator's
    losses and what ``learns`` judges (the discriminator's accuracy, generated and real statistics). ``names``: the
    generator's and the discriminator's names in the Doctor's watch."""
    from mindspore_doctor import Doctor

    generator.update_parameters_name("generator.")  # as the tutorials do: one graph holds both networks' weights
    discriminator.update_parameters_name("discriminator.")
    callbacks = list(callbacks)
    doctor = next((c for c in callbacks if isinstance(c, Doctor)), None)
    hooks = [c for c in callbacks if c is not doctor]
    loss_fn = nn.BCEWithLogitsLoss()
    opt_g = nn.Adam(generator.trainable_params(), learning_rate=lr_g, beta1=0.5)
    opt_d = nn.Adam(discriminator.trainable_params(), learning_rate=lr_d, beta1=0.5)

    def discriminator_forward(real_data, noise):
        fake = ops.stop_gradient(generator(noise))
        real_out, fake_out = discriminator(real_data), discriminator(fake)
        return loss_fn(real_out, ops.ones_like(real_out)) + loss_fn(fake_out, ops.zeros_like(fake_out))

    def generator_forward(noise):
        fake_out = discriminator(generator(noise))
        return loss_fn(fake_out, ops.ones_like(fake_out))

    grad_d = ms.value_and_grad(d_loss_fn or discriminator_forward, None, opt_d.parameters)
    grad_g = ms.value_and_grad(generator_forward, None, opt_g.parameters)

    @ms.jit
    def discriminator_step(real_data, noise):
        loss_d, grads_d = grad_d(real_data, noise)
        opt_d(grads_d)
        return loss_d

    @ms.jit
    def generator_step(noise):  # a graph of its own: two optimizers in one graph clash on `global_step`
        loss_g, grads_g = grad_g(noise)
        opt_g(grads_g)
        return loss_g

    def train_step(real_data, noise):
        return discriminator_step(real_data, noise), generator_step(noise)

    dataset = mds.NumpySlicesDataset({"image": real}, shuffle=True).batch(batch, drop_remainder=True)
    codes = np.random.default_rng(0)
    probe_noise = ms.Tensor(np.random.default_rng(1).standard_normal((256, latent)).astype(np.float32))
    start = _generated(generator, probe_noise)
    d_losses: list[float] = []
    g_losses: list[float] = []
    g_name, d_name = names
    watching = doctor.watch({g_name: (generator, opt_g), d_name: (discriminator, opt_d)},
                            loss_fn=loss_fn, train_dataset=dataset, epochs=epochs) if doctor \
        else contextlib.nullcontext()
    with watching as run:
        for _ in range(epochs):
            generator.set_train()
            discriminator.set_train()
            for (data,) in dataset.create_tuple_iterator():
                noise = ms.Tensor(codes.standard_normal((batch, latent)).astype(np.float32))
                for hook in hooks:
                    hook.on_train_step_begin(None)
                loss_d, loss_g = train_step(data, noise)
                if run is not None:
                    run.step({d_name: loss_d, g_name: loss_g}, data)
                for hook in hooks:
                    hook.on_train_step_end(None)
                d_losses.append(float(loss_d.asnumpy()))
                g_losses.append(float(loss_g.asnumpy()))
            if run is not None:
                run.epoch_end()
    end = _generated(generator, probe_noise)
    accuracy = _discriminator_accuracy(discriminator, real[:256], end)
    return kit.Outcome(losses=d_losses, network=Players(generator, discriminator),
                       extra={"generator_losses": g_losses, "start": start, "end": end, "real": real,
                              "discriminator_accuracy": accuracy, "loop": "gan"})


def lint_targets(generator: nn.Cell, discriminator: nn.Cell, real: np.ndarray, latent: int) -> list[tuple]:
    """What the corpus runner lints: each network with its optimizer, the discriminator with its loss and a real
    batch (label 1), the generator with a batch of latent codes (its loss is the discriminator's verdict)."""
    noise = ms.Tensor(np.random.default_rng(0).standard_normal((64, latent)).astype(np.float32))
    labels = ms.Tensor(np.ones((64, 1), np.float32))
    return [(generator, None, nn.Adam(generator.trainable_params(), 2e-4, beta1=0.5), (noise,)),
            (discriminator, nn.BCEWithLogitsLoss(), nn.Adam(discriminator.trainable_params(), 2e-4, beta1=0.5),
             (ms.Tensor(real[:64]), labels))]


def _generated(generator: nn.Cell, noise: ms.Tensor) -> np.ndarray:
    was = generator.training
    generator.set_train(False)
    try:
        return generator(noise).asnumpy().reshape(noise.shape[0], -1)
    finally:
        generator.set_train(was)


def _discriminator_accuracy(discriminator: nn.Cell, real: np.ndarray, fake: np.ndarray) -> float:
    was = discriminator.training
    discriminator.set_train(False)
    try:
        shape = (-1, *real.shape[1:])
        real_out = discriminator(ms.Tensor(real)).asnumpy()
        fake_out = discriminator(ms.Tensor(fake.reshape(shape).astype(np.float32))).asnumpy()
    finally:
        discriminator.set_train(was)
    return float(((real_out > 0).mean() + (fake_out <= 0).mean()) / 2)


def distance_to_data(generated: np.ndarray, real: np.ndarray) -> float:
    """How far the generated samples are from the data: the distance between their mean images plus between their
    per-pixel standard deviations (both are what a generator must learn first)."""
    real = real.reshape(real.shape[0], -1)
    return float(np.abs(generated.mean(0) - real.mean(0)).mean() + np.abs(generated.std(0) - real.std(0)).mean())


def learns(outcome: kit.Outcome) -> None:
    """A healthy GAN: the generator's samples moved most of the way toward the data's statistics, and the
    discriminator still cannot tell them apart for sure (its accuracy stays away from 1)."""
    extra = outcome.extra
    before, after = (distance_to_data(extra[k], extra["real"]) for k in ("start", "end"))
    assert after < 0.5 * before, (before, after)
    assert extra["discriminator_accuracy"] < 0.95, extra["discriminator_accuracy"]
