"""Fault: an LSTM token classifier whose `nn.Embedding` table is initialised with `Normal(sigma=100)`, where
1/100 (0.01, MindSpore's default) was meant: the LSTM gates saturate and the table barely moves."""
import numpy as np
from mindspore import nn
from mindspore.common.initializer import Normal

from benchmarks.faults import kit

FAULT = kit.Fault("nn.Embedding(embedding_table=Normal(100)): token vectors ~400 long, 10^4x the default scale",
                  expect={"MSD109"}, accept={"MSD203", "MSD207", "MSD213"}, arch="lstm", data="tokens",
                  category="initialisation")

X, Y = kit.tokens(512, seed=0)
XV, YV = kit.tokens(256, seed=1)


class TokenLSTM(nn.Cell):
    def __init__(self, vocab=64, dim=16, hidden=32, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, embedding_table=Normal(100))  # sigma=1/100 meant
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.fc(out[:, -1, :])


def train(callbacks):
    net = TokenLSTM()
    initial = net.embed.embedding_table.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 1e-2), kit.dataset(X, Y), 3, callbacks)
    outcome.extra["table_initial"] = initial
    return outcome


def effect(outcome):
    # the same network with the default table reaches ~0.99 validation accuracy in these 3 epochs
    initial, table = outcome.extra["table_initial"], outcome.network.embed.embedding_table.asnumpy()
    moved = float(np.abs(table - initial).mean() / np.abs(initial).mean())
    accuracy = kit.accuracy(outcome.network, XV, YV)
    assert moved < 0.01 and accuracy < 0.85, (moved, accuracy)
