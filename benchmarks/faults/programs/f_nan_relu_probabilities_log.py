"""Fault: class probabilities made by normalising ReLU outputs (not softmax), then a hand-written log loss: log(0)."""
import mindspore as ms
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("probabilities = relu(z) / sum(relu(z)) fed to -log(p[label]); a zero p gives -log(0) = inf",
                  expect={"MSD201", "MSD206"}, accept={"MSD106"}, arch="mlp", data="tabular", category="nan")

X, Y = kit.tabular(512, seed=0)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = kit.MLP(classes=4)
        self.relu = nn.ReLU()

    def construct(self, x):
        scores = self.relu(self.body(x))
        return scores / scores.sum(axis=1, keepdims=True)


class NLLOfProbabilities(nn.Cell):
    def construct(self, probs, label):
        picked = ops.gather_elements(probs, 1, label.astype(ms.int32).expand_dims(1))
        return -ops.log(picked).mean()


def train(callbacks):
    net = Net()
    return kit.fit(net, NLLOfProbabilities(), kit.momentum(net), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None and outcome.nonfinite_step <= 5, outcome.losses[:5]
