"""Fault: a token classifier keeps its embedding table as a raw Parameter looked up with `ops.gather`, frozen for "pretrained vectors" that were never loaded."""
import numpy as np
from mindspore import Parameter, nn, ops
from mindspore.common.initializer import Normal, initializer

from benchmarks.faults import kit

FAULT = kit.Fault("Parameter(token table, requires_grad=False) at its random init, read with ops.gather: the "
                  "embedding never learns (the checkpoint load was commented out)",
                  expect={"MSD102"}, arch="lstm", data="tokens", category="frozen-shared")

X, Y = kit.tokens(512, seed=0)


class TokenEncoder(nn.Cell):
    def __init__(self, vocab=64, dim=16, hidden=32, classes=4):
        super().__init__()
        self.token_table = Parameter(initializer(Normal(0.1), (vocab, dim)), name="token_table",
                                     requires_grad=False)  # pretrained GloVe rows go here
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, ids):
        out, _ = self.lstm(ops.gather(self.token_table, ids, 0))
        return self.fc(out[:, -1, :])


def train(callbacks):
    net = TokenEncoder()
    initial = net.token_table.asnumpy().copy()
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 1e-2), kit.dataset(X, Y), 2, callbacks)
    outcome.extra["table_initial"] = initial
    return outcome


def effect(outcome):
    assert np.array_equal(outcome.network.token_table.asnumpy(), outcome.extra["table_initial"]), "the table trained"
