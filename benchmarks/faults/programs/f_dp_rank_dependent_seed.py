"""Fault: 2-rank data-parallel CNN seeded with `1 + rank` (meant to vary augmentation), so every rank starts from different weights."""
import mindspore as ms

from benchmarks.faults import kit
from benchmarks.faults.programs import _dp

FAULT = kit.Fault("ms.set_seed(1 + rank) on every rank: the ranks initialise different weights", expect={"MSD501"},
                  arch="cnn", data="images", category="distributed", onset_step=0, launcher="msrun")

X, Y = kit.images(512, seed=0)


def train(callbacks):
    rank, _ = _dp.setup()
    ms.set_seed(1 + rank)
    net = kit.CNN()
    return kit.fit(net, kit.cross_entropy(), kit.momentum(net), _dp.dataset(X, Y, batch=16), 2, callbacks)


def effect(outcome):
    # all-reduced gradients give every rank the same update, so the initial difference never goes away
    spread = _dp.rank_spread(_dp.weight_sums(outcome.network))
    assert spread > 1e-3, spread
