"""Fault: Transformer mean pooling over non-padding tokens divides by the token count, which is 0 for an empty text."""
import mindspore as ms
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("pooled = sum(h * keep) / keep.sum() with no guard; 5 % of the texts are empty (all padding)",
                  expect={"MSD201", "MSD206"}, accept={"MSD106"}, arch="transformer", data="tokens", category="nan")

X, Y = kit.tokens(512, seed=0)
LENGTHS = kit.rng(4).integers(4, 17, len(X))
LENGTHS[kit.rng(5).random(len(X)) < 0.05] = 0  # empty documents that survived the cleaning step
X = np.where(np.arange(16)[None, :] < LENGTHS[:, None], X, 0).astype(np.int32)  # token 0 is padding


class PaddedTransformer(kit.TransformerClassifier):
    def construct(self, x):
        keep = (x != 0).astype(ms.float32).expand_dims(2)
        h = self.encoder(self.embed(x) + self.position)
        return self.fc((h * keep).sum(axis=1) / keep.sum(axis=1))


def train(callbacks):
    net = PaddedTransformer()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net), kit.dataset(X, Y), 1, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None and outcome.nonfinite_step <= 3, outcome.losses[:3]
