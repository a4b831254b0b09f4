"""Fault: the validation set is the last 25 % of the training array, which is also trained on (leakage)."""
import mindspore.dataset as mds

from benchmarks.faults import kit

FAULT = kit.Fault("eval set sliced from the training data it is trained on: eval accuracy measures memory",
                  expect={"MSD309"}, arch="mlp", data="tabular", category="data")

X, Y = kit.tabular(480, seed=0, noise=3.0)
XT, YT = kit.tabular(400, seed=1, noise=3.0)               # truly unseen data, for the effect check only
VAL = slice(320, None)                                     # meant x[:320] / x[320:], trained on all of x


def _ds(x, y, shuffle):
    return mds.NumpySlicesDataset({"x": x, "label": y}, shuffle=shuffle).batch(32)


def doctor_options():
    return {"eval_dataset": _ds(X[VAL], Y[VAL], False)}


def train(callbacks):
    net = kit.MLP(hidden=256)
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 3e-3), _ds(X, Y, True), 12, callbacks,
                      eval_ds=_ds(X[VAL], Y[VAL], False))
    outcome.metrics["unseen_accuracy"] = kit.accuracy(net, XT, YT)
    return outcome


def effect(outcome):
    # the reported validation accuracy overstates the accuracy on unseen data
    assert outcome.metrics["accuracy"] > outcome.metrics["unseen_accuracy"] + 0.1, outcome.metrics
