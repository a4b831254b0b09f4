"""Each data rule (MSD301-MSD310) fires on a dataset with its problem and stays quiet on the healthy twin."""
from __future__ import annotations

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn

from mindspore_doctor import check_data

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


def _rare_class(count, hidden):
    """A class of ``count`` samples: too small for a wide MLP (2048 hidden: ~6800 parameters per class), normal
    for a small one (16 hidden: ~54)."""
    y = rng.permutation(np.r_[np.zeros(250), np.ones(250), np.full(count, 2)]).astype(np.int32)
    return {"train_ds": _dataset(_table(len(y)), y), "network": _net(hidden=hidden)}


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
    "MSD307-per-class": (lambda: _rare_class(60, 2048), lambda: _rare_class(60, 16)),
    "MSD307-per-class-count": (lambda: _rare_class(60, 2048), lambda: _rare_class(120, 2048)),
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
    from mindspore_doctor.rules.data import JUDGES

    rows = np.random.default_rng(0).normal(size=(2048, 20))
    feature = FeatureStats("x", "tabular", "feature", "F", rows.mean(0), rows.std(0), rows.min(0), rows.max(0),
                           np.zeros(20, dtype=np.int64), rows)
    label = LabelStats("label", "class", np.random.default_rng(1).integers(0, 10, 2048).astype(float))
    train = DatasetSignals("train", 2048, 64, 60_000, features=[feature], label=label)
    signals = DataSignals(train, DatasetSignals("eval", 2048, 64, 10_000, features=[feature], label=label))
    assert [f for _, rule in JUDGES for f in rule(signals, DoctorConfig())] == []
    label.values = np.sort(label.values)
    assert [f.code for _, rule in JUDGES for f in rule(signals, DoctorConfig())] == ["MSD305"]


def test_per_class_counts_cover_every_shard_under_data_parallelism():
    import mindspore.dataset as ds

    y = rng.permutation(np.arange(600) % 2).astype(np.int32)  # 300 per class in all, 75 per class on each of 4 ranks

    def shard(num_shards):
        kwargs = {"num_shards": num_shards, "shard_id": 0} if num_shards > 1 else {}
        return ds.NumpySlicesDataset({"x": _table(len(y)), "label": y}, shuffle=False, **kwargs).batch(16)

    net = _net(classes=2, hidden=2048)  # ~8200 parameters per class: 75 samples of a class are too few
    assert "MSD307" not in check_data(train_ds=shard(4), network=net).codes()
    small = ds.NumpySlicesDataset({"x": _table(150), "label": y[:150]}, shuffle=False).batch(16)
    assert "MSD307" in check_data(train_ds=small, network=net).codes()  # the same 150 rows as the whole training set


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


# --- issue 13: robust statistics, pure numbers (no MindSpore) ----------------------------------------------


def _signals(rows, label=None, eval_rows=None, params=None, outputs=None, label_kind="class"):
    """DataSignals measured by the data probes' own accumulators on numpy rows."""
    from mindspore_doctor.data.signals import DatasetSignals, DataSignals, LabelStats, NetworkSignals
    from mindspore_doctor.data.stats import FeatureAccumulator

    def measured(name, x):
        acc = FeatureAccumulator("x")
        acc.add(np.asarray(x, dtype=np.float32))
        labels = None if label is None else LabelStats("label", label_kind, np.asarray(label, dtype=float))
        return DatasetSignals(name, len(x), 32, len(x), features=[acc.result()], label=labels)

    return DataSignals(measured("train", rows), None if eval_rows is None else measured("eval", eval_rows),
                       NetworkSignals(trainable_params=params, num_outputs=outputs))


def _codes_of(rule, signals):
    from mindspore_doctor.config import DoctorConfig

    return [f.code for f in rule(signals, DoctorConfig())]


DIGITS_PIXEL_46 = np.repeat(np.arange(17.0), [854, 96, 72, 89, 80, 69, 70, 85, 98, 62, 33, 60, 63, 23, 20, 11, 12])
"""scikit-learn digits' pixel 46 (value counts over all 1797 images): median 1, MAD 1, maximum 16 (z 10.1)."""


def _discrete_pixel():
    """A table whose first feature is that pixel: every value from 0 up to its maximum is taken."""
    r = np.random.default_rng(0)
    x = r.normal(size=(DIGITS_PIXEL_46.size, 4))
    x[:, 0] = r.permutation(DIGITS_PIXEL_46)
    return x


def test_msd303_needs_an_empty_gap_between_an_outlier_and_the_bulk():
    from mindspore_doctor.rules.data.scale import input_outliers

    assert _codes_of(input_outliers, _signals(_discrete_pixel())) == []
    x = _discrete_pixel()
    x[100:130, 1] = -9999.0  # alone, far beyond every other value
    assert _codes_of(input_outliers, _signals(x)) == ["MSD303"]


def test_msd304_compares_a_sparse_feature_by_its_nonzero_values():
    from mindspore_doctor.rules.data.scale import input_not_normalized

    x = np.random.default_rng(0).normal(size=(1400, 3))
    x[:, 2] = 0.0
    x[7, 2] = 0.0625  # one inked pixel in [0, 1] units: std 0.0017, but it varies by 0.06 when it varies
    assert _codes_of(input_not_normalized, _signals(x)) == []
    x[:, 2] = np.random.default_rng(1).normal(size=1400) * 1e-3  # a continuous feature in other units
    assert _codes_of(input_not_normalized, _signals(x)) == ["MSD304"]


def test_msd308_allows_for_the_noise_of_a_rare_features_std():
    from mindspore_doctor.rules.data.pairs import train_eval_mismatch

    r = np.random.default_rng(0)
    train, evaluation = r.normal(size=(1400, 3)), r.normal(size=(443, 3))
    train[:, 2] = np.where(np.arange(1400) % 200 == 0, 14.0, 0.0)  # non-zero in 7 training rows
    evaluation[:, 2] = np.where(np.arange(443) == 3, 5.0, 0.0)  # in 1 eval row: std ratio 0.24 by chance
    train[:, 1] = np.where(np.arange(1400) % 700 == 0, 14.0, -2.6)  # a standardised blank pixel, inked twice
    evaluation[:, 1] = -2.6  # never inked in eval: its std is exactly 0, not the 3e-8 E[x^2] - E[x]^2 leaves
    assert _codes_of(train_eval_mismatch, _signals(train, eval_rows=evaluation)) == []
    evaluation[:, 0] *= 4.0  # a dense feature whose spread really differs
    assert _codes_of(train_eval_mismatch, _signals(train, eval_rows=evaluation)) == ["MSD308"]


def test_msd309_compares_with_the_training_sets_own_repeats():
    from mindspore_doctor.rules.data.pairs import train_eval_leakage
    from mindspore_doctor.data.signals import DatasetSignals, DataSignals

    r = np.random.default_rng(0)
    train = DatasetSignals("train", 2000, hashes=r.integers(0, 400, 2000).astype(np.uint64))  # many repeats
    fresh = DatasetSignals("eval", 443, hashes=r.integers(0, 400, 443).astype(np.uint64))
    assert _codes_of(train_eval_leakage, DataSignals(train, fresh)) == []
    continuous = DatasetSignals("train", 2000, hashes=np.arange(2000, dtype=np.uint64))  # no repeats at all
    one_copy = DatasetSignals("eval", 443, hashes=np.r_[np.arange(5000, 5442), [17]].astype(np.uint64))
    assert _codes_of(train_eval_leakage, DataSignals(continuous, one_copy)) == ["MSD309"]


def test_msd307_judges_a_small_class_against_the_networks_capacity():
    from mindspore_doctor.rules.data.size import too_few_samples

    y = np.random.default_rng(1).permutation(np.r_[np.zeros(50), np.ones(50), np.full(36, 2)])
    rows = np.random.default_rng(0).normal(size=(len(y), 13))
    assert _codes_of(too_few_samples, _signals(rows, y, params=547, outputs=3)) == []
    assert _codes_of(too_few_samples, _signals(rows, y, params=70_000, outputs=3)) == ["MSD307"]
    assert _codes_of(too_few_samples, _signals(rows, y)) == []  # no network: no capacity to judge against


@pytest.mark.parametrize("shape, dtype, positions", [
    ((3, 16, 16), np.float32, 256),  # an image: height x width
    ((20,), np.int32, 20),  # token ids: each is a position
    ((30, 4), np.float32, 30),  # a sequence of 4 features: its steps
    ((13,), np.float32, 1),  # a table row: nothing to share across
])
def test_positions_per_sample_of_an_input_column(shape, dtype, positions):
    from mindspore_doctor.data.stats import FeatureAccumulator

    acc = FeatureAccumulator("x")
    acc.add(np.random.default_rng(0).integers(0, 9, (8, *shape)).astype(dtype))
    assert acc.result().positions == positions


def test_msd307_counts_a_weight_shared_parameter_once_per_position():
    """2.3M parameters for 1024 samples: too many for a dense network, fine for convolutions over 32x32."""
    from mindspore_doctor.rules.data.size import too_few_samples

    y = np.random.default_rng(1).integers(0, 4, 1024)
    images = _signals(np.zeros((1024, 3, 32, 32)), y, params=2_317_268, outputs=4)
    assert _codes_of(too_few_samples, images) == ["MSD307"]  # nothing known to be shared
    images.network.shared_params = 2_294_944  # RegNetX-200MF's convolutions
    assert _codes_of(too_few_samples, images) == []
    table = _signals(np.zeros((1024, 13)), y, params=2_317_268, outputs=4)
    table.network.shared_params = 2_294_944  # e.g. a Conv1d over 13 tabular features: one position, no credit
    assert _codes_of(too_few_samples, table) == ["MSD307"]


def test_msd205_from_the_data_only_for_an_exact_copy_of_the_target():
    from mindspore_doctor.rules.data.label_copy import label_in_inputs

    r = np.random.default_rng(0)
    x, target = r.normal(size=(500, 6)), r.normal(size=500)
    x[:, 5] = target + 0.01 * r.normal(size=500)  # strongly related (r = 0.99995), not the target
    assert _codes_of(label_in_inputs, _signals(x, target, label_kind="regression")) == []
    x[:, 5] = 3.0 * target - 1.0  # the target, rescaled
    assert _codes_of(label_in_inputs, _signals(x, target, label_kind="regression")) == ["MSD205"]


def test_shuffled_sparse_regression_target_is_not_called_sorted():
    """A shuffled target that is 95 % one value ("missing" = 0): tied values must share a rank, not be ranked by
    position (that read +0.92 correlation on f_masked_regression_loss_div); a sorted dense target still fires."""
    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.rules.data.labels import data_not_shuffled

    values = np.where(rng.random(512) < 0.95, 0.0, rng.normal(size=512))
    assert data_not_shuffled(_signals(rng.normal(size=(512, 4)), label=values, label_kind="regression"),
                             DoctorConfig()) == []
    fired = data_not_shuffled(_signals(rng.normal(size=(512, 4)), label=np.sort(rng.normal(size=512)),
                                       label_kind="regression"),
                              DoctorConfig())
    assert [f.code for f in fired] == ["MSD305"]
