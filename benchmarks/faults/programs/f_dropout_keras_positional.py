"""Fault: `nn.Dropout(0.2)` written with the Keras meaning (rate to drop); in MindSpore the first argument is keep_prob."""
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("nn.Dropout(0.2) meant as rate=0.2: keep_prob=0.2 drops 80 % of the LSTM features",
                  expect={"MSD104"}, accept={"MSD203"}, arch="lstm", data="sequences", category="mode",
                  deterministic=False)  # CPU Dropout

X, Y = kit.sequences(768, seed=0, noise=1.0)
XE, YE = kit.sequences(256, seed=1, noise=1.0)


class Net(nn.Cell):
    def __init__(self, features=8, classes=4, hidden=32):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, x):
        out, _ = self.lstm(x)
        return self.fc(self.dropout(out[:, -1, :]))


def train(callbacks):
    net = Net()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net, 3e-3), kit.dataset(X, Y), 3, callbacks,
                   eval_ds=kit.dataset(XE, YE, shuffle=False))


def effect(outcome):
    # training loss far above eval loss: most features are dropped while training
    assert outcome.mean_loss(last=10) > 1.5 * outcome.metrics["loss"], (outcome.mean_loss(last=10), outcome.metrics)
