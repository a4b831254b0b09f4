"""The Doctor hands the heap pages its evaluations freed back to the system (glibc's malloc_trim)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from mindspore_doctor.training.memory import give_back_freed_memory


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim; a no-op elsewhere")
def test_freed_small_arrays_are_given_back():
    """Many small arrays (below glibc's mmap threshold, as an evaluation's per-batch outputs are) stay in the heap
    when freed; after the call, the process no longer holds them."""
    arrays = [np.ones(4096) for _ in range(8192)]  # 8192 x 32 KB = 256 MB in the heap
    kept = arrays[-1]  # the top of the heap stays in use: only a trim gives back the pages below it
    del arrays
    before = _rss_mb()
    give_back_freed_memory()
    assert before - _rss_mb() > 100, (before, _rss_mb())
    assert kept.sum() == 4096


def test_the_doctor_gives_memory_back_after_the_first_step_each_evaluation_and_at_the_end(monkeypatch):
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore import nn
    from mindspore.train import Model

    from mindspore_doctor import Doctor
    from mindspore_doctor.training import session

    calls = []
    monkeypatch.setattr(session, "give_back_freed_memory", lambda: calls.append(len(doctor.session.history.steps)))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def data():
        return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(32)

    ms.set_seed(0)
    net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.05, 0.9))
    doctor = Doctor(eval_dataset=data())
    model.train(2, data(), callbacks=[doctor], dataset_sink_mode=False)
    # (steps in the history at each call) the first step, as it ends (its compile's scratch), the two evaluations,
    # then before and after the end-of-run analyses
    assert calls == [0, 3, 6, 6, 6]
