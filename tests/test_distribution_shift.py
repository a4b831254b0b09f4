"""MSD407 distribution-shift (pure rule on EvalRecords) and the error budget in the ranked diagnosis."""
from __future__ import annotations

import numpy as np
import pytest

from mindspore_doctor.analysis.budget import BIAS, REMEDIES, SHIFT, VARIANCE, error_budget
from mindspore_doctor.catalog import make_finding
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.diagnosis import diagnose
from mindspore_doctor.findings import Report
from mindspore_doctor.rules.evaluation import distribution_shift, evaluation_findings
from mindspore_doctor.signals import EvalRecord, Metric

CFG = DoctorConfig()


def acc(value):
    return Metric("accuracy", value, True)


def shifted(evaluated, target, samples=400, target_samples=400, train=None):
    r = EvalRecord(epoch=5, task="multiclass", train_loss=0.1, eval_loss=0.2, eval_metric=acc(evaluated),
                   eval_samples=samples, train_metric=None if train is None else acc(train),
                   baseline=Metric("accuracy", 0.1, True, "predicting the majority class"))
    r.target_eval_metric = acc(target)
    r.target_eval_samples = target_samples
    return r


def test_msd407_names_both_errors_and_sample_counts():
    found = distribution_shift([shifted(0.96, 0.69, samples=400, target_samples=300)], CFG)
    assert [f.code for f in found] == ["MSD407"]
    message = found[0].message
    assert "31.0% over 300 samples" in message and "4.0% over 400 samples" in message and "27.0 points" in message
    assert found[0].evidence["target_eval_error"] == pytest.approx(0.31)
    assert found[0].evidence["noise"] > 0 and found[0].location["data"] == "target_eval"
    assert found[0].suggestion.startswith(REMEDIES[SHIFT][0])
    assert "MSD407" in [f.code for f in evaluation_findings([shifted(0.96, 0.69)], CFG)]  # judged with the rest


def test_msd407_quiet_within_noise_below_the_margin_or_without_a_target_set():
    assert distribution_shift([shifted(0.90, 0.85, samples=100, target_samples=100)], CFG) == []  # within noise
    # 10.0 % vs 11.5 % on 100 000 samples each: real, but under the 25 % margin of the eval error
    assert distribution_shift([shifted(0.900, 0.885, samples=100000, target_samples=100000)], CFG) == []
    assert distribution_shift([shifted(0.96, 0.99)], CFG) == []  # the target set is easier
    plain = shifted(0.96, 0.5)
    plain.target_eval_metric = None
    assert distribution_shift([plain], CFG) == [] and distribution_shift([], CFG) == []
    assert distribution_shift([shifted(0.96, 0.69)], DoctorConfig(shift_margin=10.0)) == []


def test_msd407_a_perfect_eval_split_still_has_noise():
    """0 errors in 50 eval samples vs 1 in 50 target samples is no shift (pooled two-proportion noise)."""
    assert distribution_shift([shifted(1.0, 0.98, samples=50, target_samples=50)], CFG) == []


def test_msd407_on_mse():
    r = EvalRecord(epoch=2, task="regression", eval_metric=Metric("mse", 0.10, False), eval_samples=500,
                   eval_loss=0.10, eval_loss_se=0.005)
    r.target_eval_metric, r.target_eval_loss, r.target_eval_loss_se = Metric("mse", 0.40, False), 0.40, 0.02
    found = distribution_shift([r], CFG)
    assert [f.code for f in found] == ["MSD407"] and "mse on target_eval_dataset (0.4" in found[0].message
    r.target_eval_metric, r.target_eval_loss = Metric("mse", 0.11, False), 0.11
    assert distribution_shift([r], CFG) == []


# --- the budget in the diagnosis -------------------------------------------------------------------------------


def _f(code, **kw):
    return make_finding(code, "x", **kw)


def test_a_shift_finding_ranks_the_shift_cause_with_the_guides_remedies():
    report = Report([_f("MSD407")])
    report.meta["error_budget"] = error_budget([shifted(0.96, 0.69, train=0.97)], target_error=0.01)
    top = diagnose(report).top
    assert top.id == "distribution-shift" and top.remedies[:3] == list(REMEDIES[SHIFT])
    assert any(e["code"] == "error budget" and "distribution shift dominates" in e["detail"] for e in top.evidence)
    assert top.evidence_codes == ["MSD407"]


def test_the_dominant_term_reorders_causes_and_brings_the_guides_remedies():
    """MSD401 with MSD405: the mode-misuse cause (3 + 0.5) outranks overfitting (3) until the budget says variance
    dominates; then overfitting leads, with the guide's variance remedies first and its own after."""
    findings = [_f("MSD401"), _f("MSD405")]
    plain = diagnose(Report(list(findings)))
    assert plain.top.id == "train-eval-mode-misuse"
    report = Report(list(findings))
    report.meta["error_budget"] = error_budget([shifted(0.80, 0.80, train=0.99)], target_error=0.01)
    assert report.meta["error_budget"]["dominant"] == VARIANCE
    ranked = diagnose(report)
    assert ranked.top.id == "overfitting"
    assert ranked.top.remedies[: len(REMEDIES[VARIANCE])] == list(REMEDIES[VARIANCE])
    assert "Stop earlier (keep the checkpoint with the best eval loss)." in ranked.top.remedies
    assert "train-eval-mode-misuse" in ranked.cause_ids()


def test_a_budget_alone_proposes_no_cause_and_only_a_measured_bias_supports_underfitting():
    report = Report([])
    report.meta["error_budget"] = error_budget([shifted(0.80, 0.80, train=0.99)], target_error=0.01)
    assert diagnose(report).causes == []

    def budget_evidence(budget):
        underfit = Report([_f("MSD402")])
        underfit.meta["error_budget"] = budget
        top = diagnose(underfit).top
        assert top.id == "training-too-short"
        return [e for e in top.evidence if e["code"] == "error budget"]

    # target unknown: the bias is only "at most 50 %", not dominant, no support
    unknown = error_budget([shifted(0.5, 0.5, train=0.5)])
    assert unknown["dominant"] is None and budget_evidence(unknown) == []
    # ... nor a cost: a term the budget could not measure leaves the cause's confidence as without a budget
    underfit = Report([_f("MSD402")])
    alone = diagnose(underfit).top.confidence
    underfit.meta["error_budget"] = unknown
    assert diagnose(underfit).top.confidence == alone
    # a budget written when bounds could dominate: the bound still supports nothing
    assert budget_evidence({**unknown, "dominant": BIAS}) == []
    # human-level error 5 %: 45 points of measured avoidable bias
    known = budget_evidence(error_budget([shifted(0.5, 0.5, train=0.5)], target_error=0.05))
    assert known and known[0]["weight"] == 2.0
    assert known[0]["detail"] == "avoidable bias dominates the error budget (45.0%)"


# --- end to end: a real training with a second validation set -------------------------------------------------


def _data(n, seed, shift=0.0):
    import mindspore.dataset as ds

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    x[:, 0] += shift  # the deployment data: one feature offset
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(32)


def _run(target_shift):
    from mindspore import nn
    from mindspore.train import Model

    from mindspore_doctor import Doctor

    net = nn.SequentialCell(nn.Dense(8, 32), nn.ReLU(), nn.Dense(32, 2))
    doctor = Doctor(eval_dataset=_data(512, 1), target_eval_dataset=_data(512, 2, shift=target_shift),
                    eval_every=1, ignore=["MSD3"], probe_every=32, print_summary=False)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    Model(net, loss, nn.Momentum(net.trainable_params(), 0.05, 0.9)).train(
        3, _data(1024, 0), callbacks=[doctor], dataset_sink_mode=False)
    return doctor.report


def test_msd407_diagnosed_on_a_shifted_target_set_and_not_on_its_twin():
    shifted_run = _run(1.5)
    assert [f.code for f in shifted_run.findings if f.code == "MSD407"] == ["MSD407"]
    budget = shifted_run.meta["error_budget"]
    assert budget["dominant"] == SHIFT and budget["target_eval_error"] > 0.2
    assert shifted_run.meta["diagnosis"]["causes"][0]["id"] == "distribution-shift"
    analysis = shifted_run.meta["error_analysis"]
    assert analysis["task"] == "multiclass" and analysis["samples"] == 512
    same = _run(0.0)
    assert "MSD407" not in {f.code for f in same.findings}
    assert same.meta["error_budget"]["dominant"] != SHIFT
