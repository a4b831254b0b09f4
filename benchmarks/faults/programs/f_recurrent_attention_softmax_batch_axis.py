"""Fault: an LSTM classifier's attention pooling, two cells down, normalises its scores with `ops.softmax(scores, axis=0)`: over the batch, not the time steps."""
import mindspore as ms
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("ops.softmax(scores, axis=0) on (batch, time) attention scores: each sample's pooling weights "
                  "depend on the other samples of its batch",
                  expect={"MSD113"}, arch="lstm", data="sequences", category="loss-wiring")

X, Y = kit.sequences(512, seed=0, noise=1.0)
XE, YE = kit.sequences(64, seed=1, noise=1.0)


class AttentionPool(nn.Cell):
    def __init__(self, hidden):
        super().__init__()
        self.score = nn.Dense(hidden, 1)

    def construct(self, states):
        scores = self.score(states).squeeze(-1)            # (batch, time)
        weights = ops.softmax(scores, axis=0)              # meant: over time (axis=1)
        return (states * weights.expand_dims(-1)).sum(axis=1)


class Head(nn.Cell):
    def __init__(self, hidden, classes):
        super().__init__()
        self.pool = AttentionPool(hidden)
        self.fc = nn.Dense(hidden, classes)

    def construct(self, states):
        return self.fc(self.pool(states))


class AttentionLSTM(nn.Cell):
    def __init__(self, features=8, hidden=32, classes=4):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.head = Head(hidden, classes)

    def construct(self, x):
        states, _ = self.lstm(x)
        return self.head(states)


def train(callbacks):
    net = AttentionLSTM()
    outcome = kit.fit(net, kit.cross_entropy(), kit.adam(net, 5e-3), kit.dataset(X, Y), 3, callbacks)
    net.set_train(False)
    batched = ops.softmax(net(ms.Tensor(XE))).asnumpy()
    single = np.concatenate([ops.softmax(net(ms.Tensor(XE[i:i + 1]))).asnumpy() for i in range(len(XE))])
    outcome.metrics["probability_shift"] = float(np.abs(batched - single).max(axis=1).mean())
    return outcome


def effect(outcome):
    # the same sample gets other class probabilities alone than inside its eval batch (0 with axis=1)
    assert outcome.metrics["probability_shift"] > 0.2, outcome.metrics
