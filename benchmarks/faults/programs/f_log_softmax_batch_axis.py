"""Fault: a CNN head ends in `nn.LogSoftmax(axis=0)` for NLLLoss: it normalises over the batch, not the classes."""
import mindspore as ms
import numpy as np
from mindspore import nn

from benchmarks.faults import kit

FAULT = kit.Fault("LogSoftmax(axis=0) normalises each class score across the batch",
                  expect={"MSD113"}, arch="cnn", data="images", category="loss-wiring", fast=True)

X, Y = kit.images(512, seed=0, noise=1.0)
XE, YE = kit.images(128, seed=1, noise=1.0)


class Net(nn.Cell):
    def __init__(self, classes=4, width=8):
        super().__init__()
        self.cnn = kit.CNN(classes, width=width)
        self.log_softmax = nn.LogSoftmax(axis=0)

    def construct(self, x):
        return self.log_softmax(self.cnn(x))


def train(callbacks):
    net = Net()
    outcome = kit.fit(net, nn.NLLLoss(), kit.momentum(net), kit.dataset(X, Y), 3, callbacks)
    net.set_train(False)
    single = [int(net(ms.Tensor(XE[i:i + 1])).asnumpy().argmax()) for i in range(64)]  # one request at a time
    outcome.metrics["single_accuracy"] = float(np.mean(np.array(single) == YE[:64]))
    return outcome


def effect(outcome):
    # a batch of one: log_softmax over the batch axis is 0 for every class, the prediction is always class 0
    assert outcome.metrics["single_accuracy"] < 0.4, outcome.metrics
