"""Adversarial training (issue 24): one watch over a GAN's two models, its losses not judged as minimised ones, and
what does go wrong in a GAN judged instead (MSD217 the discriminator wins, MSD218 real and generated samples in
different ranges)."""
import numpy as np
import pytest
from mindspore import nn

from mindspore_doctor import Doctor
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules import adversarial, training
from mindspore_doctor.signals import AdversarialSignals, StepSignals, TrainingHistory
from mindspore_doctor.training.multi import role, value_stats

CONFIG = DoctorConfig()
LOSS_TREND = {"MSD202", "MSD203", "MSD204", "MSD205"}


def codes(findings):
    return sorted(f.code for f in findings)


def game(d_start, d_end, g_start, g_end, steps=200, seed=0):
    """Two loss curves going geometrically from start to end, with batch noise."""
    r = np.random.default_rng(seed)
    curve = lambda a, b: a * (b / a) ** np.linspace(0, 1, steps) * (1 + 0.1 * r.standard_normal(steps))
    d, g = curve(d_start, d_end), curve(g_start, g_end)
    return AdversarialSignals("generator", "discriminator", generator_losses=list(enumerate(g.tolist(), 1)),
                              discriminator_losses=list(enumerate(d.tolist(), 1)))


# --- MSD217: the discriminator wins --------------------------------------------------------------


def test_msd217_discriminator_loss_collapses_while_generator_loss_grows():
    found = adversarial.discriminator_overpowers(game(1.3, 0.01, 0.7, 5.0), CONFIG)
    assert codes(found) == ["MSD217"]
    assert found[0].location["model"] == "discriminator"
    assert "`discriminator`" in found[0].message and "`generator`" in found[0].message


@pytest.mark.parametrize("d_end, g_end", [(0.5, 2.5), (0.01, 0.8), (0.1, 5.0)])
def test_msd217_near_misses_a_discriminator_ahead_but_not_winning(d_end, g_end):
    """A healthy game where the discriminator leads (1.3 -> 0.5, generator 0.7 -> 2.5), a discriminator at ~0 whose
    generator's loss did not grow, and one at 8 % of its start: no finding."""
    assert adversarial.discriminator_overpowers(game(1.3, d_end, 0.7, g_end), CONFIG) == []


def test_msd217_does_not_judge_a_wasserstein_critic():
    signals = game(1.3, 0.01, 0.7, 5.0)
    signals.discriminator_losses = [(s, v - 2.0) for s, v in signals.discriminator_losses]  # critic losses < 0
    assert adversarial.discriminator_overpowers(signals, CONFIG) == []


# --- MSD218: real and generated samples in different ranges ---------------------------------------


def streams(real, generated, activation=None):
    r = np.random.default_rng(0)
    signals = AdversarialSignals("generator", "discriminator", real=value_stats(real(r), 0),
                                 output_activation=activation)
    signals.generated = [value_stats(generated(r, step), step) for step in (1, 50, 100)]
    return signals


def digits_like(low, high):
    """Pixels mostly at ``low`` (background), the rest spread up to ``high``."""
    return lambda r: np.where(r.random(4096) < 0.5, low, r.uniform(low, high, 4096))


def test_msd218_unit_range_images_for_a_tanh_generator():
    tanh = lambda r, step: np.tanh(r.normal(0, 1.0, 4096))
    found = adversarial.real_fake_range_mismatch(streams(digits_like(0.0, 1.0), tanh, "tanh"), CONFIG)
    assert codes(found) == ["MSD218"]
    assert found[0].step == 1 and "Tanh" in found[0].message and "[0, 1]" in found[0].message
    assert "2 * x - 1" in found[0].suggestion


def test_msd218_data_beyond_a_sigmoid_generators_reach():
    sigmoid = lambda r, step: 1 / (1 + np.exp(-r.normal(0, 1, 4096)))
    found = adversarial.real_fake_range_mismatch(streams(digits_like(-1.0, 1.0), sigmoid, "sigmoid"), CONFIG)
    assert codes(found) == ["MSD218"] and "beyond anything it can produce" in found[0].message


def test_msd218_measured_without_a_bounded_output_layer():
    linear = lambda r, step: r.normal(-1.5, 0.5, 4096)  # most of it below the data's 0
    assert codes(adversarial.real_fake_range_mismatch(streams(digits_like(0.0, 1.0), linear), CONFIG)) == ["MSD218"]


@pytest.mark.parametrize("generated, activation", [
    (lambda r, step: np.tanh(r.normal(0, 0.3, 4096)), "tanh"),              # a fresh Tanh generator, data in [-1, 1]
    (lambda r, step: r.normal(0.3, 0.3 + step / 200, 4096) * 0.5, None),     # a linear output learning the range
    (lambda r, step: r.normal(-1.5, 0.5, 4096) if step == 1 else r.uniform(-0.9, 0.9, 4096), None),  # strayed once
])
def test_msd218_near_misses_generators_inside_the_data_range(generated, activation):
    assert adversarial.real_fake_range_mismatch(streams(digits_like(-1.0, 1.0), generated, activation), CONFIG) == []


# --- adversarial losses are not judged as minimised ones ------------------------------------------


def test_loss_trend_rules_keep_quiet_on_an_adversarial_loss():
    """A generator's loss rising from 0.7 to 3 (its discriminator improving) and swinging: MSD202 for a classifier's
    loss, nothing for an adversarial one."""
    r = np.random.default_rng(0)
    losses = np.concatenate([np.full(40, 0.7), np.linspace(0.7, 3.0, 160)]) * (1 + 0.05 * r.standard_normal(200))
    history = TrainingHistory(steps=[StepSignals(step=i + 1, loss=float(v)) for i, v in enumerate(losses)])
    judged = {code for codes_, rule in training.TRAINING_RULES for code in codes(rule(history, CONFIG))}
    assert "MSD202" in judged
    history.adversarial = True
    judged = {code for codes_, rule in training.TRAINING_RULES for code in codes(rule(history, CONFIG))}
    assert not judged & LOSS_TREND


def test_players_are_told_by_their_names():
    assert [role(n) for n in ("generator", "netG", "G", "gen_model", "discriminator", "net_D", "critic", "encoder")] \
        == ["generator"] * 3 + [None, "discriminator", "discriminator", "discriminator", None]


# --- the watch, on a real GAN ---------------------------------------------------------------------


def small_gan():
    generator = nn.SequentialCell(nn.Dense(8, 64), nn.LeakyReLU(0.2), nn.Dense(64, 64), nn.Tanh())
    discriminator = nn.SequentialCell(nn.Dense(64, 64), nn.LeakyReLU(0.2), nn.Dense(64, 1))
    return generator, discriminator


def train(real, epochs, names=("generator", "discriminator"), **options):
    from benchmarks.realworld import gan

    doctor = Doctor(print_summary=False, mindinsight=False, html_report=False, **options)
    outcome = gan.train_gan(*small_gan(), real, epochs, [doctor], latent=8, names=names)
    return doctor, outcome


def test_a_healthy_gan_gets_no_warning_and_one_report_naming_each_model():
    from benchmarks.realworld import gan

    doctor, outcome = train(gan.digits(), epochs=5, probe_every=20)
    report = doctor.report
    assert not report.codes() & LOSS_TREND, report
    assert report.at_least("warning") == [], report
    assert set(doctor.histories) == {"generator", "discriminator"}
    assert all(h.adversarial and len(h.steps) == len(outcome.losses) for h in doctor.histories.values())
    assert {f.location.get("model") for f in report.findings} <= {"generator", "discriminator"}
    assert all(h.probed() and h.probed()[0].grad_norm for h in doctor.histories.values())  # both optimizers probed
    signals = report.meta["adversarial_signals"]
    assert signals["output_activation"] == "tanh" and signals["real"]["quantiles"][0] == -1.0


def test_unit_range_images_for_a_tanh_generator_are_reported_at_the_first_step():
    from benchmarks.realworld import gan

    doctor, _ = train(gan.digits(0.0, 1.0), epochs=1, probe_every=10)
    (found,) = doctor.report.by_code("MSD218")
    assert found.step == 1 and found.severity.value == "warning" and found.location["model"] == "discriminator"


def test_a_label_column_in_a_gans_dataset_is_not_the_discriminators_target():
    """MNIST or an image folder keeps its label column (digits 0-9): the discriminator predicts real/fake (1 logit),
    not those labels: no MSD306 "labels outside the outputs", no MSD114 "output (64, 1) against labels (64,)"."""
    import mindspore.dataset as mds
    from benchmarks.realworld import corpus, gan

    generator, discriminator = small_gan()
    opt_g, opt_d = (nn.Adam(n.trainable_params(), 2e-4) for n in (generator, discriminator))
    dataset = mds.NumpySlicesDataset({"image": gan.digits(), "label": corpus.load("digits")[1].astype(np.int32)})
    doctor = Doctor(print_summary=False, mindinsight=False, html_report=False)
    with doctor.watch({"generator": (generator, opt_g), "discriminator": (discriminator, opt_d)},
                      loss_fn=nn.BCEWithLogitsLoss(), train_dataset=dataset.batch(64)):
        pass
    assert not doctor.report.codes() & {"MSD114", "MSD302", "MSD305", "MSD306"}, doctor.report


def test_the_watch_restores_both_models_and_reports_when_the_loop_raises(tmp_path):
    generator, discriminator = small_gan()
    classes = [type(c) for c in (generator, discriminator, generator[3])]
    opt_g, opt_d = (nn.Adam(n.trainable_params(), 1e-3) for n in (generator, discriminator))
    optimizer_classes = [type(opt_g), type(opt_d)]
    doctor = Doctor(summary_dir=tmp_path, print_summary=False, mindinsight=False, html_report=False)
    with pytest.raises(RuntimeError, match="out of data"):
        with doctor.watch({"G": (generator, opt_g), "D": (discriminator, opt_d)}) as run:
            assert isinstance(run.should_stop, bool)
            raise RuntimeError("out of data")
    assert [type(c) for c in (generator, discriminator, generator[3])] == classes
    assert [type(opt_g), type(opt_d)] == optimizer_classes
    assert {f.location["model"] for f in doctor.report.by_code("MSD003")} == {"G", "D"}
    assert (tmp_path / "doctor_report.json").exists() and (tmp_path / "G" / "doctor_report.json").exists()


def test_the_single_model_watch_is_unchanged():
    from mindspore_doctor.training.loop import TrainingRun

    net = nn.Dense(4, 2)
    run = Doctor(print_summary=False).watch(net, nn.SGD(net.trainable_params(), 0.1))
    assert isinstance(run, TrainingRun)


def test_losses_moving_against_each_other_are_told_from_losses_falling_side_by_side():
    from mindspore_doctor.training.multi import OPPOSED_CORRELATION, opposed

    r = np.random.default_rng(0)
    swing = r.standard_normal(100)  # each batch: one player's gain is the other's loss
    game_r = opposed(list(1.3 - 0.1 * swing), list(0.7 + 0.1 * swing + 0.02 * r.standard_normal(100)), 40)
    trend = np.linspace(2.0, 0.5, 100)  # two models learning side by side, each with its own batch noise
    side_r = opposed(list(trend + 0.05 * r.standard_normal(100)), list(trend + 0.05 * r.standard_normal(100)), 40)
    assert game_r <= OPPOSED_CORRELATION < side_r
    assert opposed([1.0] * 10, [2.0] * 10, 40) is None


def test_a_gan_under_other_names_is_told_adversarial_from_its_losses():
    from benchmarks.realworld import gan

    doctor, _ = train(gan.digits(), epochs=3, names=("decoder", "critic_net"), probe_every=20)
    assert doctor.report.meta["adversarial_detected"]["loss_change_correlation"] <= -0.3
    assert all(h.adversarial for h in doctor.histories.values())
    assert not {f.code for f in doctor.report.at_least("warning")} & LOSS_TREND
