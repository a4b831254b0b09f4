"""Fault: a per-step cosine schedule from `nn.cosine_decay_lr` with max_lr=50 (a 0.05 with the decimal point lost)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nn.cosine_decay_lr(0.0, 50.0, ...) list given to Momentum: the first steps run at lr ~50",
                  expect={"MSD111"}, accept={"MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD208", "MSD211",
                                             "MSD212", "MSD216"},
                  arch="mlp", data="tabular", category="learning-rate", fast=True)

X, Y = kit.tabular(512, seed=0)
EPOCHS, STEPS = 2, 16


def train(callbacks):
    net = kit.MLP()
    schedule = nn.cosine_decay_lr(0.0, 50.0, EPOCHS * STEPS, STEPS, EPOCHS)
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=schedule, momentum=0.9)
    return kit.fit(net, kit.cross_entropy(), optimizer, kit.dataset(X, Y), EPOCHS, callbacks)


def effect(outcome):
    # the max_lr=0.05 twin ends below 0.01; here the loss explodes or goes non-finite
    assert outcome.nonfinite_step is not None or outcome.mean_loss(last=5) > 5.0, outcome.losses[-5:]
