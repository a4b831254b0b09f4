"""Fault: a token LSTM whose embedding group gets lr=0 (a "freeze pretrained embeddings" flag left on for random ones)."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("embedding parameter group lr=0.0 though the embedding is randomly initialised", expect={"MSD209"},
                  accept={"MSD111", "MSD203"}, arch="lstm", data="tokens", category="frozen-shared")

X, Y = kit.tokens(512, seed=0)
XE, YE = kit.tokens(256, seed=1)
FREEZE_EMBEDDINGS = True


class TokenLSTM(nn.Cell):
    def __init__(self, vocab=64, dim=16, hidden=32, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, batch_first=True)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.fc(out[:, -1, :])


def train(callbacks):
    net = TokenLSTM()
    embed = net.embed.trainable_params()
    rest = net.lstm.trainable_params() + net.fc.trainable_params()
    opt = nn.Adam([{"params": embed, "lr": 0.0 if FREEZE_EMBEDDINGS else 1e-2}, {"params": rest}], learning_rate=1e-2)
    return kit.fit(net, kit.cross_entropy(), opt, kit.dataset(X, Y), 4, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # the embedding never moves (the twin with FREEZE_EMBEDDINGS=False reaches > 90 %)
    assert outcome.metrics["accuracy"] < 0.75, outcome.metrics
