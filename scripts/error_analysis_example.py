#!/usr/bin/env python
"""The example of docs/error-analysis.md and docs/rules/MSD407.md, on real data in a second (no MindSpore run).

scikit-learn's digits: a logistic regression trained on 600 clean images, validated on 600 more (``eval_dataset``)
and on the remaining 597 with Gaussian noise added (``target_eval_dataset``: noisier scans at deployment). Its
``decision_function`` stands for the network's logits. Prints the error budget, the error-analysis tables and
MSD407 as the Doctor's end of run computes them from the same numbers.

    python scripts/error_analysis_example.py
"""
from __future__ import annotations

import json

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression

from mindspore_doctor.analysis.budget import error_budget
from mindspore_doctor.analysis.errors import analyse_errors
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules.evaluation import distribution_shift
from mindspore_doctor.signals import EvalRecord, Metric


def main() -> None:
    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    train, val, target = order[:600], order[600:1200], order[1200:]
    model = LogisticRegression(max_iter=2000).fit(x[train], y[train])
    noisy = np.clip(x[target] + rng.normal(0.0, 0.35, x[target].shape), 0.0, 1.0)

    def accuracy(inputs: np.ndarray, labels: np.ndarray) -> Metric:
        return Metric("accuracy", float(np.mean(model.predict(inputs) == labels)), True)

    majority = np.bincount(y[train]).argmax()
    record = EvalRecord(
        epoch=1, task="multiclass", eval_metric=accuracy(x[val], y[val]), eval_samples=len(val),
        train_metric=accuracy(x[train], y[train]), train_samples=len(train),
        baseline=Metric("accuracy", float(np.mean(y[val] == majority)), True, "predicting the majority class"),
        target_eval_metric=accuracy(noisy, y[target]), target_eval_samples=len(target))
    budget = error_budget([record], target_error=0.01)
    analysis = analyse_errors("multiclass", model.decision_function(x[val]), y[val], family="classes", top=5)
    print(json.dumps({"error_budget": budget, "error_analysis": analysis}, indent=1))
    for finding in distribution_shift([record], DoctorConfig()):
        print(finding.code, finding.message)


if __name__ == "__main__":
    main()
