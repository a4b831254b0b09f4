"""Fault: full-batch least-absolute-error regression with SGD(lr=2.0): each step overshoots the minimum and swings back."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("lr=2.0 on a full-batch L1 linear fit (lr scaled up 'for the big batch'): the loss 2-cycles",
                  expect={"MSD204"}, accept={"MSD111", "MSD203", "MSD211"},  # 211: each step moves w by > |w|
                  arch="mlp", data="regression", category="learning-rate", fast=True)

X, Y = kit.regression(256, seed=0)


def train(callbacks):
    net = nn.Dense(8, 1)
    opt = nn.SGD(net.trainable_params(), learning_rate=2.0)
    return kit.fit_functional(net, nn.L1Loss(), opt, kit.dataset(X, Y, batch=256), 40, callbacks)


def effect(outcome):
    # the healthy twin (lr=0.1) ends near 0.3 with tiny steps; here the last losses alternate by > 25 % of the start
    swings = [abs(b - a) for a, b in zip(outcome.losses[-20:], outcome.losses[-19:])]
    assert sorted(swings)[10] > 0.25 * outcome.first_loss, (outcome.first_loss, outcome.losses[-6:])
