"""Fault: ResNetTiny training with parameter groups swapped: the classifier head gets lr=0.0 and never moves."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("group lr 0.0 meant for the stem was given to the classifier head", expect={"MSD209"},
                  accept={"MSD111", "MSD203"}, arch="residual", data="images", category="frozen-shared")

X, Y = kit.images(400, seed=0, noise=1.0)


def train(callbacks):
    net = kit.ResNetTiny()
    head = net.fc.trainable_params()
    rest = [p for p in net.trainable_params() if all(p is not h for h in head)]
    opt = nn.Momentum([{"params": rest}, {"params": head, "lr": 0.0}], learning_rate=0.05, momentum=0.9)
    head_at_start = net.fc.weight.asnumpy().copy()
    outcome = kit.fit_functional(net, kit.cross_entropy(), opt, kit.dataset(X, Y, batch=16), 3, callbacks)
    outcome.extra["head_at_start"] = head_at_start
    return outcome


def effect(outcome):
    # the head is still its random init (the backbone adapts around it, so accuracy alone does not show it)
    assert np.array_equal(outcome.extra["head_at_start"], outcome.network.fc.weight.asnumpy())
