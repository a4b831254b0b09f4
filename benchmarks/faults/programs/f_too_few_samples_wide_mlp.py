"""Fault: a 540k-parameter MLP trained on 160 labelled rows; it memorises them."""
import mindspore.dataset as mds

from benchmarks.faults import kit

FAULT = kit.Fault("a wide 3-layer MLP (≈ 540k weights) for 160 training samples", expect={"MSD307"},
                  arch="mlp", data="tabular", category="data")

X, Y = kit.tabular(160, seed=0, noise=3.0)
XE, YE = kit.tabular(512, seed=1, noise=3.0)


def train(callbacks):
    net = kit.MLP(hidden=512, depth=3)
    ds = mds.NumpySlicesDataset({"x": X, "label": Y}, shuffle=True).batch(16)
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 1e-3), ds, 12, callbacks,
                      eval_ds=mds.NumpySlicesDataset({"x": XE, "label": YE}, shuffle=False).batch(64))
    outcome.metrics["train_accuracy"] = kit.accuracy(net, X, Y)
    return outcome


def effect(outcome):
    assert outcome.metrics["train_accuracy"] > outcome.metrics["accuracy"] + 0.15, outcome.metrics
