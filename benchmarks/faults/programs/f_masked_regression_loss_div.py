"""Fault: a multi-target regression loss cell averages over observed targets with `ops.div(..., mask.sum())`; some batches observe none."""
import numpy as np
from mindspore import nn, ops

from benchmarks.faults import kit

FAULT = kit.Fault("loss = ops.div((err**2 * mask).sum(), mask.sum()) in a custom loss cell: 0/0 = NaN on a batch "
                  "with no observed target", expect={"MSD106"}, accept={"MSD201", "MSD206"}, arch="mlp",
                  data="regression", category="nan")

X, Y1 = kit.regression(512, seed=0)
Y = np.repeat(Y1, 3, axis=1)                               # three sensors measure the same quantity
OBSERVED = kit.rng(3).random(Y.shape) < 0.05               # most readings are missing
Y = np.where(OBSERVED, Y, 0.0).astype(np.float32)          # 0 marks a missing reading


class MaskedMSE(nn.Cell):
    def construct(self, prediction, target):
        mask = ops.cast(target != 0, prediction.dtype)
        return ops.div(((prediction - target) ** 2 * mask).sum(), mask.sum())


def train(callbacks):
    net = kit.MLP(features=8, classes=3)
    return kit.fit(net, MaskedMSE(), kit.adam(net), kit.dataset(X, Y, batch=8), 1, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses[-3:]
