"""Fault: heteroscedastic regression whose variance head has no softplus, so sqrt(variance) is NaN for negative outputs."""
import math

from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("Gaussian NLL with std = sqrt(raw Dense output): the variance head lacks softplus",
                  expect={"MSD201", "MSD206"}, arch="mlp", data="regression", category="nan", fast=True)

X, Y = kit.regression(512, seed=0)


class MeanVarianceNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(8, 32), nn.ReLU())
        self.mean = nn.Dense(32, 1)
        self.variance = nn.Dense(32, 1)

    def construct(self, x):
        h = self.body(x)
        return ops.concat((self.mean(h), self.variance(h)), axis=1)


class GaussianNLL(nn.Cell):
    def construct(self, out, y):
        mean, variance = out[:, :1], out[:, 1:]
        std = ops.sqrt(variance)
        return (ops.log(std) + 0.5 * ((y - mean) / std) ** 2 + 0.5 * math.log(2 * math.pi)).mean()


def train(callbacks):
    net = MeanVarianceNet()
    return kit.fit_functional(net, GaussianNLL(), kit.adam(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step == 1, outcome.losses[:3]
