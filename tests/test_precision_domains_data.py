"""Issue 24, classes 2, 3, 4 and 9: the data checks beyond image classifiers.

2. MSD304 judges what the network receives: a loop that scales the batch between the iterator and the step.
3. MSD310 judges id columns as ids: CTR id/value pairs and BOS/CLS markers are by design; a constant id at the
   rare end of the vocabulary (a hand-built vocabulary's unknown-word id) is a tokenisation bug.
4. MSD307 counts samples, not batches, in every pipeline shape.
9. MSD308 finds an eval set in other units (°F for °C, lb for kg) from location and scale together, against
   their standard errors, and stays quiet on small eval sets and on real data split as shipped.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import mint, nn, ops

from mindspore_doctor import Doctor
from mindspore_doctor import check_data

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "realworld" / "data"


def warnings_of(report, code):
    return [f for f in report.findings if f.code == code and f.severity.value in ("warning", "error")]


# --- 4. sample counting ---------------------------------------------------------------------------------------

ROWS, FEATURES, BATCH = 3000, 20, 50
X = np.random.default_rng(0).normal(size=(ROWS, FEATURES)).astype(np.float32)
Y = np.random.default_rng(1).integers(0, 4, ROWS).astype(np.int32)


class Batches:
    """A random-access source whose items are whole batches (60 of 50 rows), as code ported from PyTorch has."""

    def __len__(self):
        return ROWS // BATCH

    def __getitem__(self, i):
        return X[i * BATCH:(i + 1) * BATCH], Y[i * BATCH:(i + 1) * BATCH]


def _batched_generator():
    for i in range(0, 1000, BATCH):
        yield X[i:i + BATCH], Y[i:i + BATCH]


def _rows(count):
    def generate():
        for i in range(count):
            yield X[i], Y[i]
    return generate


PIPELINES = {
    "random-access source of batches": (lambda: ds.GeneratorDataset(Batches(), ["x", "label"], shuffle=True), ROWS),
    "generator of batches, read to the end": (lambda: ds.GeneratorDataset(_batched_generator, ["x", "label"]), 1000),
    "generator of rows, read to the end": (lambda: ds.GeneratorDataset(_rows(1000), ["x", "label"]), 1000),
    "numpy slices, batch": (lambda: ds.NumpySlicesDataset({"x": X, "label": Y}).batch(BATCH), ROWS),
    "dict columns, batch then map": (
        lambda: ds.NumpySlicesDataset({"x": X, "label": Y}).batch(BATCH).map(lambda x: x * 2, "x"), ROWS),
    "map then batch": (lambda: ds.NumpySlicesDataset({"x": X, "label": Y}).map(lambda x: x * 2, "x").batch(BATCH), ROWS),
    "padded_batch": (lambda: ds.NumpySlicesDataset({"x": X, "label": Y}).padded_batch(BATCH), ROWS),
    "batch with a partial last batch": (lambda: ds.NumpySlicesDataset({"x": X[:2990], "label": Y[:2990]}).batch(64), 2990),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_samples_are_counted_not_batches(name):
    build, expected = PIPELINES[name]
    net = nn.Dense(FEATURES, 4)
    report = check_data(build(), network=net)
    train = report.meta["data"]["train"]
    assert abs(train["total_samples"] - expected) <= 0.01 * expected, train
    assert train["samples"] >= min(expected, 2048), train
    assert not report.by_code("MSD306"), str(report)  # one forward pass on a real batch: 4 outputs, labels 0..3


def test_a_big_network_on_a_source_of_batches_is_judged_on_its_samples():
    """The issue's case: 4.7M parameters, 3000 samples in 60 batches. Judged on 3000 (1566 per sample), not 60."""
    net = nn.SequentialCell([nn.Dense(FEATURES, 2048), nn.ReLU(), nn.Dense(2048, 2048), nn.ReLU(), nn.Dense(2048, 4)])
    (finding,) = [f for f in check_data(PIPELINES["random-access source of batches"][0](), network=net).by_code("MSD307")
                  if "classes" not in f.location]
    assert finding.evidence["samples"] == ROWS and "3,000 training samples" in finding.message


def test_a_small_network_on_a_source_of_batches_has_enough_samples():
    report = check_data(PIPELINES["random-access source of batches"][0](), network=nn.Dense(FEATURES, 4))
    assert not report.by_code("MSD307"), str(report)


def test_per_token_tags_of_one_sequence_stay_one_sample():
    """Unbatched (tokens[T], tags[T]) rows share a leading length but are single samples (1-D inputs)."""
    tokens = np.random.default_rng(2).integers(0, 50, (40, 12)).astype(np.int32)
    tags = np.random.default_rng(3).integers(0, 5, (40, 12)).astype(np.int32)
    report = check_data(ds.NumpySlicesDataset({"tokens": tokens, "tags": tags}, shuffle=False))
    assert report.meta["data"]["train"]["samples"] == 40


# --- 3. identifier columns --------------------------------------------------------------------------------------

VOCAB = 3051  # 0 pad, 1 BOS, 2 EOS, 3.. words; a hand-built vocabulary appends its unknown-word id: 3050
SEQUENCES = np.random.default_rng(4).integers(3, 3050, (600, 24)).astype(np.int32)
SENTIMENT = np.random.default_rng(5).integers(0, 2, 600).astype(np.int32)


class TextClassifier(nn.Cell):
    def __init__(self, embedding=nn.Embedding, **options):
        super().__init__()
        self.embed = embedding(VOCAB, 16, **options)
        self.head = nn.Dense(16, 2)

    def construct(self, tokens):
        return self.head(self.embed(tokens).mean(1))


def token_dataset(first_token=None, last_token=None, batched=True):
    tokens = SEQUENCES.copy()
    if first_token is not None:
        tokens[:, 0] = first_token
    if last_token is not None:
        tokens[:, -1] = last_token
    pipeline = ds.NumpySlicesDataset({"tokens": tokens, "label": SENTIMENT}, shuffle=False)
    return pipeline.batch(32) if batched else pipeline


@pytest.mark.parametrize("network", [None, "nn", "mint"])
def test_every_sequence_starting_with_the_unknown_word_id_is_a_token_finding(network):
    net = {None: None, "nn": TextClassifier(), "mint": TextClassifier(mint.nn.Embedding)}[network]
    (finding,) = warnings_of(check_data(token_dataset(first_token=3050), network=net), "MSD310")
    assert finding.message.startswith("Every sequence of `tokens` starts with id 3050")
    assert finding.evidence["largest_other_id"] == 3049


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "rows"])
def test_bos_and_eos_markers_are_by_design(batched):
    report = check_data(token_dataset(first_token=1, last_token=2, batched=batched), network=TextClassifier())
    assert not report.by_code("MSD310"), str(report)


def test_trailing_padding_known_from_the_embedding_is_not_a_finding():
    """Every sequence padded at its end with the embedding's padding_idx (here the largest id, on purpose)."""
    net = TextClassifier(padding_idx=3050)
    report = check_data(token_dataset(last_token=3050), network=net)
    assert not report.by_code("MSD310"), str(report)


CTR_ROWS, NUMERIC, CATEGORICAL = 800, 13, 26


def ctr_columns(seed=6):
    """Criteo-style id/value pairs: numeric fields keep a fixed id and carry their value, one-hot fields carry
    value 1 and vary their id; ids come from one table with a per-field offset."""
    r = np.random.default_rng(seed)
    ids = np.concatenate([np.tile(np.arange(1, NUMERIC + 1), (CTR_ROWS, 1)),
                          NUMERIC + 1 + 40 * np.arange(CATEGORICAL) + r.integers(0, 40, (CTR_ROWS, CATEGORICAL))], 1)
    values = np.concatenate([r.random((CTR_ROWS, NUMERIC)), np.ones((CTR_ROWS, CATEGORICAL))], 1)
    clicks = r.integers(0, 2, (CTR_ROWS, 1)).astype(np.float32)
    return ids.astype(np.int32), values.astype(np.float32), clicks


class WideDeep(nn.Cell):
    def __init__(self, embedding=None):
        super().__init__()
        self.table = ms.Parameter(ms.Tensor(np.random.default_rng(0).normal(0, 0.01, (1100, 8)).astype(np.float32)))
        self.embedding = embedding
        self.head = nn.Dense((NUMERIC + CATEGORICAL) * 8, 1)

    def construct(self, ids, values):
        rows = self.embedding(ids) if self.embedding is not None else ops.gather(self.table, ids, 0)
        return self.head((rows * values.expand_dims(-1)).reshape(ids.shape[0], -1))


@pytest.mark.parametrize("network", ["gathered table", "nn.Embedding", None])
@pytest.mark.parametrize("api", ["numpy slices", "generator of batches"])
def test_ctr_field_ids_and_one_hot_values_are_not_constant_features(network, api):
    ids, values, clicks = ctr_columns()
    net = {"gathered table": WideDeep(), "nn.Embedding": WideDeep(nn.Embedding(1100, 8)), None: None}[network]
    if api == "numpy slices":
        pipeline = ds.NumpySlicesDataset({"feat_ids": ids, "feat_vals": values, "label": clicks}).batch(64)
    else:
        def generate():
            for i in range(0, CTR_ROWS, 64):
                yield ids[i:i + 64], values[i:i + 64], clicks[i:i + 64]
        pipeline = ds.GeneratorDataset(generate, ["feat_ids", "feat_vals", "label"])
    report = check_data(pipeline, network=net)
    assert not report.by_code("MSD310"), str(report)


def test_a_dead_ctr_field_is_still_a_constant_feature():
    """A numeric field whose value never varies (and whose id is fixed): no information, whatever the design."""
    ids, values, clicks = ctr_columns()
    values[:, 4] = 0.5
    report = check_data(ds.NumpySlicesDataset({"feat_ids": ids, "feat_vals": values, "label": clicks}).batch(64))
    (finding,) = report.by_code("MSD310")
    assert finding.location["column"] == "feat_vals" and finding.evidence["features"] == [4]


def test_a_constant_column_of_an_integer_table_is_still_constant():
    """Integer quantities (no embedding, ranges unlike one vocabulary) are features, not ids."""
    r = np.random.default_rng(7)
    table = np.stack([r.integers(18, 90, 500), r.integers(0, 6, 500), np.full(500, 3),
                      r.integers(0, 200000, 500)], 1).astype(np.int32)
    report = check_data(ds.NumpySlicesDataset({"x": table, "label": r.integers(0, 2, 500).astype(np.int32)}).batch(32))
    (finding,) = warnings_of(report, "MSD310")
    assert finding.evidence["features"] == [2]


# --- 9. evaluation data in other units --------------------------------------------------------------------------


def units_tables(n_train, n_eval, convert, seed=8, mean=0.0, std=25.0):
    """Eight standardised-scale features; feature 0 an air temperature (mean ``mean``, std ``std`` in °C)
    that ``convert`` maps for the eval set."""
    r = np.random.default_rng(seed)
    train, evaluation = r.normal(size=(n_train, 8)), r.normal(size=(n_eval, 8))
    train[:, 0] = train[:, 0] * std + mean
    evaluation[:, 0] = convert(evaluation[:, 0] * std + mean)
    labels = (np.arange(max(n_train, n_eval)) % 2).astype(np.int32)
    return [ds.NumpySlicesDataset({"x": t.astype(np.float32), "label": labels[:len(t)]}).batch(20)
            for t in (train, evaluation)]


CONVERSIONS = {"°C -> °F": lambda c: c * 1.8 + 32, "kg -> lb": lambda kg: kg * 2.2046, "m -> ft": lambda m: m * 3.281}


@pytest.mark.parametrize("conversion", sorted(CONVERSIONS))
def test_an_eval_feature_in_other_units_is_a_mismatch(conversion):
    """Location moved by ~1.3 train stds and scale by 1.8-3.3x: the old mean-shift test alone misses °C -> °F."""
    mean, std = {"°C -> °F": (0.0, 25.0), "kg -> lb": (70.0, 15.0), "m -> ft": (1.7, 0.1)}[conversion]
    train, evaluation = units_tables(240, 60, CONVERSIONS[conversion], mean=mean, std=std)
    (finding,) = check_data(train, evaluation).by_code("MSD308")
    assert finding.evidence["feature"] == 0 and finding.evidence["features"] == [0]
    assert "eval ≈" in finding.message and "60 eval samples" in finding.message


@pytest.mark.parametrize("n_eval", [12, 30, 60])
@pytest.mark.parametrize("distribution", ["normal", "lognormal"])
def test_small_eval_sets_in_the_same_units_do_not_cry_wolf(n_eval, distribution):
    draw = {"normal": lambda r, n: r.normal(size=(n, 8)), "lognormal": lambda r, n: r.lognormal(0, 1, (n, 8))}[distribution]
    quiet = 0
    for seed in range(10):
        r = np.random.default_rng(100 + seed)
        labels = np.zeros(120, np.int32)
        train = ds.NumpySlicesDataset({"x": draw(r, 120).astype(np.float32), "label": labels}).batch(20)
        evaluation = ds.NumpySlicesDataset({"x": draw(r, n_eval).astype(np.float32), "label": labels[:n_eval]}).batch(20)
        quiet += "MSD308" not in check_data(train, evaluation).codes()
    assert quiet >= 9  # the large-difference test's own rare alarms on lognormal samples of 12 (not units)


@pytest.mark.parametrize("name", ["wine", "breast_cancer", "diabetes", "digits"])
def test_real_data_split_as_shipped_is_not_a_mismatch(name):
    with np.load(DATA / f"{name}.npz") as saved:
        x, y = saved["x"].astype(np.float32), saved["y"]
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(len(x))
        cut = int(round(len(x) * 0.8))
        train, evaluation = (ds.NumpySlicesDataset({"x": x[i], "label": y[i]}).batch(32)
                             for i in (order[:cut], order[cut:]))
        assert "MSD308" not in check_data(train, evaluation).codes(), (name, seed)


# --- 2. data transformed in the loop --------------------------------------------------------------------------

PIXELS = np.clip(np.random.default_rng(9).normal(120, 60, (128, 1, 12, 12)), 0, 255).astype(np.float32)
DIGITS = np.random.default_rng(10).integers(0, 4, 128).astype(np.int32)


class SmallCNN(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.head = nn.Dense(4 * 12 * 12, 4)

    def construct(self, x):
        return self.head(ops.relu(self.conv(x)).reshape(x.shape[0], -1))


def train_in_a_loop(scale, pass_batch, source="numpy"):
    """A quick-start loop over raw 0-255 pixels; ``scale`` maps the batch before the network."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net, loss_fn = SmallCNN(), nn.CrossEntropyLoss()
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    if source == "numpy":
        pipeline = ds.NumpySlicesDataset({"image": PIXELS, "label": DIGITS}).batch(32)
    elif source == "numpy NHWC":
        pipeline = ds.NumpySlicesDataset({"image": PIXELS.transpose(0, 2, 3, 1), "label": DIGITS}).batch(32)
    else:
        def generate():
            for i in range(0, 128, 32):
                yield PIXELS[i:i + 32], DIGITS[i:i + 32]
        pipeline = ds.GeneratorDataset(generate, ["image", "label"])
    grad_fn = ms.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
    doctor = Doctor(summary_dir=tempfile.mkdtemp())
    net.set_train()
    with doctor.watch(net, optimizer, loss_fn=loss_fn, train_dataset=pipeline) as run:
        for image, label in pipeline.create_tuple_iterator():
            image = scale(image)
            loss, grads = grad_fn(image, label)
            optimizer(grads)
            run.step(loss, image, label) if pass_batch else run.step(loss)
    return doctor.report.by_code("MSD304")


@pytest.mark.parametrize("source", ["numpy", "generator of batches", "numpy NHWC"])
def test_a_loop_that_scales_the_batch_is_judged_on_what_the_network_receives(source):
    """Also when the loop transposes the batch (NHWC dataset, NCHW network): matched by size."""
    layout = (lambda x: x.transpose(0, 3, 1, 2)) if source == "numpy NHWC" else (lambda x: x)
    (finding,) = train_in_a_loop(lambda x: layout(x / 127.5 - 1), pass_batch=True, source=source)
    assert finding.severity.value == "info"
    assert "differs between the dataset and the network" in finding.message
    assert finding.evidence["judged_on"] == "the batch passed to the training step"


def test_a_loop_that_passes_raw_pixels_still_gets_the_warning():
    (finding,) = train_in_a_loop(lambda x: x, pass_batch=True)
    assert finding.severity.value == "warning" and "Raw 0-255 pixels?" in finding.message


def test_a_loop_that_scales_but_forgets_to_center_is_judged_on_its_batch():
    """x / 2: still far from mean 0 / std 1, now with the numbers the network really gets."""
    (finding,) = train_in_a_loop(lambda x: x / 2, pass_batch=True)
    assert finding.severity.value == "warning" and "Judged on the batch the training step receives" in finding.message
    assert 55 < finding.evidence["mean"] < 65


def test_a_loop_that_does_not_pass_the_batch_is_told_how():
    (finding,) = train_in_a_loop(lambda x: x / 127.5 - 1, pass_batch=False)
    assert finding.severity.value == "warning" and "run.step(loss, *batch)" in finding.suggestion


def test_a_whole_graph_in_one_element_is_not_one_sample():
    """GCN training: the dataset yields the graph once (adjacency, node features); its nodes are the samples."""
    r = np.random.default_rng(11)
    adjacency = (r.random((1, 200, 200)) < 0.02).astype(np.float32)
    features = r.random((1, 200, 30)).astype(np.float32)

    class GCN(nn.Cell):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Dense(30, 64, has_bias=False), nn.Dense(64, 7, has_bias=False)

        def construct(self, adj, feature):
            return ops.matmul(adj, self.second(ops.relu(ops.matmul(adj, self.first(feature)))))

    report = check_data(ds.NumpySlicesDataset({"adj": adjacency, "feature": features}, shuffle=False), network=GCN())
    assert not warnings_of(report, "MSD307"), str(report)


@pytest.mark.parametrize("outputs", [1, 2])
def test_a_rare_click_rate_learned_as_a_probability_is_a_base_rate(outputs):
    """CTR: ~8 % clicks, one sigmoid output (info); the same labels under a 2-class argmax classifier (warning)."""
    r = np.random.default_rng(12)
    x = r.normal(size=(2000, 10)).astype(np.float32)
    clicks = (r.random(2000) < 0.08).astype(np.float32 if outputs == 1 else np.int32)
    labels = clicks[:, None] if outputs == 1 else clicks
    (finding,) = check_data(ds.NumpySlicesDataset({"x": x, "label": labels}).batch(100),
                            network=nn.Dense(10, outputs)).by_code("MSD302")
    assert finding.severity.value == ("info" if outputs == 1 else "warning"), finding.message
