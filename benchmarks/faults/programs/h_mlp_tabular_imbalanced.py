"""Healthy: tabular classes in proportions 40/30/20/10 (imbalanced, but within what plain training handles)."""
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("nothing: a moderately imbalanced (4:1) tabular classifier", expect=(), arch="mlp", data="tabular",
                  category="healthy", fast=True)

SHARE = (0.4, 0.3, 0.2, 0.1)


def imbalanced(n, seed):
    x, y = kit.tabular(4 * n, seed=seed, noise=2.0)
    keep = np.concatenate([np.flatnonzero(y == c)[: int(share * n)] for c, share in enumerate(SHARE)])
    keep = kit.rng(seed).permutation(keep)
    return x[keep], y[keep]


X, Y = imbalanced(1280, seed=0)
XE, YE = imbalanced(320, seed=1)


def train(callbacks):
    net = kit.MLP()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    assert outcome.metrics["accuracy"] > 0.85 > max(SHARE), outcome.metrics
