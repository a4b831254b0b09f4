"""Fault: a piecewise-constant schedule whose last stage reads 5e-1 where 5e-4 was meant: the lr jumps 100x at step 81."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("piecewise_constant_lr values [0.05, 0.005, 0.5]: the third stage was meant to be 5e-4",
                  expect={"MSD202"}, accept={"MSD201", "MSD203", "MSD204", "MSD206", "MSD208", "MSD211", "MSD212"},
                  arch="mlp", data="regression", category="learning-rate", onset_step=81)

X, Y = kit.regression(512, seed=0)


def train(callbacks):
    net = kit.MLP(features=8, classes=1, hidden=32)
    lr = nn.piecewise_constant_lr([40, 80, 128], [0.05, 0.005, 0.5])
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)
    return kit.fit_functional(net, nn.MSELoss(), opt, kit.dataset(X, Y), 8, callbacks)


def effect(outcome):
    after = outcome.losses[100:128]
    calm = sum(outcome.losses[60:80]) / 20
    assert outcome.nonfinite_step is not None or sum(after) / len(after) > 3 * calm, (calm, after[-3:])
