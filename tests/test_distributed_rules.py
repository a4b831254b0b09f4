"""MSD501-503 rules and the cross-rank merge, on plain numbers (no MindSpore, no msrun)."""
import numpy as np
import pytest

from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import distributed as rules

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight"]
CONFIG = DoctorConfig()


def prints(seed: int = 0) -> np.ndarray:
    return np.random.RandomState(seed).randn(len(NAMES), 5)


def test_init_mismatch_names_first_parameter_and_ranks():
    rank1 = prints()
    rank1[1, 0] += 0.5
    rank1[2, 3] += 0.1
    [finding] = rules.rank_init_mismatch(NAMES, {0: prints(), 1: rank1}, CONFIG)
    assert finding.code == "MSD501" and finding.severity.value == "error"
    assert finding.location == {"parameter": "fc1.bias", "ranks": [0, 1]}
    assert finding.evidence["parameters"] == ["fc1.bias", "fc2.weight"]
    assert "`fc1.bias`" in finding.message and "set_seed" in finding.suggestion


def test_all_reduce_rounding_is_not_a_mismatch():
    """Near miss: a relative difference far below rank_rtol (float reduction order) is equal."""
    rank1 = prints() * (1 + 1e-7)
    assert rules.rank_init_mismatch(NAMES, {0: prints(), 1: rank1}, CONFIG) == []
    assert rules.rank_init_mismatch(NAMES, {0: prints(), 1: prints() * (1 + 1e-3)}, CONFIG)


def test_nan_fingerprint_differs_and_missing_rank_is_ignored():
    broken = prints()
    broken[0, 0] = np.nan
    assert rules.differing_parameters(NAMES, {0: prints(), 1: broken}, CONFIG).keys() == {"fc1.weight"}
    assert rules.rank_init_mismatch(NAMES, {0: prints(), 1: None}, CONFIG) == []


def test_divergence_reports_only_parameters_that_were_equal():
    later = prints()
    later[:, 1] += 1.0  # every parameter differs now
    [finding] = rules.rank_divergence(NAMES, {0: prints(), 1: later}, {"fc1.weight"}, 40, CONFIG)
    assert finding.code == "MSD502" and finding.step == 40
    assert finding.location["parameter"] == "fc1.bias"
    assert finding.evidence["differing_parameters"] == 2
    assert "DistributedGradReducer" in finding.suggestion
    assert rules.rank_divergence(NAMES, {0: prints(), 1: prints()}, set(), 40, CONFIG) == []


def test_data_duplication_on_shared_samples_only():
    same = [f"s{i}" for i in range(16)]
    [finding] = rules.rank_data_duplication({0: same, 1: list(same), 2: [f"t{i}" for i in range(16)]}, 2, CONFIG)
    assert finding.code == "MSD503" and finding.location["ranks"] == [0, 1] and finding.step == 2
    assert finding.evidence["shared_fraction"] == 1.0
    # Near miss: shards that overlap a little (a duplicated sample in the data) are fine.
    assert rules.rank_data_duplication({0: same, 1: same[:3] + [f"t{i}" for i in range(13)]}, 2, CONFIG) == []


@pytest.mark.parametrize("ranks_in_location", [False, True])
def test_merge_says_which_ranks(ranks_in_location):
    def finding(code, location):
        return make_finding(code, "m", location=location)

    cross = {"parameter": "w", "ranks": [0, 1]} if ranks_in_location else {"parameter": "w"}
    per_rank = {0: [finding("MSD209", {"parameter": "w"}), finding("MSD501", cross)],
                1: [finding("MSD209", {"parameter": "w"}), finding("MSD501", cross),
                    finding("MSD212", {"cell": "relu"})]}
    merged = {(f.code, f.location.get("parameter") or f.location.get("cell")): f.location["ranks"]
              for f in rules.merge_rank_findings(per_rank)}
    assert merged == {("MSD209", "w"): [0, 1], ("MSD501", "w"): [0, 1], ("MSD212", "relu"): [1]}
