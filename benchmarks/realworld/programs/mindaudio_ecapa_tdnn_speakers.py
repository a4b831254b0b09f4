"""mindaudio ECAPA-TDNN (its own class, narrow channels) + its cosine Classifier, trained with its Additive Angular
Margin softmax (margin 0.2, scale 30) and Adam with weight decay, on synthetic 'speakers' (per-speaker spectral
envelopes over 20 mel bands, 48 frames)."""
import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindaudio.loss.AdditiveAngularMargin import AdditiveAngularMargin
from mindaudio.models.ecapatdnn import Classifier, EcapaTDNN

from benchmarks.faults import kit
from benchmarks.realworld import corpus

FAULT = kit.Fault("healthy: mindaudio ECAPA-TDNN speaker classifier with AAM softmax", expect=(), arch="ecapa_tdnn",
                  data="mel frames (synthetic speakers)", category="healthy")
LIBRARY = "mindaudio 0.3.0"
COVERS = ("SE-Res2Net blocks (split + concat)", "dilated Conv1d", "attentive statistics pooling",
          "multi-layer concat", "BatchNorm everywhere", "cosine classifier + angular margin loss")

SPEAKERS, MELS, FRAMES, EPOCHS, BATCH = 8, 20, 48, 6, 32


def speakers(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, FRAMES, MELS) log-mel-like frames: each speaker's envelope, a random loudness, frame noise."""
    envelopes = np.random.default_rng(77).standard_normal((SPEAKERS, 1, MELS))
    r = np.random.default_rng(seed)
    y = (np.arange(n) % SPEAKERS).astype(np.int32)
    r.shuffle(y)
    x = envelopes[y] + 0.5 * r.standard_normal((n, 1, 1)) + r.standard_normal((n, FRAMES, MELS))
    return x.astype(np.float32), y


X, Y = speakers(1024, 0)
XE, YE = speakers(256, 1)
DATA = corpus.Data(X, Y, EPOCHS, BATCH, XE, YE)


class SpeakerNet(nn.Cell):
    def __init__(self):
        super().__init__()
        self.embedding = EcapaTDNN(MELS, lin_neurons=32, channels=(64, 64, 64, 64, 192), attention_channels=32,
                                   res2net_scale=4, se_channels=16)
        self.classifier = Classifier(32, lin_neurons=32, out_neurons=SPEAKERS)

    def construct(self, x):
        return self.classifier(self.embedding(x))  # cosine similarities, (N, SPEAKERS)


class AAMSoftmax(nn.Cell):
    """mindaudio's recipe: angular margin on the target cosine, then softmax cross-entropy."""

    def __init__(self):
        super().__init__()
        self.margin = AdditiveAngularMargin(margin=0.2, scale=30.0)
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=False, reduction="mean")

    def construct(self, cosine, label):
        onehot = ops.one_hot(label, SPEAKERS, ms.Tensor(1.0, ms.float32), ms.Tensor(0.0, ms.float32))
        return self.ce(self.margin(cosine, onehot), onehot)


def recipe() -> corpus.Recipe:
    net = SpeakerNet()
    opt = nn.Adam(net.trainable_params(), learning_rate=1e-3, weight_decay=2e-6)
    return corpus.recipe(net, AAMSoftmax(), opt)


def train(callbacks):
    return corpus.fit(recipe(), DATA, callbacks)


def effect(outcome):
    assert outcome.mean_loss(last=20) < 0.5 * outcome.mean_loss(first=10), outcome.losses[::20]
    assert outcome.metrics["accuracy"] > 0.85, outcome.metrics
