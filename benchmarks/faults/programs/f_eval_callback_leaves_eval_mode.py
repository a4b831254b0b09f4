"""Fault (PyNative): a validation callback calls `net.set_train(False)` at each epoch end and never switches back to train mode."""
import mindspore as ms
import numpy as np
from mindspore.train import Callback

from benchmarks.faults import kit

# Accepted: with BatchNorm stuck on its moving statistics the activations, gradients (a global norm of 2.5e21 at
# step 43, read exactly from Momentum's accumulator) and updates blow up, then go NaN.
FAULT = kit.Fault("net.set_train(False) in an epoch-end validation callback: later epochs train in eval mode",
                  expect={"MSD105"}, accept={"MSD201", "MSD203", "MSD206", "MSD208", "MSD211", "MSD212", "MSD216"},
                  arch="residual", data="images", category="mode", onset_step=17,
                  mode="pynative")

X, Y = kit.images(512, seed=0, noise=1.0)
XE, YE = kit.images(128, seed=1, noise=1.0)


class Validate(Callback):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.moving_means = []

    def on_train_epoch_end(self, run_context):
        self.net.set_train(False)
        accuracy = float((self.net(ms.Tensor(XE)).asnumpy().argmax(-1) == YE).mean())
        print(f"epoch {run_context.original_args().cur_epoch_num}: val accuracy {accuracy:.3f}")
        self.moving_means.append(self.net.stem[1].moving_mean.asnumpy().copy())


def train(callbacks):
    net = kit.ResNetTiny()
    validate = Validate(net)
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, [validate, *callbacks])
    outcome.extra["moving_means"] = validate.moving_means
    return outcome


def effect(outcome):
    # after the first epoch BatchNorm runs on its moving statistics, which then never update
    first, last = outcome.extra["moving_means"][0], outcome.extra["moving_means"][-1]
    assert np.array_equal(first, last), np.abs(first - last).max()
