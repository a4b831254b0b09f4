"""sanity(): healthy models pass, models that cannot learn are flagged, the lr suggestion trains well."""
from __future__ import annotations

import functools
import textwrap

import mindspore.dataset as ds
import numpy as np
from mindspore import Tensor, nn

from mindspore_doctor.diagnosis import diagnose
from mindspore_doctor.cli import main as msdoctor
from mindspore_doctor.export.html import render_html, write_html
from mindspore_doctor.sanity_checks import format_sanity_text, sanity


def _dataset(shuffle_labels=False, n=256):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    if shuffle_labels:
        y = rng.permutation(y)
    return ds.NumpySlicesDataset({"x": x, "label": y}, shuffle=False).batch(32)


class MLP(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(8, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 2)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


def build(lr=0.05, freeze_weights=False):
    net = MLP()
    if freeze_weights:  # only the biases train: the model cannot fit mixed labels
        for p in (net.fc1.weight, net.fc2.weight):
            p.requires_grad = False
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, loss, nn.Momentum(net.trainable_params(), lr, 0.9)


def _problems(report):
    return {f.code for f in report.at_least("warning")}


@functools.cache
def _healthy_report():
    return sanity(build, _dataset(), progress=False)


def test_healthy_model_passes_and_keeps_the_curves():
    report = _healthy_report()
    assert _problems(report) == set(), str(report)
    phases = report.meta["sanity"]
    assert phases["overfit_batch"]["fitted"] and abs(phases["initial_loss"]["loss"] - np.log(2)) < 0.5
    curve = report.meta["lr_range_test"]
    assert len(curve["lrs"]) == len(curve["losses"]) >= 10 and curve["suggested_lr"] > 0


def test_lr_range_test_is_plotted_in_the_html_report_and_only_there(tmp_path):
    page = write_html(_healthy_report(), None, tmp_path / "sanity.html").read_text()
    section = page[page.index('id="chart-lr-range-test"'):]
    assert "<svg" in section[:section.index("</section>")] and "Learning-rate range test" in section
    no_curve = sanity(build, object(), progress=False)  # the dataset cannot be read: no phase ran
    assert "lr_range_test" not in no_curve.meta and 'id="chart-lr-range-test"' not in render_html(no_curve)


def test_frozen_weights_cannot_overfit_a_batch_and_diagnosis_says_frozen():
    report = sanity(lambda: build(freeze_weights=True), _dataset(), progress=False)
    assert {"MSD403", "MSD102"} <= _problems(report)
    assert diagnose(report).top.id == "layer-frozen"


def test_shuffled_labels_are_no_better_than_the_baseline():
    report = sanity(build, _dataset(shuffle_labels=True), progress=False)
    assert "MSD404" in _problems(report)
    assert diagnose(report).top.id == "labels-do-not-match-inputs"


def test_tiny_learning_rate_is_diagnosed_from_the_range_test():
    report = sanity(lambda: build(lr=1e-5), _dataset(), progress=False)
    assert "MSD403" in _problems(report)
    assert diagnose(report).top.id == "learning-rate-too-low"
    text = format_sanity_text(report)
    assert text.count("Diagnosis:") == 1 and text.index("Learning rate too low") < text.index("MSD403 [cannot-overfit-batch]")


def test_lr_range_test_really_raises_the_learning_rate(exec_mode):
    """The loss must fall once the lr is large (PyNative ignored Parameter.set_data here: a flat curve)."""
    report = sanity(build, _dataset(), progress=False, select=("MSD403",), overfit_steps=1)
    losses = report.meta["lr_range_test"]["losses"]
    assert min(losses) < 0.6 * losses[0], losses


def _accuracy_after_training(lr, epochs=3):
    net, loss, opt = build(lr=lr)
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
    step.set_train()
    data = _dataset(n=512)
    for _ in range(epochs):
        for x, y in data.create_tuple_iterator():
            step(x, y)
    net.set_train(False)
    x, y = next(_dataset(n=512).create_tuple_iterator(output_numpy=True))
    return float(np.mean(net(Tensor(x)).asnumpy().argmax(1) == y))


def test_lr_suggestion_trains_the_mlp_well_and_is_near_the_best_of_a_grid():
    suggested = sanity(build, _dataset(), progress=False).meta["lr_range_test"]["suggested_lr"]
    assert _accuracy_after_training(suggested) >= 0.9
    grid = {lr: _accuracy_after_training(lr) for lr in (1e-3, 1e-2, 1e-1)}
    best = max(grid, key=grid.get)
    assert best / 10 <= suggested <= best * 10, (suggested, grid)


def test_bad_dataset_is_check_skipped_not_raised():
    report = sanity(build, object(), progress=False)
    assert report.codes() == {"MSD002"}


def test_cli_runs_a_module_target_and_reports_load_errors(tmp_path, monkeypatch, capsys):
    (tmp_path / "sanity_target.py").write_text(textwrap.dedent("""
        import mindspore.dataset as ds, numpy as np
        from mindspore import nn
        def build():
            net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
            return net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), nn.Adam(net.trainable_params(), 1e-2)
        def data():
            x = np.random.default_rng(0).standard_normal((128, 8)).astype(np.float32)
            return ds.NumpySlicesDataset({"x": x, "label": (x[:, 0] > 0).astype(np.int32)}, shuffle=False).batch(16)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    html = tmp_path / "out" / "sanity.html"
    assert msdoctor(["sanity", "sanity_target:build", "--data", "sanity_target:data", "--format", "json",
                     "--html", str(html)]) == 0
    assert '"lr_range_test"' in capsys.readouterr().out
    assert 'id="chart-lr-range-test"' in html.read_text()
    assert msdoctor(["sanity", "sanity_target:nope", "--data", "sanity_target:data"]) == 2
    assert "no attribute" in capsys.readouterr().err


def test_public_sanity_is_the_function_even_after_its_module_was_imported():
    import mindspore_doctor
    import mindspore_doctor.sanity_checks  # noqa: F401 - binds the module on the package, as any import would

    assert mindspore_doctor.sanity is sanity
    from mindspore_doctor import sanity as public

    assert public is sanity


def _one_logit(shuffle_labels):
    """Breast cancer (scikit-learn's real data, exported once): one logit and BCEWithLogitsLoss."""
    from pathlib import Path

    data = np.load(Path(__file__).resolve().parents[1] / "benchmarks" / "realworld" / "data" / "breast_cancer.npz")
    x = ((data["x"] - data["x"].mean(0)) / data["x"].std(0)).astype(np.float32)
    y = data["y"].astype(np.float32)[:, None]
    order = np.random.default_rng(0).permutation(len(y))
    labels = np.random.default_rng(1).permutation(y[order]) if shuffle_labels else y[order]
    dataset = ds.NumpySlicesDataset({"x": x[order], "label": labels}, shuffle=False).batch(32)

    def build_binary():
        net = nn.SequentialCell([nn.Dense(30, 16), nn.ReLU(), nn.Dense(16, 1)])
        return net, nn.BCEWithLogitsLoss(), nn.Adam(net.trainable_params(), 0.01)

    return build_binary, dataset


def test_one_logit_binary_classifier_is_judged_by_accuracy():
    """Issue 13 point 9: the baseline phase compared raw logits with 0/1 labels by MSE."""
    report = sanity(*_one_logit(shuffle_labels=False), progress=False)
    assert report.meta["sanity"]["baseline"]["task"] == "binary", report.meta["sanity"]["baseline"]
    assert report.meta["sanity"]["baseline"]["model"] > 0.85 and "MSD404" not in report.codes(), str(report)
    shuffled = sanity(*_one_logit(shuffle_labels=True), progress=False)
    assert "MSD404" in shuffled.codes(), str(shuffled)
