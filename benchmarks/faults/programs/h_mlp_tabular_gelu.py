"""Healthy: a GELU MLP with LayerNorm on tabular clusters, AdamWeightDecay(1e-3, weight_decay=0.01)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a GELU + LayerNorm MLP with decoupled weight decay", expect=(), arch="mlp",
                  data="tabular", category="healthy", fast=True)

X, Y = kit.tabular(1024, seed=0, noise=2.5)
XE, YE = kit.tabular(256, seed=1, noise=2.5)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 64)
        self.norm = nn.LayerNorm((64,))
        self.act = nn.GELU()
        self.fc2 = nn.Dense(64, 64)
        self.head = nn.Dense(64, 4)

    def construct(self, x):
        x = self.act(self.norm(self.fc1(x)))
        return self.head(self.act(self.fc2(x)))


def train(callbacks):
    net = Net()
    opt = nn.AdamWeightDecay(net.trainable_params(), learning_rate=1e-3, weight_decay=0.01)
    return kit.fit(net, kit.cross_entropy(), opt, kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
