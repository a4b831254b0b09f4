"""Fault: a machine-health classifier trained and validated on one plant's sensor readings is deployed at a plant
whose 6 pressure channels report absolute instead of gauge pressure (a constant offset): covariate shift, which
the eval split (same plant as training) cannot show."""
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("validated only on data like the training data; the deployment plant's sensors "
                  "(target_eval_dataset) read 6 of 16 features with an offset", expect={"MSD407"}, arch="mlp",
                  data="tabular", category="evaluation", fast=True)

X, Y = kit.tabular(1024, seed=0, noise=2.0)
XE, YE = kit.tabular(256, seed=1, noise=2.0)            # the eval split: same plant, same calibration
_XT, YT = kit.tabular(256, seed=2, noise=2.0)
OFFSET = np.zeros(16, np.float32)
OFFSET[:6] = 2.5                                         # absolute vs gauge pressure, in standardised units
XT = (_XT + OFFSET).astype(np.float32)                  # the deployment plant's readings


def doctor_options():
    return {"eval_dataset": kit.dataset(XE, YE, shuffle=False),
            "target_eval_dataset": kit.dataset(XT, YT, shuffle=False)}


def train(callbacks):
    net = kit.MLP()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks,
                      eval_ds=kit.dataset(XE, YE, shuffle=False))
    outcome.metrics["target_accuracy"] = kit.accuracy(net, XT, YT)
    return outcome


def effect(outcome):
    # ~94 % on the eval split, ~66 % at the deployment plant
    accuracy, target = outcome.metrics["accuracy"], outcome.metrics["target_accuracy"]
    assert accuracy > 0.9 and target < accuracy - 0.2, outcome.metrics
