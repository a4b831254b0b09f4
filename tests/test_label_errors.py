"""MSD311 and analysis/labels.py: confident learning (cleanlab) over synthetic class probabilities, and the
Trajectory of a training sample's probabilities. Pure numpy: nothing is trained here (the label-noise benchmark,
scripts/bench_labels.py, trains; its fast subset is test_the_anchor_recipe_on_digits_with_10_percent_noise)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from mindspore_doctor.analysis.labels import ClassNoise, LabelReport, LabelSuspect, SwappedPair, Trajectory, \
    label_report
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules.data import JUDGES, RULES, label_error_findings
from mindspore_doctor.rules.data.label_errors import LABEL_ERRORS


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def noisy(n=1000, k=10, rate=0.1, seed=0, pair=None, strength=4.0):
    """True classes, given labels with ``rate`` of them flipped (to a random other class, or within ``pair``),
    the flipped mask, and probabilities of a decent model of the *true* classes (out of sample: it did not learn
    the flips)."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, k, n)
    given = true.copy()
    if pair is None:
        flip = rng.random(n) < rate
        given[flip] = (true[flip] + rng.integers(1, k, int(flip.sum()))) % k
    else:
        a, b = pair
        flip = np.isin(true, pair) & (rng.random(n) < rate)
        given[flip] = np.where(true[flip] == a, b, a)
    logits = rng.normal(0.0, 1.0, (n, k))
    logits[np.arange(n), true] += strength
    return true, given, flip, _softmax(logits)


def _flagged_mask(report: LabelReport, n: int) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[[s.position for s in report.flagged]] = True
    return mask


def test_ten_percent_symmetric_noise_is_found_and_warned():
    true, given, flip, p = noisy()
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    found = _flagged_mask(report, given.size)
    precision = (found & flip).sum() / found.sum()
    recall = (found & flip).sum() / flip.sum()
    assert precision > 0.8 and recall > 0.8, (precision, recall)
    assert abs(report.noise_rate - flip.mean()) < 0.05, (report.noise_rate, flip.mean())
    qualities = [s.quality for s in report.flagged]
    assert qualities == sorted(qualities) and all(0.0 <= q <= 1.0 for q in qualities)
    assert all(s.likely != s.given for s in report.flagged[:20])
    assert [c.label for c in report.per_class] == list(range(10)) and sum(c.support for c in report.per_class) == 1000
    findings = label_error_findings([report], DoctorConfig())
    assert [f.code for f in findings] == ["MSD311"] and findings[0].severity.value == "warning"
    message = findings[0].message
    assert "the evaluation set" in message and f"{100 * report.noise_rate:.1f} %" in message
    assert f"flags {len(report.flagged)}" in message and "doctor_label_issues.csv" in message
    assert findings[0].evidence["flagged"] == len(report.flagged)
    assert findings[0].evidence["agreement"] == report.agreement == float(np.mean(p.argmax(1) == given))


def test_a_swapped_pair_is_named():
    true, given, flip, p = noisy(n=2000, rate=0.3, pair=(3, 8), seed=1)
    report = label_report(given, p, source="train-sample", method="synthetic", positions_note="index")
    top = report.swapped[:2]
    assert {(s.given, s.likely) for s in top} == {(3, 8), (8, 3)}, top
    assert all(s.count >= 10 and 0.1 < s.rate < 0.5 for s in top)
    noisiest = sorted(report.per_class, key=lambda c: -c.noise_rate)[:2]
    assert {c.label for c in noisiest} == {3, 8}
    [finding] = label_error_findings([report], DoctorConfig())
    assert "the training sample" in finding.message
    pair = top[0]
    assert f"{pair.given} -> {pair.likely}: {pair.count} samples" in finding.message


def test_clean_labels_get_no_warning():
    true, given, flip, p = noisy(rate=0.0)
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    assert report.noise_rate < 0.03 and not flip.any()
    assert label_error_findings([report], DoctorConfig()) == []


def test_a_weak_model_on_clean_labels_gets_no_warning():
    """cleanlab reads a weak model's own mistakes as label noise; the rule does not warn on them."""
    true, given, flip, p = noisy(n=2000, rate=0.0, strength=2.0, seed=1)  # 66 % accurate
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    assert report.noise_rate > 0.1 and len(report.flagged) > 100 and 0.6 < report.agreement < 0.7
    assert label_error_findings([report], DoctorConfig()) == []  # 0.15 < 0.5 x 0.34
    assert label_error_findings([report], DoctorConfig(label_noise_min_share=0.4))
    true, given, flip, p = noisy(n=2000, rate=0.0, strength=1.0, seed=1)  # 36 % accurate
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    assert report.noise_rate > 0.5 and report.agreement < 0.5
    assert label_error_findings([report], DoctorConfig()) == []
    assert label_error_findings([report], DoctorConfig(label_noise_min_agreement=0.2))


def test_a_model_at_chance_on_a_binary_task_gets_no_warning():
    """50 % agreement is chance on a balanced binary task (fault program f_underfit_no_activation: a linear model on
    rings, cleanlab estimated half of the labels wrong): the bar is set above the majority class's share."""
    rng = np.random.default_rng(3)
    given = rng.integers(0, 2, 1000)
    p1 = np.clip(0.5 + 0.2 * rng.standard_normal(1000), 0.01, 0.99)
    report = label_report(given, np.stack([1 - p1, p1], axis=1), source="eval", method="synthetic",
                          positions_note="index")
    assert 0.4 < report.agreement < 0.6 and report.noise_rate > 0.3 and len(report.flagged) > 100
    assert label_error_findings([report], DoctorConfig()) == []
    assert label_error_findings([report], DoctorConfig(label_noise_min_agreement=-1.0, label_noise_min_share=0.0))  # no bar


def test_the_thresholds_are_options():
    true, given, flip, p = noisy(rate=0.1, seed=2)
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    assert label_error_findings([report], DoctorConfig())
    assert label_error_findings([report], DoctorConfig(label_noise_min_rate=0.5)) == []
    assert label_error_findings([report], DoctorConfig(label_noise_min_flagged=10_000)) == []
    assert label_error_findings([report], DoctorConfig(label_noise_min_samples=5000)) == []


def test_too_few_samples_are_not_judged():
    true, given, flip, p = noisy(n=60, rate=0.3, seed=3)
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    assert report.noise_rate > 0.1 and len(report.flagged) >= 10
    assert label_error_findings([report], DoctorConfig()) == []  # 60 < label_noise_min_samples


def test_edge_cases_do_not_crash():
    # a class missing from the labels (column 2 of 4 never given)
    true, given, flip, p = noisy(n=300, k=4, rate=0.0, seed=4)
    keep = given != 2
    report = label_report(given[keep], p[keep], source="eval", method="m", positions_note="i")
    assert report.classes == 4 and 2 not in [c.label for c in report.per_class]
    # a class with one sample
    given1 = given.copy()
    given1[given1 == 3] = 0
    given1[0] = 3
    label_report(given1, p, source="eval", method="m", positions_note="i")
    # binary, as two columns and as one probability of class 1
    true, given, flip, p2 = noisy(n=400, k=2, rate=0.1, seed=5)
    two = label_report(given, p2, source="eval", method="m", positions_note="i")
    one = label_report(given, p2[:, 1], source="eval", method="m", positions_note="i")
    assert two.classes == one.classes == 2 and len(two.flagged) == len(one.flagged) > 0
    # one class only, one sample, none
    assert label_report(np.zeros(5, int), np.tile([0.9, 0.1], (5, 1)), source="eval", method="m",
                        positions_note="i").flagged == []
    assert label_report([1], [[0.2, 0.8]], source="eval", method="m", positions_note="i").noise_rate == 0.0
    assert label_report(np.zeros(0, int), np.zeros((0, 3)), source="eval", method="m", positions_note="i").samples == 0
    # positions and hashes are carried to the suspects
    true, given, flip, p = noisy(n=500, rate=0.2, seed=6)
    positions = np.arange(500) * 3 + 7
    report = label_report(given, p, source="eval", method="m", positions_note="i", positions=positions,
                          sha1=[f"h{i}" for i in range(500)])
    s = report.flagged[0]
    assert (s.position - 7) % 3 == 0 and s.sha1 == f"h{(s.position - 7) // 3}"


def test_bad_inputs_raise_value_error():
    true, given, flip, p = noisy(n=200, k=3, rate=0.1, seed=7)
    bad = p.copy()
    bad[5, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        label_report(given, bad, source="eval", method="m", positions_note="i")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        label_report(np.r_[given[:-1], 3], p, source="eval", method="m", positions_note="i")
    with pytest.raises(ValueError, match="199 labels for 200"):
        label_report(given[:-1], p, source="eval", method="m", positions_note="i")
    with pytest.raises(ValueError, match="integer class ids"):
        label_report(given + 0.5, p, source="eval", method="m", positions_note="i")


def test_the_report_round_trips_through_json():
    true, given, flip, p = noisy(n=400, rate=0.15, seed=8)
    report = label_report(given, p, source="folds", method="5 folds", positions_note="index in the training set")
    again = LabelReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report
    assert isinstance(again.flagged[0], LabelSuspect) and isinstance(again.per_class[0], ClassNoise)
    assert isinstance(again.swapped[0], SwappedPair)


def test_the_trajectory_keeps_running_sums():
    rng = np.random.default_rng(9)
    labels = rng.integers(0, 4, 50)
    traj = Trajectory(labels)
    seen = [_softmax(rng.normal(0, 2, (50, 4))) for _ in range(7)]
    traj.add(seen[0])
    size = traj.nbytes
    for probs in seen[1:]:
        traj.add(probs)
    assert traj.evaluations == 7 and traj.nbytes == size + 6 * 8  # bounded: one number per evaluation, no array
    assert traj.nbytes == Trajectory.footprint(50, 4) + 7 * 8  # what the Doctor checks against its memory bound
    stack = np.stack(seen)
    given = stack[:, np.arange(50), labels]
    other = stack.copy()
    other[:, np.arange(50), labels] = -1
    np.testing.assert_allclose(traj.mean_probs(), stack.mean(axis=0))
    early = traj.early_evaluations
    np.testing.assert_allclose(traj.pred_probs(), stack[:early].mean(axis=0))
    assert traj.agreement == [float((p.argmax(1) == labels).mean()) for p in seen]
    np.testing.assert_allclose(traj.last_probs(), seen[-1])
    np.testing.assert_allclose(traj.confidence(), given.mean(axis=0))
    np.testing.assert_allclose(traj.variability(), given.std(axis=0), atol=1e-7)
    np.testing.assert_allclose(traj.aum(), (given - other.max(axis=2)).mean(axis=0))


def test_the_trajectory_leaves_out_the_evaluations_after_memorisation():
    """Agreement with the given labels rises fast (0.5, 0.8), plateaus (0.82: +0.02, 0.825: +0.005 -> plateau),
    then creeps up as the wrong labels are memorised (0.84 > 0.825 + 0.01): cleanlab gets the first 4."""
    labels = np.zeros(200, dtype=np.int64)
    traj = Trajectory(labels)
    for share in (0.5, 0.8, 0.82, 0.825, 0.84, 0.9, 1.0):
        probs = np.tile([0.3, 0.7], (200, 1))
        probs[: int(round(share * 200))] = [0.7, 0.3]
        traj.add(probs)
    assert traj.memorising_from == 5 and traj.early_evaluations == 4 and traj.evaluations == 7
    np.testing.assert_allclose(traj.pred_probs()[:, 0].mean(), 0.3 + 0.4 * np.mean([0.5, 0.8, 0.82, 0.825]))
    still = Trajectory(labels)  # still learning: every evaluation is early
    for share in (0.2, 0.4, 0.6, 0.8):
        probs = np.tile([0.3, 0.7], (200, 1))
        probs[: int(round(share * 200))] = [0.7, 0.3]
        still.add(probs)
    assert still.memorising_from is None and still.early_evaluations == 4


def test_the_trajectory_rejects_what_it_cannot_use():
    traj = Trajectory(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="no evaluation"):
        traj.pred_probs()
    with pytest.raises(ValueError, match="non-finite"):
        traj.add(np.array([[np.nan, 0.5, 0.5], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]]))
    traj.add(np.eye(3))
    with pytest.raises(ValueError, match="4 classes"):
        traj.add(np.full((3, 4), 0.25))
    with pytest.raises(ValueError, match="2 rows"):
        traj.add(np.eye(3)[:2])
    assert traj.evaluations == 1


def test_the_trajectory_separates_wrong_labels_from_hard_examples():
    """A wrong label: the model never gives it much probability (low confidence, negative margin), even when it
    memorises it late; a hard example: the probability of its right label climbs."""
    labels = np.array([0, 0])
    traj = Trajectory(labels)
    for epoch in range(10):
        late = 0.1 + 0.08 * max(epoch - 6, 0)  # memorised at the end only
        climbing = 0.3 + 0.06 * epoch
        traj.add(np.array([[late, 1 - late], [climbing, 1 - climbing]]))
    assert traj.aum()[0] < 0 < traj.aum()[1] + 0.2 and traj.confidence()[0] < traj.confidence()[1]
    report = label_report(labels, traj.pred_probs(), source="train-sample", method="m", positions_note="i")
    assert report.samples == 2


def test_msd311_is_in_the_catalog_but_not_a_data_check():
    from mindspore_doctor.catalog import RULES as CATALOG

    assert CATALOG["MSD311"] is LABEL_ERRORS and LABEL_ERRORS in RULES
    assert LABEL_ERRORS not in [rule for rule, _ in JUDGES]


def test_the_diagnosis_names_wrong_labels():
    from mindspore_doctor.diagnosis import diagnose

    true, given, flip, p = noisy(seed=10)
    report = label_report(given, p, source="eval", method="synthetic", positions_note="index")
    diagnosis = diagnose(label_error_findings([report], DoctorConfig()))
    assert diagnosis.top.id == "wrong-labels"
    assert any("doctor_label_issues.csv" in remedy for remedy in diagnosis.top.remedies)


def test_label_reports_apart_gives_the_in_process_reports_and_their_errors():
    """The Doctor runs cleanlab in a child process (its imports stay out of the training process): same reports."""
    from mindspore_doctor.analysis.labels import label_reports_apart

    true, given, flip, p = noisy(rate=0.1, seed=4)
    request = dict(labels=given, pred_probs=p, source="eval", method="synthetic", positions_note="index",
                   positions=np.arange(len(given)) + 7, sha1=[f"{i:012x}" for i in range(len(given))])
    apart = label_reports_apart([request, {**request, "source": "train-sample"}])
    assert [r.to_dict() for r in apart] == [label_report(**request).to_dict(),
                                            label_report(**{**request, "source": "train-sample"}).to_dict()]
    good, bad = label_reports_apart([request, {**request, "pred_probs": np.full_like(p, np.nan)}])
    assert good.to_dict() == apart[0].to_dict() and isinstance(bad, str) and "finite" in bad  # one bad source only


def test_a_child_past_its_time_skips_the_label_analysis():
    """Never redone in the training process: the analysis is skipped (MSD002 through the guard)."""
    from mindspore_doctor.analysis.labels import label_reports_apart
    from mindspore_doctor.rule import CheckSkipped

    true, given, flip, p = noisy(rate=0.1, seed=4)
    with pytest.raises(CheckSkipped, match="longer than 0 s"):
        label_reports_apart([dict(labels=given, pred_probs=p, source="eval", method="synthetic",
                                  positions_note="index")], timeout=0.01)
