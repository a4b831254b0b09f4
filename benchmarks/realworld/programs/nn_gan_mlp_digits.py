"""Digits GAN, fully connected: a generator (latent 16 -> 128 -> 256 -> 64 pixels, BatchNorm, LeakyReLU, Tanh) and
a discriminator (64 -> 256 -> 128 -> 1 logit, LeakyReLU) trained against each other in a hand-written loop.

Follows MindSpore's tutorial "GAN for Image Generation"
(https://www.mindspore.cn/tutorials/en/master/generative/gan.html): its networks scaled to 8x8 digits, real images
in the Tanh's [-1, 1], Adam(2e-4, beta1=0.5) for each player, binary cross-entropy (on logits), the discriminator's
``value_and_grad`` step then the generator's, in one ``@ms.jit`` function (``benchmarks/realworld/gan.py``).
"""
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import gan

FAULT = kit.Fault("healthy: an MLP GAN on the real digits scaled to [-1, 1]", expect=(), arch="gan",
                  data="digits images (real, no labels)", category="healthy")
LIBRARY = "mindspore.nn (MindSpore tutorial: GAN for Image Generation)"
COVERS = ("two models, two optimizers (doctor.watch({...}))", "adversarial losses", "BatchNorm1d", "LeakyReLU",
          "Tanh output", "hand-written loop")
LATENT, EPOCHS = 16, 25


def generator() -> nn.Cell:
    return nn.SequentialCell(nn.Dense(LATENT, 128), nn.BatchNorm1d(128), nn.LeakyReLU(0.2),
                             nn.Dense(128, 256), nn.BatchNorm1d(256), nn.LeakyReLU(0.2),
                             nn.Dense(256, 64), nn.Tanh())


def discriminator() -> nn.Cell:
    return nn.SequentialCell(nn.Dense(64, 256), nn.LeakyReLU(0.2), nn.Dense(256, 128), nn.LeakyReLU(0.2),
                             nn.Dense(128, 1))


def lint_targets():
    return gan.lint_targets(generator(), discriminator(), gan.digits(), LATENT)


def train(callbacks):
    return gan.train_gan(generator(), discriminator(), gan.digits(), EPOCHS, callbacks, latent=LATENT)


def effect(outcome):
    gan.learns(outcome)
