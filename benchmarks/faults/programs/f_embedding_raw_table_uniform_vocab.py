"""Fault: a token table kept as a raw Parameter (`Uniform(scale=VOCAB)`: the vocabulary size passed where the bound
belongs, std ~37) read by indexing `self.table[ids]`, an LSTM and a `mint.nn.Linear` head, trained with a
hand-written loop."""
import numpy as np
from mindspore import Parameter, mint, nn
from mindspore.common.initializer import Uniform, initializer

from benchmarks.faults import kit

VOCAB, DIM = 64, 16

FAULT = kit.Fault("Parameter(initializer(Uniform(VOCAB), (VOCAB, DIM))) looked up as self.table[ids]: init bound 64 "
                  "where ~0.1 was meant", expect={"MSD109"}, accept={"MSD203", "MSD207", "MSD213"}, arch="lstm",
                  data="tokens", category="initialisation")

X, Y = kit.tokens(512, seed=0, vocab=VOCAB)
XV, YV = kit.tokens(256, seed=1, vocab=VOCAB)


class TableLSTM(nn.Cell):
    def __init__(self, hidden=32, classes=4):
        super().__init__()
        self.table = Parameter(initializer(Uniform(VOCAB), (VOCAB, DIM)), name="token_table")
        self.lstm = nn.LSTM(DIM, hidden, batch_first=True)
        self.fc = mint.nn.Linear(hidden, classes)

    def construct(self, ids):
        out, _ = self.lstm(self.table[ids])
        return self.fc(out[:, -1, :])


def train(callbacks):
    net = TableLSTM()
    initial = net.table.asnumpy().copy()
    outcome = kit.fit_functional(net, kit.cross_entropy(), kit.adam(net, 1e-2), kit.dataset(X, Y), 3, callbacks)
    outcome.extra["table_initial"] = initial
    return outcome


def effect(outcome):
    # the same network with Uniform(0.1) reaches ~0.99 validation accuracy in these 3 epochs
    initial, table = outcome.extra["table_initial"], outcome.network.table.asnumpy()
    moved = float(np.abs(table - initial).mean() / np.abs(initial).mean())
    accuracy = kit.accuracy(outcome.network, XV, YV)
    assert moved < 0.01 and accuracy < 0.9, (moved, accuracy)
