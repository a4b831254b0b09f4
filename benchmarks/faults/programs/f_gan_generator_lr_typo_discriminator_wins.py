"""Fault: a GAN whose generator's Adam got learning_rate=2e-7 (2e-4 meant, a digit slipped): the generator barely
moves, the discriminator wins outright (its loss falls to ~0, the generator's climbs), and nothing is learned."""
from benchmarks.faults import kit
from benchmarks.realworld import gan
from benchmarks.realworld.programs import nn_gan_mlp_digits as healthy

FAULT = kit.Fault("the generator's Adam at lr 2e-7 (2e-4 meant): the discriminator overpowers it", expect={"MSD217"},
                  accept={"MSD208", "MSD210"}, arch="gan", data="digits images", category="learning-rate")
EPOCHS = 15


def train(callbacks):
    return gan.train_gan(healthy.generator(), healthy.discriminator(), gan.digits(), EPOCHS, callbacks,
                         latent=healthy.LATENT, lr_g=2e-7)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.05, outcome.mean_loss(last=20)  # the discriminator's loss
    assert outcome.extra["discriminator_accuracy"] > 0.95, outcome.extra["discriminator_accuracy"]
