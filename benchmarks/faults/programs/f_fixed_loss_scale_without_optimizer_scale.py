"""Fault: `FixedLossScaleManager(1024, drop_overflow_update=False)` without the matching optimizer `loss_scale=1024`."""
import mindspore as ms
from mindspore import nn
from mindspore.train import Model

from benchmarks.faults import kit

FAULT = kit.Fault("gradients scaled by 1024 (sens) and never unscaled: every update is 1024x too large",
                  expect={"MSD112"}, accept={"MSD201", "MSD202", "MSD203", "MSD204", "MSD206", "MSD208", "MSD211",
                                             "MSD212"},
                  arch="residual", data="images", category="optimizer")

X, Y = kit.images(512, seed=0, noise=1.0)


def train(callbacks):
    net = kit.ResNetTiny()
    loss = kit.cross_entropy()
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)  # loss_scale=1024 forgotten
    manager = ms.FixedLossScaleManager(1024.0, drop_overflow_update=False)
    return kit.fit(net, loss, optimizer, kit.dataset(X, Y), 2, callbacks,
                   model=Model(net, loss, optimizer, loss_scale_manager=manager))


def effect(outcome):
    assert outcome.nonfinite_step is not None or outcome.mean_loss(last=10) > outcome.mean_loss(first=10), (
        outcome.losses[:3], outcome.losses[-3:])
