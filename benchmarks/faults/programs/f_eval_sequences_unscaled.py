"""Fault: temperature sequences standardised in the training pipeline only; the eval pipeline gets raw °C."""
import mindspore.dataset as mds
import numpy as np

from benchmarks.faults import kit

FAULT = kit.Fault("eval sequences not standardised (raw °C, mean 21, std 4) while train sequences are",
                  expect={"MSD308"}, accept={"MSD304", "MSD401", "MSD404"}, arch="lstm", data="sequences",
                  category="data")

Z, Y = kit.sequences(512, seed=0)
ZE, YE = kit.sequences(256, seed=1)
RAW, RAW_EVAL = 21 + 4 * Z, 21 + 4 * ZE                     # what the logger records
MEAN, STD = RAW.mean(), RAW.std()


def train_ds():
    ds = mds.NumpySlicesDataset({"series": RAW, "label": Y}, shuffle=True)
    return ds.map(lambda s: ((s - MEAN) / STD).astype(np.float32), "series").batch(32, drop_remainder=True)


def eval_ds():
    return mds.NumpySlicesDataset({"series": RAW_EVAL, "label": YE}, shuffle=False).batch(32)


def doctor_options():
    return {"eval_dataset": eval_ds()}


def train(callbacks):
    net = kit.LSTMClassifier()
    return kit.fit(net, kit.cross_entropy(), kit.adam(net, 5e-3), train_ds(), 4, callbacks, eval_ds=eval_ds())


def effect(outcome):
    # the standardised eval pipeline gives > 0.85
    assert outcome.metrics["accuracy"] < 0.6, outcome.metrics
