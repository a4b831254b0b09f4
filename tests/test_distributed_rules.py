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


def test_merge_keeps_a_finding_open_on_any_rank_open_and_resolves_it_only_when_every_rank_did():
    """A dead ReLU that recovered on rank 0 but not on rank 1 is open in the merged report (it kept rank 0's
    resolved copy); resolved on both ranks, it ends resolved from the later of their steps."""
    def dead(resolved_at=None):
        finding = make_finding("MSD212", "dead", location={"cell": "relu"}, step=50)
        if resolved_at is not None:
            finding.resolve(resolved_at)
        return finding

    (open_,) = rules.merge_rank_findings({0: [dead(100)], 1: [dead()], 2: [dead(150)]})
    assert open_.severity.value == "warning" and not open_.resolved
    assert open_.location["ranks"] == [0, 1, 2] and open_.evidence["resolved_on_ranks"] == [0, 2]
    (passed,) = rules.merge_rank_findings({0: [dead(150)], 1: [dead(100)]})
    assert passed.resolved and passed.severity.value == "info" and passed.evidence["resolved_step"] == 150
    assert passed.location["ranks"] == [0, 1] and "resolved_on_ranks" not in passed.evidence
    (seen_once,) = rules.merge_rank_findings({0: [], 1: [dead(100)]})  # raised on one rank only: its state
    assert seen_once.resolved and seen_once.location["ranks"] == [1]
