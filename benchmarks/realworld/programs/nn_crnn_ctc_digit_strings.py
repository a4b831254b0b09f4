"""CRNN text recognition (the mindocr recipe, built from nn: conv + BatchNorm + BiLSTM + CTC) on 4-digit strings
made of real 8x8 digits side by side; nn.CTCLoss, Adam with warm-up."""
import numpy as np
import mindspore as ms
from mindspore import nn, ops

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: a CRNN reading 4-digit strings with CTC", expect=(), arch="crnn",
                  data="digit strings (real digits, sequence labels)", category="healthy")
LIBRARY = "mindspore.nn (mindocr 0.5.0's CRNN recipe; mindocr itself does not import under MindSpore 2.10)"
COVERS = ("CTC loss / sequence head", "bidirectional nn.LSTM", "BatchNorm2d", "sequence labels", "eval split")

LENGTH, BLANK, EPOCHS, BATCH = 4, 0, 6, 32


def strings(x: np.ndarray, y: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n images of LENGTH random digits side by side (1 x 8 x 32), labels 1..10 (0 is CTC's blank)."""
    r = np.random.default_rng(seed)
    pick = r.integers(0, len(x), (n, LENGTH))
    images = (x[pick] / 16.0).reshape(n, LENGTH, 8, 8).transpose(0, 2, 1, 3).reshape(n, 1, 8, 8 * LENGTH)
    return ((images - 0.3) / 0.4).astype(np.float32), (y[pick] + 1).astype(np.int32)


_X, _Y, _XE, _YE = corpus.split(*corpus.load("digits"))
X, Y = strings(_X, _Y, 1280, 0)
XE, YE = strings(_XE, _YE, 256, 1)
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


class CRNN(nn.Cell):
    def __init__(self, classes: int = 11, hidden: int = 64):
        super().__init__()
        self.features = nn.SequentialCell(
            nn.Conv2d(1, 32, 3, pad_mode="same", has_bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d((2, 1), (2, 1)),
            nn.Conv2d(32, 64, 3, pad_mode="same", has_bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d((2, 2), (2, 2)))
        self.rnn = nn.LSTM(64 * 2, hidden, bidirectional=True)
        self.head = nn.Dense(2 * hidden, classes)

    def construct(self, x):
        f = self.features(x)  # (N, 64, 2, 16)
        n, c, h, w = f.shape
        f = f.reshape(n, c * h, w).transpose(2, 0, 1)  # (T=16, N, 128)
        out, _ = self.rnn(f)
        return self.head(out)  # (T, N, classes)


class CTCLoss(nn.Cell):
    """mindocr's CTCLoss: log-softmax over classes, every sequence uses the full width, every label LENGTH long."""

    def __init__(self):
        super().__init__()
        self.ctc = nn.CTCLoss(blank=BLANK, reduction="mean")

    def construct(self, logits, labels):
        t, n, _ = logits.shape
        log_probs = ops.log_softmax(logits, axis=-1)
        input_lengths = ops.fill(ms.int32, (n,), t)
        label_lengths = ops.fill(ms.int32, (n,), LENGTH)
        return self.ctc(log_probs, labels, input_lengths, label_lengths)


def recipe() -> corpus.Recipe:
    net = CRNN()
    per_epoch = DATA.steps_per_epoch
    lr = nn.warmup_lr(2e-3, per_epoch, per_epoch, 1) + [2e-3] * ((EPOCHS - 1) * per_epoch)
    opt = nn.Adam(net.trainable_params(), learning_rate=lr)
    return corpus.recipe(net, CTCLoss(), opt, metric="loss")


def greedy_accuracy(net: nn.Cell) -> float:
    """Whole-string accuracy of greedy CTC decoding (collapse repeats, drop blanks) on the eval strings."""
    net.set_train(False)
    best = net(ms.Tensor(XE)).asnumpy().argmax(-1).T  # (N, T)
    correct = 0
    for row, label in zip(best, YE):
        decoded = [c for i, c in enumerate(row) if c != BLANK and (i == 0 or c != row[i - 1])]
        correct += decoded == list(label)
    return correct / len(YE)


def train(callbacks):
    outcome = corpus.fit(recipe(), DATA, callbacks)
    outcome.metrics["string_accuracy"] = greedy_accuracy(outcome.network)
    return outcome


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.2 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["string_accuracy"] > 0.6, outcome.metrics
