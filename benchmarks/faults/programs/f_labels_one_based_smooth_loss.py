"""Fault: 1-based labels with a model-zoo style label-smoothing loss (ops.one_hot): class K silently gets no target."""
import mindspore as ms
import mindspore.dataset as mds
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("labels 1..4 for 4 outputs; one_hot turns label 4 into an all-zero target, class never learned",
                  expect={"MSD306"}, arch="mlp", data="tokens", category="data")

X, Y = kit.tokens(768, seed=0)
XE, YE = kit.tokens(256, seed=1)


class FastText(nn.Cell):
    """Mean of token embeddings, then a hidden layer and the head."""

    def __init__(self, vocab=64, dim=32, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.fc1 = nn.Dense(dim, 64)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(64, classes)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.embed(x).mean(axis=1))))


class CrossEntropySmooth(nn.LossBase):
    """As in the MindSpore model zoo: one-hot targets with label smoothing."""

    def __init__(self, num_classes, smooth=0.1):
        super().__init__()
        self.num_classes = num_classes
        self.on = ms.Tensor(1.0 - smooth, ms.float32)
        self.off = ms.Tensor(smooth / (num_classes - 1), ms.float32)
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction="mean")

    def construct(self, logits, label):
        return self.ce(logits, ops.one_hot(label, self.num_classes, self.on, self.off))


def _ds(x, y, shuffle):
    return mds.NumpySlicesDataset({"tokens": x, "label": y + 1}, shuffle=shuffle).batch(32, drop_remainder=True)


def train(callbacks):
    net = FastText()
    outcome = kit.fit(net, CrossEntropySmooth(4), kit.adam(net, 5e-3), _ds(X, Y, True), 4, callbacks)
    outcome.metrics["accuracy_1based"] = kit.accuracy(net, XE, YE + 1)
    return outcome


def effect(outcome):
    # ids 1, 2, 3 are learned, id 4 has no output: at most 3 of 4 classes can be right
    assert outcome.metrics["accuracy_1based"] < 0.76, outcome.metrics
