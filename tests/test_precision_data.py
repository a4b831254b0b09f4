"""Issue 13, points 6, 8 and 10 on real data: the data checks (MSD3xx) on scikit-learn's digits, wine,
breast_cancer and diabetes (exported once to benchmarks/realworld/data) stay quiet on healthy pipelines and
still fire on the faults written into them."""
from __future__ import annotations

from pathlib import Path

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn

from mindspore_doctor import check_data

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "realworld" / "data"


def load(name):
    d = np.load(DATA / f"{name}.npz")
    return d["x"].astype(np.float32), d["y"]


def split(y, eval_fraction=0.25, seed=0):
    """Stratified train/eval indices, each shuffled."""
    r = np.random.default_rng(seed)
    train, evaluation = [], []
    for c in np.unique(y):
        idx = r.permutation(np.flatnonzero(y == c))
        k = int(round(len(idx) * (1 - eval_fraction)))
        train += list(idx[:k])
        evaluation += list(idx[k:])
    return r.permutation(train), r.permutation(evaluation)


def dataset(x, y, batch=32, shuffle=True):
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=shuffle).batch(batch)


def mlp(features, classes, hidden=32):
    return nn.SequentialCell([nn.Flatten(), nn.Dense(features, hidden), nn.ReLU(), nn.Dense(hidden, classes)])


def cnn():
    return nn.SequentialCell([nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Dense(8 * 64, 10)])


X_DIGITS, Y_DIGITS = load("digits")
Y_DIGITS = Y_DIGITS.astype(np.int32)
TRAIN, EVAL = split(Y_DIGITS)
MEAN, STD = X_DIGITS[TRAIN].mean(0), X_DIGITS[TRAIN].std(0)
SCALINGS = {
    "standardized": lambda x: (x - MEAN) / np.where(STD > 0, STD, 1.0),  # sklearn's StandardScaler: std 0 -> 1
    "unit": lambda x: x / 16.0,
}
COLUMNS = np.random.default_rng(5).permutation(64)  # the pixels in a random order: a table of sparse counts


def digits(scaling, shape=(64,), columns=slice(None), eval_transform=lambda x: x):
    scale = SCALINGS[scaling]
    x_train = scale(X_DIGITS[TRAIN])[:, columns].reshape((-1, *shape))
    x_eval = eval_transform(scale(X_DIGITS[EVAL]))[:, columns].reshape((-1, *shape))
    return dataset(x_train, Y_DIGITS[TRAIN]), dataset(x_eval, Y_DIGITS[EVAL])


def problems(report):
    return [f for f in report.findings if f.severity.value in ("warning", "error")]


# --- point 8: real images are not synthetic data -----------------------------------------------------------


@pytest.mark.parametrize("scaling", sorted(SCALINGS))
@pytest.mark.parametrize("shape", [(64,), (1, 8, 8)], ids=["flat", "image"])
def test_healthy_digits_have_no_data_findings(scaling, shape):
    """Issue 13 point 8: flat digits raised MSD303 (a pixel at 16 called a sentinel), MSD304 (a near-blank pixel
    "mixes scales"), MSD308 (a rare pixel's noisy std) and MSD310 (blank border pixels)."""
    net = cnn() if len(shape) == 3 else mlp(64, 10)
    report = check_data(*digits(scaling, shape), network=net)
    assert problems(report) == [], str(report)
    assert report.meta["data"]["train"]["columns"]["x"] == ("image CHW" if len(shape) == 3 else
                                                           "image CHW (flattened 1x8x8)")


@pytest.mark.parametrize("scaling", sorted(SCALINGS))
def test_sparse_discrete_table_is_judged_robustly(scaling):
    """The same pixels in a random column order are no image: a table of sparse, discrete, near-constant
    features. Its maxima are its range (MSD303), a near-blank column is not on another scale (MSD304), a rare
    column's std is noise (MSD308). Its three all-zero columns are really constant (MSD310 stays)."""
    report = check_data(*digits(scaling, columns=COLUMNS), network=mlp(64, 10))
    assert report.meta["data"]["train"]["columns"]["x"] == "tabular F"
    assert {f.code for f in problems(report)} == {"MSD310"}, str(report)


def test_a_table_with_a_square_number_of_correlated_columns_is_not_an_image():
    x, y = load("breast_cancer")
    table = np.c_[x, x[:, :30] * 1.5, x[:, :4]]  # 64 correlated columns
    table = (table - table.mean(0)) / table.std(0)
    report = check_data(dataset(table, y.astype(np.int32)))
    assert report.meta["data"]["train"]["columns"]["x"] == "tabular F"


def test_sentinel_in_a_sparse_discrete_table_is_still_a_warning():
    x = (X_DIGITS[TRAIN] / 16.0)[:, COLUMNS]
    x[np.random.default_rng(1).random(len(x)) < 0.02, 20] = -9999.0  # "missing" exported as a number
    (finding,) = check_data(dataset(x, Y_DIGITS[TRAIN])).by_code("MSD303")
    assert finding.severity.value == "warning" and "exactly -9999" in finding.message


def test_raw_pixels_and_unscaled_eval_images_still_fire_on_flattened_digits():
    raw = X_DIGITS[TRAIN] * 16.0  # 0..255-like pixels, flattened
    (finding,) = check_data(dataset(raw, Y_DIGITS[TRAIN])).by_code("MSD304")
    assert "channel 0" in finding.message and "Raw 0-255 pixels?" in finding.message
    # eval pixels left at 0..16 while train was scaled to [0, 1] (f_eval_not_normalized_images, flattened)
    report = check_data(*digits("unit", eval_transform=lambda x: x * 16.0))
    assert [f.code for f in problems(report)] == ["MSD308"], str(report)


def test_zero_padded_gray_channels_of_flattened_images_are_constant():
    """f_constant_channels_gray_padded, flattened: 3x8x8 vectors whose G and B planes are zeros."""
    gray = (X_DIGITS[TRAIN] / 16.0).reshape(-1, 1, 8, 8)
    rgb = np.concatenate([gray, np.zeros_like(gray), np.zeros_like(gray)], axis=1).reshape(len(gray), -1)
    report = check_data(dataset(rgb, Y_DIGITS[TRAIN]))
    (finding,) = report.by_code("MSD310")
    assert finding.severity.value == "warning" and "channels 1, 2" in finding.message, str(report)
    assert report.meta["data"]["train"]["columns"]["x"] == "image CHW (flattened 3x8x8)"


# --- an eval set in other units (MSD308) ---------------------------------------------------------------------


def _breast_cancer(eval_factor):
    x, y = load("breast_cancer")
    train, evaluation = split(y)
    mean, std = x[train].mean(0), x[train].std(0)
    raw_eval = x[evaluation] * eval_factor  # e.g. the eval export in mm where the train set is in m
    return (dataset((x[train] - mean) / std, y[train].astype(np.int32)),
            dataset((raw_eval - mean) / std, y[evaluation].astype(np.int32)))


@pytest.mark.parametrize("which", ["one", "all"])
def test_eval_features_in_other_units_are_a_mismatch(which):
    factor = np.ones(30, np.float32)
    factor[[0] if which == "one" else slice(None)] = 1000.0
    report = check_data(*_breast_cancer(factor))
    (finding,) = report.by_code("MSD308")
    assert finding.evidence["features_differing"] == (1 if which == "one" else 30)
    assert "MSD308" not in check_data(*_breast_cancer(np.ones(30, np.float32))).codes()


# --- a leaked regression target (MSD205 from the data) ------------------------------------------------------


def _diabetes(leak):
    x, y = load("diabetes")
    x = (x - x.mean(0)) / x.std(0)
    target = ((y - y.mean()) / y.std()).astype(np.float32)[:, None]
    features = np.c_[x, target * 2.0 + 1.0] if leak else x  # the target, rescaled, left among the inputs
    return dataset(features.astype(np.float32), target)


def test_regression_target_among_the_inputs_is_found_before_training():
    (finding,) = check_data(_diabetes(leak=True)).by_code("MSD205")
    assert "`x` feature 10 is the target `label`" in finding.message
    assert finding.evidence["correlation"] > 0.999999
    assert "MSD205" not in check_data(_diabetes(leak=False)).codes()


def test_a_smooth_series_last_value_is_not_the_target():
    """Forecasting: the last observed value of a smooth series correlates 0.998 with the next one; not a leak."""
    t = np.arange(1400, dtype=np.float32)
    series = np.sin(0.07 * t).astype(np.float32)
    starts = np.arange(0, 1200, 3)
    windows = np.stack([series[i:i + 16] for i in starts])
    target = series[starts + 16][:, None]
    assert "MSD205" not in check_data(dataset(windows, target)).codes()
    leaked = np.stack([series[i:i + 17] for i in starts])  # one value too many: the target itself
    assert "MSD205" in check_data(dataset(leaked, target)).codes()


# --- MSD309 on token data: compare with the training set's own repeats ---------------------------------------


def _tokens(n, seed):
    """Short sequences of a Zipf-like vocabulary: many of them repeat by nature."""
    r = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 31)
    return r.choice(30, size=(n, 3), p=p / p.sum()).astype(np.int32)


def test_naturally_repeating_token_sequences_are_not_leakage():
    train, fresh = _tokens(2000, 0), _tokens(443, 1)
    labels = lambda n: np.zeros(n, np.int32)  # noqa: E731
    report = check_data(dataset(train, labels(2000)), dataset(fresh, labels(443)))
    assert "MSD309" not in report.codes(), str(report)
    leaked = np.r_[fresh[:243], train[:200]]  # 200 eval sequences copied from the training set
    (finding,) = check_data(dataset(train, labels(2000)), dataset(leaked, labels(443))).by_code("MSD309")
    assert finding.evidence["shared"] > finding.evidence["expected_shared"] + 100
    assert "repeats itself at a rate of" in finding.message


# --- point 6 and point 10: MSD307 relative to capacity, and its two findings -------------------------------


def _wine(hidden):
    x, y = load("wine")
    train, _ = split(y)
    x = (x - x[train].mean(0)) / x[train].std(0)
    return {"train_ds": dataset(x[train], y[train].astype(np.int32), batch=16), "network": mlp(13, 3, hidden)}


def test_wine_with_a_small_mlp_has_enough_samples():
    """Issue 13 point 6: 133 training rows, a 36-sample class, a 547-parameter MLP: normal, not "too few"."""
    report = check_data(**_wine(hidden=32))
    assert problems(report) == [], str(report)


def test_wine_with_a_huge_mlp_has_classes_too_small_for_it():
    (finding,) = check_data(**_wine(hidden=4096)).by_code("MSD307")
    assert "small for the network's capacity" in finding.message and finding.evidence["params_per_class"] > 20_000


def test_too_many_parameters_and_too_small_classes_are_two_findings():
    """Issue 13 point 10: both MSD307 findings had the same (code, location) key; the second was dropped."""
    report = check_data(**_wine(hidden=8192))
    messages = [f.message for f in report.by_code("MSD307")]
    assert len(messages) == 2, messages
    assert "trainable parameters for 133 training samples" in messages[0]
    assert "small for the network's capacity" in messages[1]


# --- MSD307 and weight sharing: a convolution is fitted at every position -------------------------------


def _images(n, side=16, seed=0):
    r = np.random.default_rng(seed)
    return r.normal(size=(n, 1, side, side)).astype(np.float32), r.integers(0, 4, n).astype(np.int32)


def _conv_net():
    """~740k parameters, all but 1k in convolutions (RegNet-like: most capacity in shared kernels)."""
    return nn.SequentialCell([nn.Conv2d(1, 64, 3), nn.ReLU(), nn.Conv2d(64, 256, 3), nn.ReLU(),
                              nn.Conv2d(256, 256, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Dense(256, 4)])


def test_a_convolutional_network_on_a_few_hundred_images_is_not_too_big():
    """Regression (issue 13, regnet_x_200mf / yolov8n): 740k parameters for 256 images is 2900 per image, but
    a 3x3 kernel is fitted at each of the 16x16 positions of every image: 15 per sample."""
    x, y = _images(256)
    report = check_data(dataset(x, y), network=_conv_net())
    assert "MSD307" not in report.codes(), str(report)


def test_a_dense_head_on_a_few_hundred_images_is_still_too_big():
    """Near miss: the same images under a 1M-parameter dense head (nothing shared) still fire, and the message
    says how the shared part was counted."""
    x, y = _images(200)
    net = nn.SequentialCell([nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Flatten(), nn.Dense(8 * 256, 512), nn.ReLU(),
                             nn.Dense(512, 4)])
    (finding,) = [f for f in check_data(dataset(x, y), network=net).by_code("MSD307") if "classes" not in f.location]
    assert finding.evidence["shared_params"] == 8 * 9 and finding.evidence["positions"] == 256
    assert finding.evidence["params_per_sample"] > 5000
    assert "counted once per position: 256 per sample" in finding.message


def test_an_mlp_on_images_shares_nothing():
    """Near miss: a 536k-parameter MLP on 160 8x8 digit images (f_too_few_samples_wide_mlp's size) fires as
    on tabular rows: a dense layer over the flattened pixels is fitted once per image."""
    x = X_DIGITS[:160].reshape(-1, 1, 8, 8) / 16.0
    y = Y_DIGITS[:160]
    net = nn.SequentialCell([nn.Flatten(), nn.Dense(64, 512), nn.ReLU(), nn.Dense(512, 512), nn.ReLU(),
                             nn.Dense(512, 512), nn.ReLU(), nn.Dense(512, 10)])
    report = check_data(dataset(x.astype(np.float32), y), network=net)
    sizes = [f for f in report.by_code("MSD307") if "classes" not in f.location]
    assert len(sizes) == 1 and sizes[0].evidence["shared_params"] == 0, str(report)
