"""Diagnosis: the knowledge base is consistent, the ranking follows the evidence, real runs rank the true cause first."""
from __future__ import annotations

import json

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn

from mindspore_doctor import lint
from mindspore_doctor.catalog import RULES, make_finding
from mindspore_doctor import check_data
from mindspore_doctor.diagnosis import CAUSES, PREDICATES, diagnose
from mindspore_doctor.findings import Report


def test_knowledge_base_is_consistent_and_covers_the_catalog_categories():
    ids = [c.id for c in CAUSES]
    assert len(ids) == len(set(ids))
    for cause in CAUSES:
        assert cause.remedies and any(s.key and s.weight > 0 for s in cause.symptoms), cause.id
        for s in cause.symptoms:
            assert s.code in RULES and (s.predicate is None or s.predicate in PREDICATES), (cause.id, s)
    assert {"hyperparameters", "data", "algorithm/API", "structure", "initialisation",
            "mixed precision"} <= {c.category for c in CAUSES}


def _report(*findings):
    return Report(list(findings))


def _f(code, step=None, **kw):
    return make_finding(code, "x", step=step, **kw)


def test_issue_example_lr_too_low():
    report = _report(_f("MSD203", 40), *[_f("MSD210", location={"parameter": p}) for p in ("a.w", "b.w")],
                     _f("MSD111", evidence={"lr": 1e-7, "range": [1e-6, 1.0]}))
    assert diagnose(report, weight_layers=["a.w", "b.w"]).top.id == "learning-rate-too-low"


def test_issue_example_layer_frozen():
    report = _report(_f("MSD203", 40), _f("MSD209", location={"parameter": "head.fc.weight"}),
                     _f("MSD102", location={"parameter": "head.fc.weight"}))
    assert diagnose(report, weight_layers=["body.weight", "head.fc.weight"]).top.id == "layer-frozen"


def test_issue_example_nan_in_data():
    report = _report(_f("MSD201", 1), _f("MSD301", location={"column": "x"}))
    diagnosis = diagnose(report)
    assert diagnosis.top.id == "nan-in-input-data"
    assert "learning-rate-too-high" not in diagnosis.cause_ids()  # NaN at step 1 is not a step-size problem


def test_predicates_near_misses():
    # MSD210 on 1 of 5 layers is not "learning rate too low"
    report = _report(_f("MSD210", location={"parameter": "a.w"}))
    assert "learning-rate-too-low" not in diagnose(report, weight_layers=list("abcde")).cause_ids()
    # NaN after step 3 without data problems points at the learning rate
    assert diagnose(_report(_f("MSD201", 50), _f("MSD208", 40))).top.id == "learning-rate-too-high"


def test_a_passed_condition_supports_a_cause_but_is_not_one():
    """The finding lifecycle: a warm-up spike the loss recovered from (MSD202 resolved) is no diagnosis alone."""
    spike = _f("MSD202", 30)
    spike.resolve(90)
    assert diagnose(_report(spike)).causes == []
    symptoms = diagnose(_report(spike)).symptoms
    assert symptoms[0]["code"] == "MSD202" and symptoms[0]["resolved"] == 1
    still = diagnose(_report(spike, _f("MSD211", 60, location={"parameter": "fc.weight"})))
    assert still.top.id == "learning-rate-too-high"
    evidence = {e["code"]: e["detail"] for e in still.top.evidence}
    assert evidence["MSD202"] == "present (resolved by step 90)" and evidence["MSD211"] == "present"


def test_no_symptom_no_cause_and_meta_roundtrip():
    assert diagnose(_report(_f("MSD002"))).causes == []
    report = _report(_f("MSD107"))
    report.meta["diagnosis"] = diagnose(report).to_dict()
    data = json.loads(report.to_json())
    assert data["diagnosis"]["causes"][0]["id"] == "loss-activation-mismatch"
    assert data["diagnosis"]["causes"][0]["evidence_codes"] == ["MSD107"]
    assert "Loss wired" in diagnose(report).to_text()


# --- real runs: purposely broken setups through lint() / check_data() ---------------------------------


class MLP(nn.Cell):
    def __init__(self, out=2, weight_init="he_uniform", softmax=False, dropout=0.0):
        super().__init__()
        self.fc1 = nn.Dense(8, 16, weight_init=weight_init)
        self.relu = nn.ReLU()
        self.drop = nn.Dropout(p=dropout) if dropout else nn.Identity()
        self.fc2 = nn.Dense(16, out)
        self.softmax = nn.Softmax() if softmax else nn.Identity()

    def construct(self, x):
        return self.softmax(self.fc2(self.drop(self.relu(self.fc1(x)))))


def _lint(net, lr=0.05):
    return lint(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                nn.Momentum(net.trainable_params(), lr, 0.9), sample_inputs=(np.zeros((4, 8), np.float32),))


def _frozen_head():
    net = MLP()
    net.fc2.weight.requires_grad = False
    return _lint(net)


def _data(x=None, y=None, n=512):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32) if x is None else x
    y = (x[:, 0] > 0).astype(np.int32) if y is None else y
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(32)


def _nan_data():
    x = np.random.default_rng(0).standard_normal((512, 8)).astype(np.float32)
    x[5, 3] = np.nan
    return check_data(_data(x, (np.arange(512) % 2).astype(np.int32)))


def _unnormalised():
    x = np.random.default_rng(0).standard_normal((512, 8)).astype(np.float32) * 1000 + 500
    return check_data(_data(x, (np.arange(512) % 2).astype(np.int32)))


def _imbalanced():
    y = (np.arange(512) % 50 == 0).astype(np.int32)
    return check_data(_data(y=y[np.random.default_rng(1).permutation(512)]))


SCENARIOS = {
    "zero-initialisation": lambda: _lint(MLP(weight_init="zeros")),
    "loss-activation-mismatch": lambda: _lint(MLP(softmax=True)),
    "regularisation-too-strong": lambda: _lint(MLP(dropout=0.9)),
    "layer-frozen": _frozen_head,
    "learning-rate-too-high": lambda: _lint(MLP(), lr=50.0),
    "nan-in-input-data": _nan_data,
    "inputs-not-normalised": _unnormalised,
    "class-imbalance": _imbalanced,
}


@pytest.mark.parametrize("cause", sorted(SCENARIOS))
def test_real_run_ranks_the_true_cause_first(cause):
    report = SCENARIOS[cause]()
    diagnosis = diagnose(report)
    assert diagnosis.top is not None and diagnosis.top.id == cause, (report.codes(), diagnosis.cause_ids())
