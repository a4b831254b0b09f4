"""MSD217-MSD218: what goes wrong in adversarial training (a GAN), judged on plain numbers.

A GAN's two losses are not minimised: each player's loss rises whenever the other improves, so the loss-trend
rules (MSD202-205) keep quiet on them (``TrainingHistory.adversarial``). What does go wrong, and is judged here:

- MSD217: the discriminator wins outright. Its loss collapses to ~0 while the generator's grows: the discriminator
  rejects everything the generator makes, and the generator learns nothing useful from it.
- MSD218: the discriminator is shown real samples and generated samples in different ranges (real images in
  [0, 1], a ``tanh`` generator in [-1, 1]): it can tell them apart by range alone, and the generator must spend its
  training undoing a preprocessing mismatch, or cannot at all when its output layer cannot reach the data's range.

Non-finite values and dead or saturated layers keep their codes (MSD201, MSD206, MSD212, MSD213): the per-model
sessions judge them on each network.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import statistics

from mindspore_doctor.findings import Finding
from mindspore_doctor.signals import AdversarialSignals, ValueStats
from mindspore_doctor.rule import Option, Rule, WARNING
from mindspore_doctor.rules.training import LOSS_WINDOW, PERSISTENT_PROBES

if TYPE_CHECKING:
    from mindspore_doctor.config import DoctorConfig

OUTPUT_RANGES = {"tanh": (-1.0, 1.0), "sigmoid": (0.0, 1.0)}
"""The range of a generator's output layer, by activation kind: the only values it can produce."""
RANGE_TOLERANCE = 0.05
"""A range is widened by this fraction of its width before values count as outside it (sampling and rounding)."""
MIN_COVERAGE = 0.6
"""MSD218: real samples that use less than this fraction of a bounded output layer's range leave the rest of it to
values no real sample has: the discriminator's shortcut."""


def _median(values: list[float]) -> float:
    return statistics.median(values)


GAN_COLLAPSE_FRACTION = Option(
    "gan_collapse_fraction", 0.05,
    "MSD217: the discriminator's loss (median of its last ``loss_window`` steps) below this fraction of its first "
    "window's median counts as collapsed (real + fake binary cross-entropy from ~1.39 to below ~0.07).",
)
GAN_GENERATOR_RISE = Option(
    "gan_generator_rise", 2.0,
    "MSD217: ... while the generator's loss ends at least this many times its first window's median.",
)
DISCRIMINATOR_OVERPOWERS_GENERATOR = Rule(
    "MSD217", "discriminator-overpowers-generator", WARNING,
    "a GAN's discriminator loss collapses to ~0 while the generator's grows: the generator gets no useful signal",
    options=(LOSS_WINDOW, GAN_COLLAPSE_FRACTION, GAN_GENERATOR_RISE),
)


@DISCRIMINATOR_OVERPOWERS_GENERATOR.judge
def discriminator_overpowers(signals: AdversarialSignals, config: DoctorConfig) -> list[Finding]:
    """MSD217: the discriminator's loss (median of its last ``loss_window`` steps) fell below
    ``gan_collapse_fraction`` of its first window while the generator's rose ``gan_generator_rise`` times.

    Medians over whole windows, so one lucky batch is not a collapse; judged on the latest window, so a
    discriminator that won for a while and lost its lead again is not reported. A loss that goes negative is not a
    probability loss (a Wasserstein critic's): its size says nothing about winning, and it is not judged.
    """
    w = config.loss_window
    d = [v for _, v in signals.discriminator_losses]
    g = [v for _, v in signals.generator_losses]
    if len(d) < 2 * w or len(g) < 2 * w or min(d) < 0 or min(g) < 0:
        return []
    d_start, d_now = _median(d[:w]), _median(d[-w:])
    g_start, g_now = _median(g[:w]), _median(g[-w:])
    if not (d_start > 0 and g_start > 0 and d_now < config.gan_collapse_fraction * d_start
            and g_now >= config.gan_generator_rise * g_start):
        return []
    step = signals.discriminator_losses[-1][0]
    evidence = {"discriminator_loss_start": d_start, "discriminator_loss_now": d_now, "generator_loss_start": g_start,
                "generator_loss_now": g_now, "window": w}
    signal = ""
    norms = signals.generator_grad_norms
    if len(norms) >= 2 and norms[0][1] > 0:
        evidence["generator_grad_norm_start"], evidence["generator_grad_norm_now"] = norms[0][1], norms[-1][1]
        signal = (f" The generator's gradient norm went from {norms[0][1]:.3g} to {norms[-1][1]:.3g} (step "
                  f"{norms[-1][0]}).")
    return [DISCRIMINATOR_OVERPOWERS_GENERATOR.finding(
        f"The discriminator `{signals.discriminator}` wins the game: its loss fell from {d_start:.3g} to {d_now:.3g} "
        f"(median of its first and last {w} steps) while the loss of the generator `{signals.generator}` rose from "
        f"{g_start:.3g} to {g_now:.3g}. It rejects whatever the generator makes, and the generator gets no useful "
        f"signal from it.{signal}",
        step=step,
        location={"model": signals.discriminator},
        evidence=evidence,
        suggestion="Balance the two players: lower the discriminator's learning rate or train it less often than the "
        "generator, smooth its real labels (0.9), add noise to its inputs, or shrink it; and check that it does not see "
        "real and generated samples in different ranges (MSD218).",
    )]


def _range(stats: ValueStats) -> tuple[float, float]:
    """The values' range, widened by ``RANGE_TOLERANCE`` of its width."""
    margin = RANGE_TOLERANCE * (stats.high - stats.low)
    return stats.low - margin, stats.high + margin


def _show(low: float, high: float) -> str:
    return f"[{low:.3g}, {high:.3g}]"


GAN_RANGE_OUTSIDE = Option(
    "gan_range_outside", 0.25,
    "MSD218: fraction of the generator's output outside the real samples' range (widened by 5 % of it) that counts, "
    "on each of the last ``persistent_probes`` probes; 0.1 where the generator's output layer cannot span the data.",
)
REAL_FAKE_RANGE_MISMATCH = Rule(
    "MSD218", "real-fake-range-mismatch", WARNING,
    "a GAN's real samples and the generator's output span different ranges: the discriminator can tell them apart "
    "by range alone",
    options=(PERSISTENT_PROBES, GAN_RANGE_OUTSIDE),
)


@REAL_FAKE_RANGE_MISMATCH.judge
def real_fake_range_mismatch(signals: AdversarialSignals, config: DoctorConfig) -> list[Finding]:
    """MSD218: the generator's output lies outside the real samples' range on the last ``persistent_probes`` probes
    (``gan_range_outside`` of its values), or its output layer cannot span the real samples' range.

    Two readings of one mismatch. Measured: whatever the generator's last layer, a quarter of what it makes lies
    where no real sample does, probe after probe: range alone tells them apart. Structural: the generator ends in a
    Tanh/Sigmoid, whose range is fixed; real samples outside it can never be matched, and real samples that use
    little of it (images in [0, 1] for a Tanh) leave the discriminator the shortcut as soon as the generator strays
    into the unused part (a tenth of its values is then evidence enough). A healthy generator starts near the middle
    of its range, inside the data's, and learns the data's range: neither reading holds.
    """
    real, generated = signals.real, signals.generated
    if real is None or not generated or real.high <= real.low:
        return []
    low, high = _range(real)
    outside = [(g, g.fraction_outside(low, high)) for g in generated]
    structural = _structural_mismatch(signals, real)
    recent = outside[-config.persistent_probes:]
    measured = len(recent) >= config.persistent_probes and all(f >= config.gan_range_outside for _, f in recent)
    stray = [(g, f) for g, f in outside if f >= min(0.1, config.gan_range_outside)]
    if structural and (stray or structural[1]):
        first = stray[0][0] if stray else generated[0]
    elif measured:
        first = next(g for g, f in outside if f >= config.gan_range_outside)
    else:
        return []
    last, last_fraction = outside[-1]
    worst, worst_fraction = max(outside, key=lambda item: item[1])
    shown = worst if worst_fraction > last_fraction else last
    fraction = max(worst_fraction, last_fraction)
    reason = structural[0] if structural else ""
    evidence = {"real_range": [real.low, real.high], "real_mean": real.mean,
                "generated_range": [shown.low, shown.high], "generated_mean": shown.mean, "generated_outside_fraction": fraction, "at_step": shown.step,
                "last_outside_fraction": last_fraction, "output_activation": signals.output_activation}
    return [REAL_FAKE_RANGE_MISMATCH.finding(
        f"The discriminator `{signals.discriminator}` sees real samples in {_show(real.low, real.high)} (mean "
        f"{real.mean:.3g}) and samples of the generator `{signals.generator}` in {_show(shown.low, shown.high)} (mean "
        f"{shown.mean:.3g}): {fraction:.0%} of the generated values lie outside the real range at step {shown.step}, "
        f"so range alone tells real from generated.{reason}",
        step=first.step,
        location={"model": signals.discriminator},
        evidence=evidence,
        suggestion=_range_fix(signals.output_activation, real),
    )]


def _structural_mismatch(signals: AdversarialSignals, real: ValueStats) -> tuple[str, bool] | None:
    """(why, certain) when the generator's bounded output layer cannot span the real samples' range, or the real
    samples use little of it; ``certain``: real values lie outside what the generator can ever produce."""
    kind = signals.output_activation
    if kind not in OUTPUT_RANGES:
        return None
    b_low, b_high = OUTPUT_RANGES[kind]
    margin = RANGE_TOLERANCE * (b_high - b_low)
    unreachable = real.fraction_outside(b_low - margin, b_high + margin)
    name = {"tanh": "Tanh", "sigmoid": "Sigmoid"}[kind]
    if unreachable >= 0.05:
        return (f" The generator's output layer is a {name}, which only reaches {_show(b_low, b_high)}: "
                f"{unreachable:.0%} of the real values lie beyond anything it can produce.", True)
    coverage = (min(real.high, b_high) - max(real.low, b_low)) / (b_high - b_low)
    if coverage < MIN_COVERAGE:
        return (f" The generator's output layer is a {name} ({_show(b_low, b_high)}) and the real values use "
                f"{coverage:.0%} of that range.", False)
    return None


def _range_fix(kind: str | None, real: ValueStats) -> str:
    if kind == "tanh":
        return ("Scale the real samples to the Tanh's [-1, 1], as DCGAN does: x / 127.5 - 1 for 0-255 pixels, "
                "2 * x - 1 for [0, 1] ones (Normalize(mean=0.5, std=0.5) after Rescale(1/255)); or end the generator "
                f"with the layer that matches the data's {_show(real.low, real.high)} (a Sigmoid for [0, 1]).")
    if kind == "sigmoid":
        return ("Scale the real samples to the Sigmoid's [0, 1] (x / 255 for pixels), or end the generator with a "
                f"Tanh when the data is in [-1, 1] ({_show(real.low, real.high)} here).")
    return ("Preprocess the real samples and the generator's output the same way: scale the data to the range of the "
            "generator's output layer (DCGAN: images in [-1, 1] and a Tanh output), in the dataset or in the loop "
            "before the discriminator.")


RULES = (DISCRIMINATOR_OVERPOWERS_GENERATOR, REAL_FAKE_RANGE_MISMATCH)

ADVERSARIAL_RULES = tuple(((rule.code,), rule.judged_by) for rule in RULES)
"""(codes, rule) in the order they run."""
