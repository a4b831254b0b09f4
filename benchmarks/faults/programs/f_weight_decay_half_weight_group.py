"""Fault: the usual "decay the weights, not the biases" parameter groups, with weight_decay=0.5 typed for 5e-4: every weight is pulled to zero."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nn.Momentum([{'params': weights, 'weight_decay': 0.5}, {'params': biases, 'weight_decay': 0.0}]): "
                  "a decay 1000x too strong on the weight group", expect={"MSD116"},
                  accept={"MSD203", "MSD211"}, arch="cnn", data="images", category="optimizer", fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)
XE, YE = kit.images(256, seed=1, noise=1.0)
WEIGHT_DECAY = 0.5                                          # meant 5e-4


def train(callbacks):
    net = kit.CNN()
    weights = [p for p in net.trainable_params() if p.name.endswith("weight")]
    biases = [p for p in net.trainable_params() if not p.name.endswith("weight")]
    optimizer = nn.Momentum([{"params": weights, "weight_decay": WEIGHT_DECAY},
                             {"params": biases, "weight_decay": 0.0}], learning_rate=0.05, momentum=0.9)
    initial = float(np.abs(net.fc.weight.asnumpy()).mean())
    outcome = kit.fit(net, kit.cross_entropy(), optimizer, kit.dataset(X, Y), 2, callbacks,
                      eval_ds=kit.dataset(XE, YE, shuffle=False))
    outcome.extra["head_initial"] = initial
    return outcome


def effect(outcome):
    # the weights collapse to ~0 and the loss stays at ln(4) = 1.39 (the 5e-4 twin ends near 0.04, accuracy 0.99)
    head = float(np.abs(outcome.network.fc.weight.asnumpy()).mean())
    assert head < 0.2 * outcome.extra["head_initial"], (head, outcome.extra["head_initial"])
    assert outcome.metrics["accuracy"] < 0.5 and outcome.mean_loss(last=10) > 1.2, (outcome.metrics,
                                                                                    outcome.losses[-3:])
