"""Digits DCGAN: a convolutional generator (latent 16 -> 32x2x2 -> transposed convolutions -> 1x8x8, BatchNorm, ReLU,
Tanh) and discriminator (strided convolutions, BatchNorm, LeakyReLU -> 1 logit) trained against each other.

Follows MindSpore's tutorial "DCGAN for Image Generation"
(https://www.mindspore.cn/tutorials/en/master/generative/dcgan.html): its layer pattern (Conv2dTranspose k4 s2 +
BatchNorm2d + ReLU, a Tanh output; Conv2d k4 s2 + BatchNorm2d + LeakyReLU(0.2) in the discriminator, none on its
first layer), real images in [-1, 1], Adam(2e-4, beta1=0.5) for each player and binary cross-entropy, scaled to 8x8
digits; the loop of ``benchmarks/realworld/gan.py``.
"""
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.realworld import gan

FAULT = kit.Fault("healthy: a DCGAN on the real digits (8x8) scaled to [-1, 1]", expect=(), arch="gan",
                  data="digits images (real, no labels)", category="healthy")
LIBRARY = "mindspore.nn (MindSpore tutorial: DCGAN for Image Generation)"
COVERS = ("two models, two optimizers (doctor.watch({...}))", "adversarial losses", "Conv2dTranspose",
          "BatchNorm2d", "ReLU and LeakyReLU", "Tanh output", "hand-written loop")
LATENT, EPOCHS = 16, 30


class Generator(nn.Cell):
    def __init__(self, latent: int = LATENT, width: int = 32) -> None:
        super().__init__()
        self.width = width
        self.project = nn.Dense(latent, width * 2 * 2)
        self.up = nn.SequentialCell(
            nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2dTranspose(width, width // 2, 4, 2, pad_mode="pad", padding=1),  # 2x2 -> 4x4
            nn.BatchNorm2d(width // 2), nn.ReLU(),
            nn.Conv2dTranspose(width // 2, 1, 4, 2, pad_mode="pad", padding=1),      # 4x4 -> 8x8
            nn.Tanh())

    def construct(self, z):
        return self.up(self.project(z).reshape(-1, self.width, 2, 2))


class Discriminator(nn.Cell):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.features = nn.SequentialCell(
            nn.Conv2d(1, width // 2, 4, 2, pad_mode="pad", padding=1), nn.LeakyReLU(0.2),           # 8 -> 4
            nn.Conv2d(width // 2, width, 4, 2, pad_mode="pad", padding=1), nn.BatchNorm2d(width), nn.LeakyReLU(0.2))
        self.classify = nn.Dense(width * 2 * 2, 1)

    def construct(self, x):
        return self.classify(self.features(x).reshape(x.shape[0], -1))


def lint_targets():
    return gan.lint_targets(Generator(), Discriminator(), gan.digits(images=True), LATENT)


def train(callbacks):
    return gan.train_gan(Generator(), Discriminator(), gan.digits(images=True), EPOCHS, callbacks, latent=LATENT)


def effect(outcome):
    gan.learns(outcome)
