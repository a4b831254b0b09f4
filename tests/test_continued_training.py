"""Continued training is not fresh training (issue 23): a second ``model.train`` call, a run resumed from a
checkpoint and a fine-tuning run start from trained weights, so the rules that judge a fresh network's first losses
(MSD215, MSD205) keep quiet on them; a fresh, badly initialised network still gets MSD215."""
from __future__ import annotations

import math
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.common.initializer import Normal
from mindspore.train import Model

from mindspore_doctor import Doctor
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import training as rules
from mindspore_doctor.signals import StartState, StepSignals, TrainingHistory
from mindspore_doctor.static.start_state import _uneven_lines

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "realworld" / "data"
QUIET = ("MSD3",)  # the data checks have their own tests
CLASSES = 10
FAR_BELOW = math.log(CLASSES) / DoctorConfig().initial_loss_factor  # a first loss under it was MSD215 before
SHORT = 4
"""Batches of a run whose first loss is all a test reads (MSD215 judges the first loss)."""


def _digits():
    d = np.load(DATA / "digits.npz")
    x = d["x"].astype(np.float32)
    return (x - x.mean(0)) / (x.std(0) + 1e-6), d["y"].astype(np.int32)


X, Y = _digits()


def _dataset(batches=None):
    data = ds.NumpySlicesDataset({"x": X, "label": Y}, shuffle=False).batch(64)
    return data.take(batches) if batches else data


class Classifier(nn.Cell):
    """A digits MLP; ``norm`` puts a BatchNorm in the backbone, ``head`` replaces the default last layer."""

    def __init__(self, norm=False, head=None, logit_scale=1.0):
        super().__init__()
        layers = [nn.Dense(64, 32)] + ([nn.BatchNorm1d(32)] if norm else []) + [nn.ReLU()]
        self.backbone = nn.SequentialCell(layers)
        self.head = head or nn.Dense(32, CLASSES)
        self.logit_scale = logit_scale

    def construct(self, x):
        return self.head(self.backbone(x)) * self.logit_scale


def _loss():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def _model(net, lr=1e-2):
    return Model(net, _loss(), nn.Adam(net.trainable_params(), lr))


def _train(model, doctor=None, epochs=1, batches=None):
    model.train(epochs, _dataset(batches), callbacks=[doctor] if doctor else None, dataset_sink_mode=False)
    return doctor


def _doctor():
    return Doctor(ignore=QUIET, print_summary=False)


def _trained(norm=False):
    """A classifier trained for 3 epochs in GRAPH mode, without a Doctor: only its weights can tell."""
    net = Classifier(norm=norm)
    _train(_model(net), epochs=3)
    return net


def _first_loss(doctor):
    return doctor.history.losses[0][1]


# --- continued, resumed, fine-tuned: no MSD215 --------------------------------------------------------------


def test_second_model_train_call_starts_from_trained_weights():
    model = _model(Classifier())
    first = _train(model, _doctor(), epochs=3)
    assert first.history.start.fresh is True and "MSD215" not in first.report.codes()
    second = _train(model, _doctor(), batches=SHORT)
    assert _first_loss(second) < FAR_BELOW
    assert second.history.start.fresh is False
    assert "earlier in this process" in second.history.start.reason
    assert "MSD215" not in second.report.codes()


def test_reused_doctor_judges_its_second_run_as_continued():
    model, doctor = _model(Classifier()), _doctor()
    _train(model, doctor, epochs=3)
    _train(model, doctor, batches=SHORT)
    assert doctor.history.losses[-SHORT][1] < FAR_BELOW  # the second run's first loss
    assert doctor.history.start.fresh is False
    assert "MSD215" not in doctor.report.codes()


def test_resumed_from_a_checkpoint_with_a_new_optimizer(tmp_path):
    path = str(tmp_path / "digits.ckpt")
    ms.save_checkpoint(_trained(), path)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    resumed = Classifier()
    ms.load_checkpoint(path, resumed)
    doctor = _train(_model(resumed), _doctor(), batches=SHORT)  # a new Adam: its state says nothing
    assert _first_loss(doctor) < FAR_BELOW
    assert doctor.history.start.fresh is False, doctor.history.start.reason
    assert "Dense `backbone.0.weight`" in doctor.history.start.reason
    assert "MSD215" not in doctor.report.codes()


@pytest.mark.parametrize("freeze", [False, True], ids=["whole", "frozen-backbone"])
def test_fine_tuning_a_trained_classifier(freeze):
    tuned = Classifier(norm=True)
    ms.load_param_into_net(tuned, {p.name: p for p in _trained(norm=True).get_parameters()})
    ms.set_context(mode=ms.PYNATIVE_MODE)
    for param in tuned.backbone.get_parameters():
        param.requires_grad = not freeze
    doctor = _train(_model(tuned, lr=1e-3), _doctor(), batches=SHORT)
    assert _first_loss(doctor) < FAR_BELOW
    assert doctor.history.start.fresh is False
    assert "BatchNorm1d `backbone.1.gamma` is not constant" in doctor.history.start.reason
    assert "MSD215" not in doctor.report.codes()


# --- fresh networks: judged as before ---------------------------------------------------------------------


@pytest.mark.parametrize("build", [lambda: Classifier(head=nn.Dense(32, CLASSES, weight_init=Normal(5))),
                                   lambda: Classifier(logit_scale=30.0)], ids=["head-sigma-5", "logits-x30"])
def test_fresh_badly_initialised_classifier_still_gets_msd215(build):
    doctor = _train(_model(build()), _doctor(), batches=SHORT)
    (finding,) = doctor.report.by_code("MSD215")
    assert finding.evidence["first_loss"] > 3 * math.log(CLASSES)
    assert finding.evidence["fresh_start"] is True
    assert "hold the values of a MindSpore initialisation" in finding.evidence["start_state"]


def test_fresh_healthy_classifier_gets_no_msd215():
    doctor = _train(_model(Classifier()), _doctor(), batches=SHORT)
    assert doctor.history.start.fresh is True
    assert abs(_first_loss(doctor) - math.log(CLASSES)) < 0.5
    assert "MSD215" not in doctor.report.codes()


# --- the rules and the measurement, on plain numbers --------------------------------------------------------

CONFIG = DoctorConfig()
TRAINED = StartState(False, "Adam has taken 84 steps already (`global_step`)")
FRESH = StartState(True, "Adam at step 0 with its state as initialised; 4 of 4 parameters hold ...")
UNKNOWN = StartState(None, "none of the 4 parameters shows training")


def _history(first_loss, start):
    return TrainingHistory(steps=[StepSignals(step=1, loss=first_loss)], num_classes=2, start=start)


@pytest.mark.parametrize("start, fires", [(TRAINED, False), (FRESH, True), (UNKNOWN, True), (None, True)])
def test_unexpected_initial_loss_needs_a_start_not_known_trained(start, fires):
    found = rules.unexpected_initial_loss(_history(0.04189, start), CONFIG)
    assert bool(found) is fires
    if fires:
        assert found[0].evidence["fresh_start"] == (start.fresh if start else None)
        assert found[0].evidence["start_state"] == (start.reason if start else "not measured")


@pytest.mark.parametrize("start, fires", [(TRAINED, False), (FRESH, True), (None, True)])
def test_suspiciously_low_loss_needs_a_start_not_known_trained(start, fires):
    assert bool(rules.loss_suspiciously_low(_history(1e-6, start), CONFIG)) is fires


def test_start_state_survives_the_history_file():
    history = TrainingHistory.from_dict(_history(0.5, TRAINED).to_dict())
    assert history.start == TRAINED
    assert TrainingHistory.from_dict(_history(0.5, None).to_dict()).start is None


def test_uneven_rows_or_columns_tell_trained_weights_from_any_random_init():
    rng = np.random.default_rng(0)
    orthogonal = np.linalg.qr(rng.normal(size=(64, 32)))[0]
    for draw in (rng.uniform(-0.1, 0.1, (64, 32)), rng.normal(0, 10, (64, 32)), orthogonal):
        assert _uneven_lines(draw.reshape(-1), (64, 32)) is None
    columns = rng.uniform(-0.1, 0.1, (64, 32)) * np.linspace(0.5, 2.0, 32)  # some inputs matter more
    lines, count, dispersion, chance = _uneven_lines(columns.reshape(-1), (64, 32))
    assert (lines, count) == ("columns", 32) and dispersion > chance
    assert _uneven_lines(columns.reshape(-1)[:8 * 32], (64, 32)) is None  # 8 sampled rows: too few to tell
