"""Fault: Poisson regression on raw counts with an exp link and SGD: exp(prediction) overflows to inf."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("rate = exp(net(x)) on counts in the hundreds, SGD lr=0.01, no clipping: exp overflows",
                  expect={"MSD201", "MSD206"}, accept={"MSD202", "MSD208", "MSD211"},
                  arch="mlp", data="regression", category="nan", fast=True)

X, T = kit.regression(512, seed=0)
COUNTS = kit.rng(2).poisson(200 * np.exp(T)).astype(np.float32)


class PoissonNLL(nn.Cell):
    def construct(self, log_rate, count):
        return (ops.exp(log_rate) - count * log_rate).mean()


def train(callbacks):
    net = kit.MLP(features=8, classes=1, hidden=32)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.01)
    return kit.fit(net, PoissonNLL(), opt, kit.dataset(X, COUNTS), 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses[:10]
