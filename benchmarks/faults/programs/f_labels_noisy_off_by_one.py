"""Fault: a fifth of the training labels come from an annotation export whose class ids are off by one.

Two annotation batches were merged; the second one's exporter numbered the classes from 1, and the merge script
wrapped them back (``(id + 1) % 4``) instead of subtracting one. 20 % of the training labels now name a fixed other
class. The eval split was labelled in-house and is clean. Accuracy barely moves (the majority of every class is
still right), so nobody notices; the model's probabilities are what pays: its eval loss is ten times a clean run's.
"""
from benchmarks.faults import kit

FAULT = kit.Fault("20 % of the training labels shifted to the next class id by a merged off-by-one export",
                  expect={"MSD311"}, arch="mlp", data="tabular", category="data", fast=True)

X, Y_TRUE = kit.tabular(2048, seed=0, noise=1.5)
XE, YE = kit.tabular(512, seed=1, noise=1.5)
EXPORTED = kit.rng(5).random(len(Y_TRUE)) < 0.2   # the second annotation batch
Y = Y_TRUE.copy()
Y[EXPORTED] = (Y_TRUE[EXPORTED] + 1) % 4           # meant: the exporter's id - 1


def doctor_options():
    return {"eval_dataset": kit.dataset(XE, YE, shuffle=False)}


def train(callbacks):
    net = kit.MLP()
    outcome = kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                      eval_ds=kit.dataset(XE, YE, shuffle=False))
    outcome.extra["given_accuracy"] = kit.accuracy(net, X, Y)
    return outcome


def effect(outcome):
    # the same run on the clean labels: eval loss 0.021, eval accuracy 0.990, training labels matched 0.997
    assert outcome.metrics["loss"] > 0.15, outcome.metrics
    assert outcome.extra["given_accuracy"] < 0.85, outcome.extra
