"""Fault: linear regression with MSELoss(reduction="sum") and an lr tuned for "mean": the step is 32x too large."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("MSELoss(reduction='sum') over batches of 32 with lr=0.03 meant for a mean loss",
                  expect={"MSD208"}, accept={"MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD211"},
                  arch="mlp", data="regression", category="vanishing-exploding", fast=True)

X, Y = kit.regression(512, seed=0)


def train(callbacks):
    net = nn.Dense(8, 1)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.03)
    return kit.fit_functional(net, nn.MSELoss(reduction="sum"), opt, kit.dataset(X, Y), 4, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None or outcome.mean_loss(last=5) > 100 * outcome.first_loss, outcome.losses[::16]
