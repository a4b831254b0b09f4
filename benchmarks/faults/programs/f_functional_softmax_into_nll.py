"""Fault: a CNN returns `ops.softmax(logits)` (functional, for serving) and is trained with nn.NLLLoss, which wants log-probabilities."""
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("NLLLoss on ops.softmax probabilities (ops.log_softmax meant): the loss is -p[y], bounded in "
                  "[-1, 0], with vanishing gradients near saturation", expect={"MSD107"},
                  accept={"MSD203", "MSD215"}, arch="cnn", data="images", category="loss-wiring")

X, Y = kit.images(512, seed=0, noise=1.0)


class ServingCNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.features = kit.CNN()

    def construct(self, x):
        logits = self.features(x)
        return ops.softmax(logits, axis=-1)


def train(callbacks):
    net = ServingCNN()
    return kit.fit(net, nn.NLLLoss(), kit.momentum(net), kit.dataset(X, Y), 2, callbacks)


def effect(outcome):
    # -p[y] is never positive: a real negative log-likelihood is always >= 0
    assert max(outcome.losses) <= 0.0, max(outcome.losses)
