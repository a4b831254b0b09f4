"""Fault: a stacked LSTM built as `nn.CellList([nn.LSTM(32, 32, batch_first=True)] * 2)`: both layers are one object."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("[nn.LSTM(...)] * 2 in a CellList: one LSTM applied twice with the same weights, not two layers",
                  expect={"MSD101"}, arch="lstm", data="sequences", category="frozen-shared")

X, Y = kit.sequences(384, seed=0, noise=1.0)


class StackedLSTM(nn.Cell):
    def __init__(self, features=8, hidden=32, classes=4, layers=2):
        super().__init__()
        self.inp = nn.Dense(features, hidden)
        self.layers = nn.CellList([nn.LSTM(hidden, hidden, batch_first=True)] * layers)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, x):
        h = self.inp(x)
        for layer in self.layers:
            h, _ = layer(h)
        return self.fc(h[:, -1, :])


def train(callbacks):
    net = StackedLSTM()
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 5e-3), kit.dataset(X, Y), 1, callbacks)
    outcome.extra["distinct_layers"] = len({id(layer) for layer in net.layers})
    return outcome


def effect(outcome):
    # two registered layers, one object: half the intended parameters
    assert outcome.extra["distinct_layers"] == 1, outcome.extra
