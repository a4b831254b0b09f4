"""Fingerprints and the single-process RankMonitor, in one process (no msrun)."""
import numpy as np
import mindspore as ms
from mindspore import nn

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.distributed import RankMonitor, rank_info
from mindspore_doctor.distributed.fingerprint import ParameterFingerprint, sample_digests
from mindspore_doctor.findings import Report
from mindspore_doctor.catalog import make_finding


def test_parameter_fingerprint_matches_numpy_and_leaves_weights_alone():
    net = nn.SequentialCell(nn.Dense(6, 5), nn.ReLU(), nn.Dense(5, 3))
    params = net.trainable_params()
    before = [p.asnumpy().copy() for p in params]
    fingerprint = ParameterFingerprint(params).measure()
    assert fingerprint.shape == (4, 5)
    for row, value in zip(fingerprint, before):
        flat = value.reshape(-1).astype(np.float64)
        expected = [flat.sum(), (flat * flat).sum(), flat[0], flat[flat.size // 2], flat[-1]]
        np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-6)
    assert all(np.array_equal(b, p.asnumpy()) for b, p in zip(before, params))
    params[1].set_data(ms.Tensor(before[1] + 1e-3))  # one bias moves: only its row changes
    changed = np.flatnonzero((ParameterFingerprint(params).measure() != fingerprint).any(axis=1))
    assert changed.tolist() == [1]


def test_sample_digests_are_per_row_over_all_columns():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    digests = sample_digests([ms.Tensor(x), ms.Tensor(np.array([0, 1, 0, 1], np.int32))])
    assert len(set(digests)) == 4
    assert digests == sample_digests([ms.Tensor(x), ms.Tensor(np.array([0, 1, 0, 1], np.int32))])
    assert digests[0] != sample_digests([ms.Tensor(x), ms.Tensor(np.array([1, 1, 0, 1], np.int32))])[0]


def test_single_process_is_a_no_op():
    """Without msrun/init() there is one rank: no collective, files where the user said, report unchanged."""
    assert rank_info().world_size == 1
    monitor = RankMonitor(DoctorConfig())
    assert not monitor.active and monitor.rank_dir("runs/a") == "runs/a"
    assert monitor.on_train_begin(None) == [] and monitor.on_step_end(None) == [] and monitor.on_train_end(None) == []
    report = Report(findings=[make_finding("MSD209", "m", location={"parameter": "w"})])
    assert monitor.merge_reports(report) is report
