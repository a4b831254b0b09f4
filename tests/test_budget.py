"""analysis.budget: the bias-variance budget of the last evaluation, on hand-made records (pure)."""
from __future__ import annotations

import json

import pytest

from mindspore_doctor.analysis.budget import BIAS, REMEDIES, SHIFT, TERMS, VALIDATION, VARIANCE, error_budget
from mindspore_doctor.signals import EvalRecord, Metric


def acc(value):
    return Metric("accuracy", value, True)


def record(train=None, evaluated=0.9, samples=1000, baseline=0.1, target_eval=None, holdout=None, **extra):
    r = EvalRecord(epoch=5, task="multiclass", eval_metric=acc(evaluated), eval_samples=samples,
                   train_metric=None if train is None else acc(train),
                   baseline=Metric("accuracy", baseline, True, "predicting the majority class"))
    r.target_eval_metric = None if target_eval is None else acc(target_eval)  # EvalRecord fields of the session
    r.holdout_metric = None if holdout is None else acc(holdout)
    for name, value in extra.items():
        setattr(r, name, value)
    return r


def rows(budget):
    return {row["term"]: row for row in budget["rows"]}


def test_each_term_with_a_target_and_both_extra_sets():
    budget = error_budget([record(train=0.95, evaluated=0.90, target_eval=0.80, holdout=0.70)], target_error=0.02)
    assert [row["term"] for row in budget["rows"]] == list(TERMS)
    by = rows(budget)
    assert by["target error"]["value"] == 0.02 and by["target error"]["bound"] is None
    assert by[BIAS]["value"] == pytest.approx(0.03) and by[BIAS]["bound"] is None
    assert by[VARIANCE]["value"] == pytest.approx(0.05)
    assert by[SHIFT]["value"] == pytest.approx(0.10)
    assert by[VALIDATION]["value"] == pytest.approx(0.10) and "target-eval" in by[VALIDATION]["note"]
    assert budget["metric"] == "error" and budget["target_source"] == "target_error" and budget["target"] == 0.02
    assert budget["eval_error"] == pytest.approx(0.1) and budget["holdout_error"] == pytest.approx(0.3)
    assert budget["baseline_error"] == pytest.approx(0.9)
    json.dumps(budget, allow_nan=False)


@pytest.mark.parametrize("train, evaluated, target_eval, holdout, dominant", [
    (0.70, 0.68, None, None, BIAS),            # underfits: 28 points of avoidable bias
    (0.99, 0.80, None, None, VARIANCE),        # overfits
    (0.97, 0.95, 0.70, None, SHIFT),           # fine on data like the train data, not on the test distribution
    (0.97, 0.95, None, 0.80, VALIDATION),      # tuned on the validation set until it flattered the model
])
def test_the_dominant_term_and_the_guides_remedies_in_order(train, evaluated, target_eval, holdout, dominant):
    budget = error_budget([record(train, evaluated, target_eval=target_eval, holdout=holdout)], target_error=0.01)
    assert budget["dominant"] == dominant
    assert budget["remedies"] == list(REMEDIES[dominant])


def test_the_guides_orders():
    assert REMEDIES[BIAS][0].startswith("Use a bigger model") and "regularisation" in REMEDIES[BIAS][1]
    assert REMEDIES[VARIANCE][0] == "Add more training data." and REMEDIES[VARIANCE][-1] == "Use a smaller model."
    assert REMEDIES[SHIFT][0].startswith("Error analysis") and REMEDIES[SHIFT][-1] == "Domain adaptation."


def test_no_term_is_dominant_within_sampling_noise():
    """99 % train vs 98 % eval accuracy on 200 samples: the gap is within two standard errors (~2.4 points)."""
    budget = error_budget([record(train=0.99, evaluated=0.98, samples=200)], target_error=0.01)
    assert rows(budget)[VARIANCE]["value"] == pytest.approx(0.01)
    assert rows(budget)[VARIANCE]["noise"] > 0.01
    assert budget["dominant"] is None and budget["remedies"] == []
    # the same gap on 20000 samples is real
    large = error_budget([record(train=0.99, evaluated=0.98, samples=20000)], target_error=0.005)
    assert large["dominant"] == VARIANCE


def test_the_train_and_extra_sample_counts_set_the_noise():
    small_train = error_budget([record(train=0.99, evaluated=0.97, samples=5000, train_samples=50)],
                               target_error=0.0)
    large_train = error_budget([record(train=0.99, evaluated=0.97, samples=5000, train_samples=5000)],
                               target_error=0.0)
    assert rows(small_train)[VARIANCE]["noise"] > rows(large_train)[VARIANCE]["noise"]
    assert large_train["dominant"] == VARIANCE and small_train["dominant"] != VARIANCE
    shift = error_budget([record(train=0.97, evaluated=0.95, target_eval=0.92, target_eval_samples=30)],
                         target_error=0.0)
    assert rows(shift)[SHIFT]["value"] == pytest.approx(0.03) and rows(shift)[SHIFT]["noise"] > 0.03


def test_without_a_target_the_bias_is_an_upper_bound_and_the_baseline_bounds_the_target():
    budget = error_budget([record(train=0.95, evaluated=0.80, baseline=0.3)])
    by = rows(budget)
    assert budget["target"] is None and budget["target_source"] == "unknown"
    assert by["target error"]["value"] == pytest.approx(0.7) and by["target error"]["bound"] == "upper"
    assert "predicting the majority class" in by["target error"]["note"]
    assert by[BIAS]["value"] == pytest.approx(0.05) and by[BIAS]["bound"] == "upper"
    assert budget["dominant"] == VARIANCE


def test_a_healthy_run_without_a_target_has_no_dominant_term():
    """98.3 % train, 97.5 % eval accuracy: "avoidable bias at most 1.7 %" is a bound, not a measured underfit; the
    variance is within noise. No term dominates and no underfitting remedies are offered."""
    budget = error_budget([record(train=0.983, evaluated=0.975, samples=1000)])
    by = rows(budget)
    assert by[BIAS]["value"] == pytest.approx(0.017) and by[BIAS]["bound"] == "upper"
    assert by[BIAS]["value"] > by[BIAS]["noise"]      # above its noise, still not dominant: only a bound
    assert "target_error=" in by[BIAS]["note"] and "human-level" in by[BIAS]["note"]
    assert budget["dominant"] is None and budget["remedies"] == []


def test_a_real_underfit_with_a_target_has_the_avoidable_bias_dominant():
    """70 % train, 68 % eval accuracy where humans err 3 %: 27 points of measured avoidable bias."""
    underfit = [record(train=0.70, evaluated=0.68, samples=1000)]
    budget = error_budget(underfit, target_error=0.03)
    assert rows(budget)[BIAS]["value"] == pytest.approx(0.27) and rows(budget)[BIAS]["bound"] is None
    assert budget["dominant"] == BIAS and budget["remedies"] == list(REMEDIES[BIAS])
    # the same run without the target: the bias is only bounded, nothing else is measured above noise
    unknown = error_budget(underfit)
    assert rows(unknown)[BIAS]["bound"] == "upper" and unknown["dominant"] is None


def test_unmeasured_terms_say_what_would_measure_them():
    budget = error_budget([record(evaluated=0.9)])
    by = rows(budget)
    assert by[BIAS]["value"] is None and by[VARIANCE]["value"] is None and "train" in by[VARIANCE]["note"]
    assert by[SHIFT]["value"] is None and "target_eval_dataset" in by[SHIFT]["note"]
    assert by[VALIDATION]["value"] is None and "holdout_dataset" in by[VALIDATION]["note"]
    assert budget["dominant"] is None
    assert rows(error_budget([record(evaluated=0.9, holdout=0.8)]))[VALIDATION]["note"] == "holdout error - eval error"


def test_regression_budget_in_mse_with_the_loss_noise_when_the_loss_is_the_mse():
    r = EvalRecord(epoch=3, task="regression", eval_metric=Metric("mse", 0.30, False), eval_samples=400,
                   train_metric=Metric("mse", 0.10, False), baseline=Metric("mse", 1.0, False, "predicting the label mean"),
                   train_loss=0.10, train_loss_se=0.01, eval_loss=0.30, eval_loss_se=0.02)
    budget = error_budget([r], target_error=0.05)
    by = rows(budget)
    assert budget["metric"] == "mse" and budget["baseline_error"] == 1.0
    assert by[BIAS]["value"] == pytest.approx(0.05) and by[VARIANCE]["value"] == pytest.approx(0.2)
    assert by[VARIANCE]["noise"] == pytest.approx(2 * (0.01 ** 2 + 0.02 ** 2) ** 0.5)
    assert budget["dominant"] == VARIANCE
    r.eval_loss = 0.9  # an L1 or Huber loss: its noise is not the MSE's, unknown
    assert rows(error_budget([r]))[VARIANCE]["noise"] is None


def test_no_budget_without_an_eval_metric():
    assert error_budget([]) is None
    assert error_budget([EvalRecord(epoch=1, train_loss=0.5, eval_loss=0.6)]) is None
    assert error_budget([record(evaluated=float("nan"))]) is None
