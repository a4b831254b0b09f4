"""Fault: 2-rank data-parallel MLP regressor whose dataset has no num_shards/shard_id, so both ranks read the same samples."""
import numpy as np
from mindspore import nn

from benchmarks.faults import kit
from benchmarks.faults.programs import _dp

FAULT = kit.Fault("NumpySlicesDataset without num_shards/shard_id under data parallelism: every rank reads every "
                  "sample", expect={"MSD503"}, arch="mlp", data="regression", category="distributed",
                  launcher="msrun")

X, Y = kit.regression(512, seed=0)


def dataset():
    return _dp.dataset(X, Y, shard=False)


def train(callbacks):
    _dp.setup()
    net = kit.MLP(features=8, classes=1)
    return kit.fit(net, nn.MSELoss(), kit.adam(net, lr=3e-3), dataset(), 2, callbacks)


def effect(outcome):
    # the ranks' batches are identical: the second device adds no data, each epoch is just run twice
    sums = [float(np.abs(batch["x"]).sum()) for batch in dataset().create_dict_iterator(num_epochs=1, output_numpy=True)]
    assert _dp.rank_spread(sums) == 0.0, sums[:3]
