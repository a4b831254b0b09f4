"""Fault: mint.optim.SGD(..., momentum=True), momentum written as a switch (like nesterov=True); MindSpore takes True
as a momentum of 1.0, so the velocity never decays and the loss swings back up."""
from mindspore import mint

from benchmarks.faults import kit

FAULT = kit.Fault("mint.optim.SGD(momentum=True) where momentum=0.9 was meant: True is a momentum of 1.0",
                  expect={"MSD117"},
                  accept={"MSD201", "MSD202", "MSD204", "MSD206", "MSD208", "MSD211", "MSD216"},
                  arch="mlp", data="tabular", category="optimizer")

X, Y = kit.tabular(512, seed=0, noise=1.5)
XE, YE = kit.tabular(256, seed=1, noise=1.5)


def train(callbacks):
    net = kit.MLP()
    optimizer = mint.optim.SGD(net.trainable_params(), lr=0.05, momentum=True)   # meant momentum=0.9
    return kit.fit_functional(net, kit.cross_entropy(), optimizer, kit.dataset(X, Y), 4, callbacks,
                              eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the momentum=0.9 twin's last 8 losses average 0.03; here 0.55, with spikes to 2.5 after reaching 0, and the
    # eval loss is inf
    assert outcome.nonfinite_step is not None or outcome.mean_loss(last=8) > 0.2, outcome.losses[-8:]
