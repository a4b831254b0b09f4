"""A fast subset of the label-noise benchmark (scripts/bench_labels.py; the whole run and its table:
docs/label-noise-benchmark.md): cleanlab's anchor recipe on digits with 10 % symmetric noise and as shipped, and the
in-training scores of a plain MindSpore loop on wine with 10 % noise."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from mindspore_doctor.analysis.labels import Trajectory, label_report

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_labels.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_labels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _run(bench, data, noise, method):
    return bench.run_one(data, noise, [method], log=lambda line: None)[0]


def test_the_anchor_recipe_on_digits_with_10_percent_noise(bench):
    digits = bench.load("digits")
    noisy = _run(bench, digits, "sym10", "anchor")
    assert noisy.samples == 1437 and 0.09 < noisy.true_rate < 0.11
    assert noisy.f1 > 0.75 and abs(noisy.est_rate - noisy.true_rate) < 0.06 and noisy.warns
    clean = _run(bench, digits, "clean", "anchor")
    assert clean.true_rate == 0.0 and clean.est_rate < 0.03 and not clean.warns


def test_the_noise_is_what_it_says(bench):
    labels = np.repeat(np.arange(10), 100)
    given, flip = bench.add_noise(labels, 10, "pairs20")
    assert set(np.unique(labels[flip])) <= {1, 3, 4, 7, 8, 9}
    assert all(dict(bench.PAIRS + tuple((b, a) for a, b in bench.PAIRS))[t] == g
               for t, g in zip(labels[flip], given[flip]))
    given, flip = bench.add_noise(labels, 10, "sym20")
    assert np.all(given[flip] != labels[flip]) and np.all(given[~flip] == labels[~flip])
    assert 0.15 < flip.mean() < 0.25


def test_in_training_scores_of_a_plain_loop_on_wine(bench):
    wine = bench.load("wine")
    data, given, flip = wine.split(*bench.add_noise(wine.labels, wine.classes, "sym10"))
    data.epochs = 30
    epochs, _ = bench.train_plain(data, given)
    trajectory = Trajectory(given)
    for probs in epochs:
        trajectory.add(probs)
    report = label_report(given, trajectory.pred_probs(), source="train-sample", method="plain loop",
                          positions_note="row")
    precision, recall, f1 = bench.score(np.array([s.position for s in report.flagged], dtype=np.int64), flip)
    assert f1 is not None and f1 > 0.6, (precision, recall, trajectory.early_evaluations)
    assert trajectory.early_evaluations < trajectory.evaluations  # memorisation was seen and left out
