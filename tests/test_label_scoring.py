"""The Doctor's per-sample scoring during training: the fixed training sample, its label trajectory, the eval set's
probabilities, and the end-of-run analyses (label errors MSD311, error analysis, error budget) — real MindSpore."""
from __future__ import annotations

import csv
import hashlib

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.probes.evaluation import Task, read_sample, row_hashes, sample_inputs

QUIET = ("MSD301", "MSD302", "MSD303", "MSD304", "MSD305", "MSD306", "MSD307", "MSD308", "MSD309", "MSD310")
"""The data doctor's own codes (tested elsewhere); MSD311 stays on."""
CLASSES = 4


def _tabular(n, seed):
    """Gaussian class clusters (the fault benchmark's kit.tabular): learnable to ~99 %."""
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(1234).standard_normal((CLASSES, 16)).astype(np.float32) * 1.5
    y = (np.arange(n) % CLASSES).astype(np.int32)
    rng.shuffle(y)
    x = centers[y] + 1.5 * rng.standard_normal((n, 16)).astype(np.float32)
    return ((x - x.mean(0)) / x.std(0)).astype(np.float32), y


X, Y = _tabular(1024, 0)
XE, YE = _tabular(256, 1)
FLIPPED = np.random.default_rng(5).random(len(Y)) < 0.2
Y_NOISY = Y.copy()
Y_NOISY[FLIPPED] = (Y[FLIPPED] + 1) % CLASSES


def _ds(x, y, shuffle=False, batch=32):
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=shuffle).batch(batch)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell(nn.Dense(16, 64), nn.ReLU(), nn.Dense(64, CLASSES))

    def construct(self, x):
        return self.body(x)


def _train(labels, doctor=None, epochs=4, shuffle=True):
    ms.set_seed(0)
    net = Net()
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.05, 0.9))
    model.train(epochs, _ds(X, labels, shuffle), callbacks=[doctor] if doctor else [], dataset_sink_mode=False)
    return net


def _doctor(tmp_path=None, **options):
    options.setdefault("ignore", QUIET)
    options.setdefault("probe_every", 16)  # enough probes for every training rule: no MSD002 of those here
    return Doctor(tmp_path, eval_dataset=_ds(XE, YE), mindinsight=False, print_summary=False, **options)


def _codes(doctor):
    return {f.code for f in doctor.report.at_least("warning")}


def _truth(evaluator):
    """Which kept training samples really were flipped (the dataset shuffles: found by their inputs' sha1)."""
    where = {hashlib.sha1(X[i].tobytes()).hexdigest()[:12]: i for i in range(len(X))}
    return np.array([FLIPPED[where[h]] for h in evaluator.train_sha1])


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    folder = tmp_path_factory.mktemp("noisy")
    doctor = _doctor(folder)
    _train(Y_NOISY, doctor)
    return doctor, folder


def test_flipped_labels_fill_the_trajectory_and_msd311_names_the_training_sample(noisy):
    doctor, _ = noisy
    evaluator = doctor.session._evaluator
    assert evaluator.trajectory.evaluations == 4  # one row per evaluated epoch, from the same forward pass
    assert len(evaluator.train_sha1) == 1024 and len(set(evaluator.train_sha1)) == 1024
    assert "MSD311" in _codes(doctor), str(doctor.report)
    (found,) = [f for f in doctor.report.by_code("MSD311") if f.location.get("dataset") == "train-sample"]
    assert "training sample" in found.message
    reports = {r["source"]: r for r in doctor.report.meta["label_issues"]}
    assert set(reports) == {"eval", "train-sample"}
    train = reports["train-sample"]
    truth = _truth(evaluator)
    flagged = np.array([s["position"] for s in train["flagged"]])
    precision = truth[flagged].mean()
    recall = truth[flagged].sum() / truth.sum()
    assert precision > 0.7 and recall > 0.7, (precision, recall)
    assert abs(train["noise_rate"] - truth.mean()) < 0.08
    assert reports["eval"]["noise_rate"] < 0.05  # the eval split is clean
    assert evaluator.eval_trajectory.evaluations == 4  # the eval set: the mean over its evaluations
    assert "averaged over 4 evaluations" in reports["eval"]["method"]


def test_the_end_of_run_analyses_are_in_the_report_and_the_files(noisy):
    doctor, folder = noisy
    meta = doctor.report.meta
    assert {"label_issues", "error_analysis", "error_budget"} <= meta.keys()
    assert meta["error_analysis"]["task"] == "multiclass" and meta["error_analysis"]["samples"] == 256
    assert meta["error_budget"]["eval_error"] is not None
    rows = list(csv.DictReader((folder / "doctor_label_issues.csv").open()))
    assert {r["source"] for r in rows} == {"train-sample"} | ({"eval"} if meta["label_issues"][0]["flagged"] else set())
    assert all(len(r["sha1"]) == 12 for r in rows)
    trained = [r for r in rows if r["source"] == "train-sample"]
    assert all(r["aum"] and r["confidence"] and r["variability"] for r in trained)  # the trajectory's view
    assert np.median([float(r["aum"]) for r in trained]) < 0  # flagged: another class won on average
    suspects = np.load(folder / "doctor_label_suspects.npz")
    inputs, positions = suspects["train-sample__inputs"], suspects["train-sample__positions"]
    assert inputs.shape == (20, 16) and positions.shape == (20,)
    # the inputs are those of the samples the positions name
    sha = [hashlib.sha1(np.ascontiguousarray(row).tobytes()).hexdigest()[:12] for row in inputs]
    assert sha == [doctor.session._evaluator.train_sha1[p] for p in positions]
    for f in doctor.report.findings:
        assert f.code not in ("MSD001", "MSD002") or "label" not in f.message, f.message


def test_an_interrupted_run_writes_its_report_without_the_label_analysis(monkeypatch):
    """Ctrl-C, SIGTERM or an exception: the user's objects are restored and the report written at once, not after a
    cleanlab child and a second pass over the eval set."""
    from mindspore.train import Callback

    import mindspore_doctor.analysis.labels as labels

    def refuse(requests):
        raise AssertionError("the label analysis ran on an interrupted run")

    monkeypatch.setattr(labels, "label_reports_apart", refuse)

    class StopAtEpoch2(Callback):
        def on_train_epoch_end(self, run_context):
            if run_context.original_args().cur_epoch_num == 2:
                raise KeyboardInterrupt

    doctor = _doctor()
    ms.set_seed(0)
    net = Net()
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.05, 0.9))
    with pytest.raises(KeyboardInterrupt):
        model.train(4, _ds(X, Y_NOISY, True), callbacks=[doctor, StopAtEpoch2()], dataset_sink_mode=False)
    assert "MSD003" in doctor.report.codes() and "MSD001" not in doctor.report.codes(), str(doctor.report)
    assert "label_issues" not in doctor.report.meta and "error_budget" in doctor.report.meta


def test_clean_labels_get_no_msd311():
    doctor = _doctor()
    _train(Y, doctor)
    assert "MSD311" not in _codes(doctor), str(doctor.report)
    assert doctor.session._evaluator.trajectory.evaluations == 4
    assert not {"MSD001", "MSD002"} & doctor.report.codes(), str(doctor.report)


class _NewOrderEachPass:
    """A random-access source that yields the eval set in a new order at every pass (as an unseeded shuffle)."""

    def __init__(self):
        self.passes = 0
        self.order = np.arange(len(YE))

    def __getitem__(self, i):
        if i == 0:
            self.passes += 1
            self.order = np.random.default_rng(self.passes).permutation(len(YE))
        return XE[self.order[i]], YE[self.order[i]]

    def __len__(self):
        return len(YE)


def test_a_shuffling_eval_set_is_judged_on_its_last_evaluation():
    """Its samples come in another order at each evaluation: no per-sample mean across them."""
    source = _NewOrderEachPass()
    eval_ds = ds.GeneratorDataset(source, ["x", "label"], shuffle=False).batch(32)
    doctor = Doctor(eval_dataset=eval_ds, ignore=QUIET, probe_every=16, mindinsight=False, print_summary=False)
    _train(Y, doctor, epochs=3)
    assert source.passes >= 3
    evaluator = doctor.session._evaluator
    assert evaluator.eval_trajectory.evaluations == 1 and evaluator.trajectory.evaluations == 3
    (report,) = [r for r in doctor.report.meta["label_issues"] if r["source"] == "eval"]
    assert "averaged over 1 evaluation " in report["method"] and report["samples"] == 256


def test_label_sample_size_zero_reads_fresh_train_batches_and_scores_only_the_eval_set():
    doctor = _doctor(label_sample_size=0, eval_max_batches=4)
    _train(Y_NOISY, doctor, epochs=2)
    evaluator = doctor.session._evaluator
    assert evaluator.train_sample is None and evaluator.trajectory is None
    assert [r["train_samples"] for r in doctor.report.meta["evaluation"]["records"]] == [128, 128]
    assert [r["source"] for r in doctor.report.meta["label_issues"]] == ["eval"]


def test_a_sample_over_the_memory_bound_keeps_the_train_metric_on_fresh_batches():
    doctor = _doctor(label_sample_max_mb=1e-5, eval_max_batches=4)  # 10 bytes: one 16-float sample is 68
    _train(Y, doctor, epochs=2)
    evaluator = doctor.session._evaluator
    assert evaluator.train_sample == [] and evaluator.trajectory is None
    assert [r["train_samples"] for r in doctor.report.meta["evaluation"]["records"]] == [128, 128]
    assert doctor.report.meta["label_sample_skipped"] == "one training sample is larger than label_sample_max_mb=1e-05"
    assert [r["source"] for r in doctor.report.meta["label_issues"]] == ["eval"]


def test_probabilities_over_the_memory_bound_judge_the_eval_set_on_its_last_evaluation():
    """20 KiB: the eval set's running mean (256 x 4 classes: 32 KiB) and the training sample's trajectory do not
    fit; the eval set is still judged, on its last evaluation."""
    doctor = _doctor(label_sample_max_mb=0.02)
    _train(Y, doctor, epochs=2)
    evaluator = doctor.session._evaluator
    assert evaluator.eval_trajectory is None and evaluator.trajectory is None
    assert "would exceed label_sample_max_mb=0.02" in doctor.report.meta["label_sample_skipped"]
    (report,) = doctor.report.meta["label_issues"]
    assert report["source"] == "eval" and "after the last evaluation" in report["method"]
    assert report["samples"] == 256 and not {"MSD001", "MSD002"} & doctor.report.codes(), str(doctor.report)


def test_the_sample_is_fixed_while_fresh_batches_of_a_shuffled_set_change():
    doctor = _doctor(label_sample_size=96)
    _train(Y, doctor, epochs=2)
    evaluator = doctor.session._evaluator
    assert [len(b[-1]) for b in evaluator.train_sample] == [32, 32, 32]
    first = list(evaluator.train_sha1)
    assert [r["train_samples"] for r in doctor.report.meta["evaluation"]["records"]] == [96, 96]
    assert evaluator.train_sha1 == first and row_hashes(evaluator.train_sample) == first


def test_a_failing_label_analysis_is_msd001_and_training_is_unaffected(monkeypatch):
    from mindspore_doctor.analysis import labels

    def broken(self, probs):
        raise RuntimeError("boom in the trajectory")

    plain = {p.name: p.asnumpy().copy() for p in _train(Y, None, epochs=2).get_parameters()}
    monkeypatch.setattr(labels.Trajectory, "add", broken)
    doctor = _doctor()
    net = _train(Y, doctor, epochs=2)
    failed = [f for f in doctor.report.by_code("MSD001") if f.location.get("check") == "label-scoring"]
    assert len(failed) == 1 and "boom in the trajectory" in failed[0].message
    assert len(doctor.report.meta["evaluation"]["records"]) == 2  # the evaluation goes on
    assert "error_analysis" in doctor.report.meta
    assert [p for p in net.get_parameters() if not np.array_equal(p.asnumpy(), plain[p.name])] == []

    monkeypatch.undo()
    monkeypatch.setattr(labels, "label_reports_apart",
                        lambda *a, **k: (_ for _ in ()).throw(ValueError("bad report")))
    doctor = _doctor()
    _train(Y, doctor, epochs=1)
    failed = [f for f in doctor.report.by_code("MSD001") if f.location.get("check") == "label-analysis"]
    assert len(failed) == 1 and "bad report" in failed[0].message
    assert "error_analysis" in doctor.report.meta and "error_budget" in doctor.report.meta

    monkeypatch.setattr(labels, "label_reports_apart", lambda requests: [f"bad {r['source']}" for r in requests])
    doctor = _doctor()
    _train(Y, doctor, epochs=1)
    skipped = {f.location["dataset"]: f.message for f in doctor.report.by_code("MSD002")
               if f.location.get("check") == "label-analysis"}
    assert skipped == {"eval": "MSD311 skipped on the eval labels: bad eval",
                       "train-sample": "MSD311 skipped on the train-sample labels: bad train-sample"}
    assert "MSD001" not in doctor.report.codes() and doctor.report.meta["label_issues"] == []


def test_regression_is_not_label_scored_and_says_nothing():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((8, 1)) + 0.1 * rng.standard_normal((256, 1))).astype(np.float32)
    net = nn.Dense(8, 1)
    doctor = Doctor(eval_dataset=_ds(x[:64], y[:64]), ignore=QUIET, mindinsight=False, print_summary=False,
                    probe_every=4)
    Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.05)).train(
        2, _ds(x, y), callbacks=[doctor], dataset_sink_mode=False)
    evaluator = doctor.session._evaluator
    assert evaluator.trajectory is None and "regression" in evaluator.labels_skipped
    assert doctor.report.meta["label_issues"] == []
    assert doctor.report.meta["error_analysis"]["task"] == "regression"
    assert not {"MSD001", "MSD002"} & doctor.report.codes(), str(doctor.report)


def test_target_eval_and_holdout_sets_are_scored_at_every_evaluation():
    shifted = XE * 1.5 + 0.5
    doctor = _doctor(target_eval_dataset=_ds(shifted, YE), holdout_dataset=_ds(XE[:128], YE[:128]))
    _train(Y, doctor, epochs=2)
    records = doctor.report.meta["evaluation"]["records"]
    assert all(r["target_eval_metric"]["name"] == "accuracy" and r["holdout_metric"] is not None for r in records)
    assert [r["holdout_samples"] for r in records] == [128, 128]
    assert records[-1]["target_eval_loss"] > records[-1]["eval_loss"]
    assert records[-1]["target_eval_loss_se"] > 0 and records[-1]["holdout_loss_se"] > 0  # an MSE's noise: from these
    budget = doctor.report.meta["error_budget"]
    assert budget["target_eval_error"] is not None and budget["holdout_error"] is not None


# --- the pieces, on numbers -------------------------------------------------------------------


def test_task_probabilities_follow_the_loss_family():
    logits = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    probs = Task("multiclass", "classes").probabilities(logits)
    assert np.allclose(probs.sum(1), 1) and probs[0].argmax() == 0 and np.allclose(probs[1], 1 / 3)
    assert np.allclose(Task("multiclass", "classes").probabilities(np.log(probs)), probs)  # NLLLoss inputs
    assert np.array_equal(Task("multiclass", None).probabilities(probs), probs)  # already probabilities
    binary = Task("binary", "logits").probabilities(np.array([[0.0], [10.0]]))
    assert np.allclose(binary, [[0.5, 0.5], [0, 1]], atol=1e-4)
    assert np.allclose(Task("binary", "probabilities", threshold=0.5).probabilities(np.array([0.2, 0.9])),
                       [[0.8, 0.2], [0.1, 0.9]])
    assert Task("multiclass").class_ids((2, 3), np.array([[0, 1, 0], [1, 0, 0]])).tolist() == [1, 0]
    assert Task("binary").class_ids((3, 1), np.array([0.0, 1.0, 1.0])).tolist() == [0, 1, 1]
    assert Task("multiclass").per_sample_classes((4, 3)) and not Task("multiclass").per_sample_classes((4, 3, 5))
    assert not Task("multilabel").per_sample_classes((4, 3)) and not Task("regression").per_sample_classes((4, 1))


def test_read_sample_keeps_whole_batches_within_each_bound():
    data = _ds(X, Y, batch=32)
    assert [len(b[-1]) for b in read_sample(data, 50, 100, 1e9)] == [32, 32, 32]
    assert [len(b[-1]) for b in read_sample(data, 2, 1000, 1e9)] == [32, 32]
    row = X[0].nbytes + Y[0].nbytes
    assert [len(b[-1]) for b in read_sample(data, 50, 1000, 70 * row)] == [32, 32]
    assert [len(b[-1]) for b in read_sample(data, 50, 10, 1e9)] == [10]  # a first batch over the budget is cut
    batches = read_sample(data, 50, 96, 1e9)
    assert np.array_equal(sample_inputs(batches, [0, 33, 95]), X[[0, 33, 95]])
    assert row_hashes(batches)[33] == hashlib.sha1(X[33].tobytes()).hexdigest()[:12]


def test_cleanlab_stays_out_of_the_training_process():
    """cleanlab (with scikit-learn, SciPy, pandas: +90 MB resident) runs in a child process at the end of the run:
    the training process never imports it, and the reports still arrive."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        import numpy as np
        import mindspore.dataset as ds
        from mindspore import nn
        from mindspore.train import Model
        from mindspore_doctor import Doctor
        rng = np.random.default_rng(0)
        x = rng.standard_normal((256, 8)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.int32)
        make = lambda: ds.NumpySlicesDataset((x, y), column_names=["x", "label"], shuffle=False).batch(32)
        net = nn.Dense(8, 2)
        doctor = Doctor(eval_dataset=make(), mindinsight=False, print_summary=False)
        Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), nn.Adam(net.trainable_params(),
              1e-2)).train(2, make(), callbacks=[doctor], dataset_sink_mode=False)
        sources = [r["source"] for r in doctor.report.meta["label_issues"]]
        print(sources, sorted(m for m in ("cleanlab", "sklearn", "pandas") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['eval', 'train-sample'] []"
