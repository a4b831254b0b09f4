"""Each data rule (MSD301-MSD310) fires on a dataset with its problem and stays quiet on the healthy twin."""
from __future__ import annotations

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn

from mindspore_doctor.data import check_data

N = 600
rng = np.random.default_rng(7)


def _images(n=N, scale=1.0, offset=0.0):
    return (rng.normal(size=(n, 1, 8, 8)) * scale + offset).astype(np.float32)


def _table(n=N, features=6):
    return rng.normal(size=(n, features)).astype(np.float32)


def _labels(n=N, classes=3):
    return rng.permutation(np.arange(n) % classes).astype(np.int32)


def _dataset(x, y=None, shuffle=False, batch=32):
    columns = {"x": x} if y is None else {"x": x, "label": y}
    return ds.NumpySlicesDataset(columns, shuffle=shuffle).batch(batch)


def _net(features=6, classes=3, hidden=None):
    layers = [nn.Flatten()]
    layers += [nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, classes)] if hidden else [nn.Dense(features, classes)]
    return nn.SequentialCell(layers)


def _with_nan():
    x = _table()
    x[5, 2] = np.nan
    return {"train_ds": _dataset(x, _labels())}


def _imbalanced(minority):
    y = rng.permutation(np.r_[np.zeros(N - minority), np.ones(minority)]).astype(np.int32)
    return {"train_ds": _dataset(_table(), y)}


def _with_outlier(value):
    x = _table()
    x[17, 4] = value
    return {"train_ds": _dataset(x, _labels())}


def _scaled(stds):
    return {"train_ds": _dataset(_table(features=len(stds)) * np.array(stds, dtype=np.float32), _labels())}


def _ordered(sort):
    y = _labels()
    return {"train_ds": _dataset(_table(), np.sort(y) if sort else y)}


def _sorted_generator(sort):
    y = np.sort(_labels()) if sort else _labels()
    x = _table()

    def rows():  # a generator *function*: GeneratorDataset(shuffle=True) silently keeps its order
        yield from zip(x, y)

    return {"train_ds": ds.GeneratorDataset(rows, ["x", "label"], shuffle=True).batch(32)}


def _sorted_target(sort):
    t = rng.normal(size=(N, 1)).astype(np.float32)
    return {"train_ds": _dataset(_table(), np.sort(t, axis=0) if sort else t)}


def _label_range(top):
    return {"train_ds": _dataset(_table(), rng.integers(0, top + 1, N).astype(np.int32)), "network": _net()}


def _negative_labels(low):
    return {"train_ds": _dataset(_table(), rng.integers(low, 3, N).astype(np.int32))}


def _onehot(width):
    y = np.eye(width, dtype=np.float32)[rng.integers(0, width, N)]
    return {"train_ds": _dataset(_table(), y), "network": _net(classes=3)}


def _model_size(n, hidden):
    """A regression target: only the parameters-per-sample half of MSD307 can fire."""
    target = rng.normal(size=(n, 1)).astype(np.float32)
    return {"train_ds": _dataset(_table(n), target), "network": _net(classes=1, hidden=hidden)}


def _rare_class(count):
    y = rng.permutation(np.r_[np.zeros(250), np.ones(250), np.full(count, 2)]).astype(np.int32)
    return {"train_ds": _dataset(_table(len(y)), y)}


def _eval_scaled(scale, offset):
    return {"train_ds": _dataset(_images(), _labels()), "eval_ds": _dataset(_images(300, scale, offset), _labels(300))}


def _eval_overlap(shared):
    x, y = _table(), _labels()
    fresh = _table(300)
    fresh[:shared] = x[:shared]
    return {"train_ds": _dataset(x, y, shuffle=True), "eval_ds": _dataset(fresh, _labels(300))}


def _constant_column(value_spread):
    x = _table()
    x[:, 3] = 0.5 + value_spread * rng.normal(size=N)
    return {"train_ds": _dataset(x, _labels())}


CASES = {
    "MSD301": (_with_nan, lambda: {"train_ds": _dataset(_table(), _labels())}),
    "MSD302": (lambda: _imbalanced(50), lambda: _imbalanced(100)),
    "MSD303": (lambda: _with_outlier(60.0), lambda: _with_outlier(4.0)),
    "MSD304-offset": (lambda: {"train_ds": _dataset(_images(scale=60, offset=120), _labels())},
                      lambda: {"train_ds": _dataset(_images(scale=1.0, offset=0.5), _labels())}),
    "MSD304-scales": (lambda: _scaled([1, 1, 1e-3]), lambda: _scaled([1, 1, 0.1])),
    "MSD305": (lambda: _ordered(True), lambda: _ordered(False)),
    "MSD305-generator": (lambda: _sorted_generator(True), lambda: _sorted_generator(False)),
    "MSD305-regression": (lambda: _sorted_target(True), lambda: _sorted_target(False)),
    "MSD306": (lambda: _label_range(3), lambda: _label_range(2)),
    "MSD306-negative": (lambda: _negative_labels(-1), lambda: _negative_labels(0)),
    "MSD306-onehot": (lambda: _onehot(4), lambda: _onehot(3)),
    "MSD307-params": (lambda: _model_size(120, 20000), lambda: _model_size(120, 16)),
    "MSD307-per-class": (lambda: _rare_class(60), lambda: _rare_class(120)),
    "MSD308": (lambda: _eval_scaled(50, 120), lambda: _eval_scaled(1.0, 0.0)),
    "MSD309": (lambda: _eval_overlap(20), lambda: _eval_overlap(0)),
    "MSD310": (lambda: _constant_column(0.0), lambda: _constant_column(1.0)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_fires_on_problem_and_not_on_healthy_twin(case):
    code = case[:6]
    bad, healthy = CASES[case]
    report = check_data(**bad())
    assert code in report.codes(), str(report)
    finding = report.by_code(code)[0]
    assert finding.evidence and any(c.isdigit() for c in finding.message) and finding.suggestion
    quiet = check_data(**healthy())
    assert code not in quiet.codes(), str(quiet)
    assert not quiet.by_code("MSD001") and not report.by_code("MSD001")


def test_generator_shuffle_trap_is_named():
    finding = check_data(**_sorted_generator(True)).by_code("MSD305")[0]
    assert finding.evidence["shuffle_ignored_by_generator"] is True
    assert "silently ignored" in finding.message


def test_messages_name_the_column_feature_and_numbers():
    f = check_data(**_with_outlier(60.0)).by_code("MSD303")[0]
    assert "`x` feature 4 = 60" in f.message and f.location == {"dataset": "train", "column": "x"}
    f = check_data(train_ds=_dataset(_images(scale=60, offset=120), _labels())).by_code("MSD304")[0]
    assert "`x` channel 0 has mean 1" in f.message and f.evidence["mean"] > 100
    f = check_data(**_model_size(120, 20000)).by_code("MSD307")[0]
    assert "160,001 trainable parameters for 120 training samples" in f.message
    f = check_data(**_label_range(3)).by_code("MSD306")[0]
    assert "3 output(s)" in f.message and f.evidence["max"] == 3


def _mnist_like(n, classes=10):
    """Normalised synthetic digits: a blank 4-pixel border (constant per pixel, as in MNIST), balanced, shuffled."""
    y = rng.permutation(np.arange(n) % classes).astype(np.int32)
    x = np.zeros((n, 1, 28, 28), dtype=np.float32)
    x[:, :, 4:24, 4:24] = rng.random((n, 1, 20, 20)) < (0.1 + 0.04 * y[:, None, None, None])
    x = (x - x.mean()) / x.std()
    return ds.NumpySlicesDataset({"image": x, "label": y}, shuffle=True).batch(64)


def test_clean_mnist_like_pipeline_has_no_findings():
    net = nn.SequentialCell([nn.Conv2d(1, 4, 5, stride=2), nn.ReLU(), nn.Flatten(), nn.Dense(4 * 14 * 14, 10)])
    report = check_data(_mnist_like(2000), _mnist_like(1000), net)
    assert report.findings == [], str(report)
    assert report.meta["data"]["train"]["columns"] == {"image": "image CHW"}


def test_clean_tabular_pipeline_with_map_has_no_findings():
    def frame(n):
        x = _table(n, 8)
        y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int32)
        return ds.NumpySlicesDataset({"features": x.astype(np.float64), "label": y}, shuffle=True).map(
            lambda v: v.astype(np.float32), "features").batch(32)

    report = check_data(frame(1500), frame(500), _net(features=8, classes=2))
    assert report.findings == [], str(report)


def test_rules_are_pure_functions_quiet_on_clean_random_signals():
    """No MindSpore: hand-made signals of 2048 clean Gaussian rows in random label order."""
    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.data.signals import DatasetSignals, DataSignals, FeatureStats, LabelStats
    from mindspore_doctor.rules.data import RULES

    rows = np.random.default_rng(0).normal(size=(2048, 20))
    feature = FeatureStats("x", "tabular", "feature", "F", rows.mean(0), rows.std(0), rows.min(0), rows.max(0),
                           np.zeros(20, dtype=np.int64), rows)
    label = LabelStats("label", "class", np.random.default_rng(1).integers(0, 10, 2048).astype(float))
    train = DatasetSignals("train", 2048, 64, 60_000, features=[feature], label=label)
    signals = DataSignals(train, DatasetSignals("eval", 2048, 64, 10_000, features=[feature], label=label))
    assert [f for _, rule in RULES for f in rule(signals, DoctorConfig())] == []
    label.values = np.sort(label.values)
    assert [f.code for _, rule in RULES for f in rule(signals, DoctorConfig())] == ["MSD305"]


def test_per_class_counts_cover_every_shard_under_data_parallelism():
    import mindspore.dataset as ds

    y = rng.permutation(np.arange(600) % 2).astype(np.int32)  # 300 per class in all, 75 per class on each of 4 ranks

    def shard(num_shards):
        kwargs = {"num_shards": num_shards, "shard_id": 0} if num_shards > 1 else {}
        return ds.NumpySlicesDataset({"x": _table(len(y)), "label": y}, shuffle=False, **kwargs).batch(16)

    assert "MSD307" not in check_data(train_ds=shard(4)).codes()
    small = ds.NumpySlicesDataset({"x": _table(150), "label": y[:150]}, shuffle=False).batch(16)
    assert "MSD307" in check_data(train_ds=small).codes()  # the same 150 rows as the whole training set


def test_constant_feature_is_a_warning_unless_it_may_be_a_sparse_column():
    x = _table()
    x[:, 3] = 0.0
    partial = check_data(train_ds=_dataset(x, _labels()), data_max_samples=64).by_code("MSD310")[0]
    assert partial.severity.value == "info"  # all zeros in 64 of N rows: maybe a rare one-hot column
    whole = check_data(train_ds=_dataset(x, _labels())).by_code("MSD310")[0]
    assert whole.severity.value == "warning" and "over all" in whole.message


def test_negative_label_markers_are_out_of_range_but_not_a_class():
    y = rng.permutation(np.r_[np.arange(600) % 3, np.full(40, -1)]).astype(np.int32)  # -1: "unlabelled"
    report = check_data(train_ds=_dataset(_table(len(y)), y))
    assert "MSD306" in report.codes() and not {"MSD302", "MSD307"} & report.codes(), str(report)


def test_a_negative_marker_the_loss_skips_is_only_noted():
    y = rng.permutation(np.r_[np.arange(600) % 3, np.full(40, -1)]).astype(np.int32)

    class MaskedLoss(nn.Cell):  # the user's own loss: it may (and here would) drop label -1
        def construct(self, logits, label):
            return logits.sum() * 0

    def severity(loss_fn):
        return check_data(train_ds=_dataset(_table(len(y)), y), network=_net(), loss_fn=loss_fn).by_code(
            "MSD306")[0].severity.value

    assert severity(nn.SoftmaxCrossEntropyWithLogits(sparse=True)) == "error"  # -1 really is out of range there
    assert severity(nn.CrossEntropyLoss(ignore_index=-1)) == "info"
    assert severity(MaskedLoss()) == "info"


def test_outliers_that_repeat_one_value_are_a_sentinel_warning():
    x = _table()
    x[::40, 2] = -9999.0  # "missing" exported as a number
    sentinel = check_data(train_ds=_dataset(x, _labels())).by_code("MSD303")[0]
    assert sentinel.severity.value == "warning" and "exactly -9999" in sentinel.message
    x = _table()
    x[::40, 2] = rng.uniform(80, 120, size=x[::40].shape[0])  # a heavy tail: scattered, only noted
    assert check_data(train_ds=_dataset(x, _labels())).by_code("MSD303")[0].severity.value == "info"
