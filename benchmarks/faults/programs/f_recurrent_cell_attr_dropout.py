"""Fault: a hand-unrolled LSTM encoder applies recurrent dropout with functional `ops.dropout`, its rate kept in an attribute set to 0.9 (meant as the keep probability)."""
import mindspore as ms
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("recurrent_dropout=0.9 (a keep probability) passed to ops.dropout(p=...) two cells "
                  "down in a custom LSTM: 90 % of the hidden state dropped at every step",
                  expect={"MSD104"}, accept={"MSD203"}, arch="lstm", data="sequences", category="mode",
                  deterministic=False)  # CPU dropout

X, Y = kit.sequences(512, seed=0, noise=1.0)
XE, YE = kit.sequences(256, seed=1, noise=1.0)


class DropoutLSTMLayer(nn.Cell):
    """One LSTM layer unrolled over time, dropping part of the hidden state between steps (variational style)."""

    def __init__(self, features, hidden, recurrent_dropout):
        super().__init__()
        self.cell = nn.LSTMCell(features, hidden)
        self.hidden = hidden
        self.recurrent_dropout = recurrent_dropout

    def construct(self, x):
        h = ops.zeros((x.shape[0], self.hidden), ms.float32)
        c = ops.zeros((x.shape[0], self.hidden), ms.float32)
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t, :], (h, c))
            h = ops.dropout(h, p=self.recurrent_dropout, training=self.training)
        return h


class Encoder(nn.Cell):
    def __init__(self, features=8, hidden=32, recurrent_dropout=0.0):
        super().__init__()
        self.layer = DropoutLSTMLayer(features, hidden, recurrent_dropout)

    def construct(self, x):
        return self.layer(x)


class Classifier(nn.Cell):
    def __init__(self, classes=4, hidden=32):
        super().__init__()
        self.encoder = Encoder(hidden=hidden, recurrent_dropout=0.9)  # "keep 90 %"
        self.fc = nn.Dense(hidden, classes)

    def construct(self, x):
        return self.fc(self.encoder(x))


def train(callbacks):
    net = Classifier()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net, 5e-3), kit.dataset(X, Y), 3, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the twin with recurrent_dropout=0.1 reaches eval loss 0.11 and accuracy 0.98 in the same 3 epochs
    assert outcome.metrics["loss"] > 0.5 and outcome.metrics["accuracy"] < 0.92, outcome.metrics
