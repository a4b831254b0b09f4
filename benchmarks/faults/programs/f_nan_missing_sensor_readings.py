"""Fault: sensor sequences with dropped readings stored as NaN fed to an LSTM without imputation."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("dropped sensor readings left as NaN in the input sequences", expect={"MSD301"},
                  accept={"MSD201", "MSD206"}, arch="lstm", data="sequences", category="data")

X, Y = kit.sequences(512, seed=0)
X[kit.rng(5).random(X.shape[:2]) < 0.01] = np.nan          # 1 % of time steps lost by the logger


class Recordings:
    """Random-access source, as the MindSpore tutorials write it."""

    def __len__(self):
        return len(Y)

    def __getitem__(self, i):
        return X[i], Y[i]


def train(callbacks):
    ds = mds.GeneratorDataset(Recordings(), ["series", "label"], shuffle=True).batch(32, drop_remainder=True)
    net = kit.LSTMClassifier()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net, 3e-3), ds, 2, callbacks)


def effect(outcome):
    assert outcome.nonfinite_step is not None, outcome.losses[-5:]
