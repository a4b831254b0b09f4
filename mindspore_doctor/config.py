"""Every option and threshold of the doctor, in one dataclass with documented defaults.

Defaults come from shared/CATALOG.md (and the tools it cites). ``lint(**options)``,
``Doctor(**options)`` and ``[tool.msdoctor]`` in pyproject.toml all fill this one
dataclass, so an option means the same thing everywhere.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class DoctorConfig:
    # --- selection and behaviour -------------------------------------------------
    select: tuple[str, ...] = ()
    """Only report these codes/prefixes/slugs (empty: all)."""
    ignore: tuple[str, ...] = ()
    """Never report these codes/prefixes/slugs."""
    allow_shared: tuple[str, ...] = ()
    """Parameter names (or cell-path prefixes) whose sharing is intentional (MSD101)."""

    # --- static (MSD1xx) -----------------------------------------------------------
    max_drop_rate: float = 0.5
    """MSD104: a Dropout dropping more than this fraction of its inputs is suspicious."""
    init_std_factor: float = 10.0
    """MSD109: init std off from the He/Glorot recommendation by more than this factor."""
    sgd_lr_range: tuple[float, float] = (1e-6, 1.0)
    """MSD111: sane learning-rate range for SGD/Momentum-family optimizers."""
    adam_lr_range: tuple[float, float] = (1e-7, 1e-2)
    """MSD111: sane learning-rate range for Adam-family optimizers."""
    sgd_weight_decay_max: float = 1e-2
    """MSD116: upper end of the usual weight decay for SGD/Momentum-family optimizers (usual range 1e-5 to 1e-2)."""
    adam_weight_decay_max: float = 0.1
    """MSD116: upper end of the usual weight decay for Adam-family optimizers, AdamWeightDecay/AdamW included
    (usual range 0 to 0.1)."""
    weight_decay_factor: float = 10.0
    """MSD116: a parameter group decayed by more than this multiple of the usual upper end is reported;
    normalization/bias parameters as soon as their decay exceeds the upper end itself."""
    max_fixed_loss_scale: float = 65504.0
    """MSD112: a fixed loss scale above this (float16's largest value) overflows a float16 network."""

    # --- training signals (MSD2xx) -------------------------------------------------
    stop_on: str | None = None
    """Ask training to stop at a finding of this severity or worse ("error"); None: never stop."""
    probe_every: int = 50
    """Run the probed step (gradient/update/activation statistics) every N steps.
    A probed step runs the same compiled graph with its gradient sums switched on, then reads the statistics."""
    loss_read: str = "auto"
    """How the host gets each step's loss: "step" reads it every step (step-exact; on CPU measured as cheap as
    the alternative, docs/custom-loops.md); "deferred" records it on the device, with the first non-finite
    step, and reads it on probe steps and at epoch end (no per-step wait on GPU/Ascend); "auto": "step" on
    CPU, "deferred" elsewhere."""
    loss_window: int = 20
    """MSD202/203/204/217: number of loss checks in a trend window."""
    diverge_factor: float = 2.0
    """MSD202: loss at or above this multiple of its running minimum for a window."""
    diverge_smoothing: int = 10
    """MSD202: the loss is judged on its rolling median over this many steps (small or imbalanced batches make
    single-step losses noisy; the catalog's raw running minimum raised false alarms on healthy runs)."""
    diverge_min_rise: float = 0.1
    """MSD202: the loss must also rise by at least this fraction of the initial loss (noise near zero is not
    divergence)."""
    diverge_noise: float = 2.0
    """MSD202: ... and by at least this many robust standard deviations of the per-step loss around its rolling
    median (a dropout MLP on batches of 32 swings between 0.07 and 0.46 while it trains well)."""
    diverge_trend: float = 0.5
    """MSD202 rising trend: least-squares rise of the loss over a window, as a fraction of its fitted start."""
    diverge_trend_up: float = 0.6
    """MSD202 rising trend: fraction of the window's steps on which the loss must go up."""
    min_improvement: float = 0.05
    """MSD203: relative loss improvement, against the first window, expected of at least one recent window."""
    plateau_windows: int = 3
    """MSD203: the loss must miss ``min_improvement`` on this many consecutive windows (of ``loss_window`` steps)
    after the first: a healthy LeNet can sit on its initial plateau for a window or two before it falls."""
    low_loss: float = 1e-4
    """MSD205: a loss below this within the first ``early_steps`` steps is suspicious."""
    early_steps: int = 3
    """MSD205/215: what counts as "the first steps"."""
    converged_loss_fraction: float = 0.05
    """MSD207/MSD210: once the loss is below this fraction of its initial value, small gradients and updates
    mean the model has converged, and are not reported."""
    vanishing_grad_mean: float = 1e-7
    """MSD207: a layer's gradient RMS (sqrt of mean g², which is >= mean |g|) below this is vanishing."""
    vanishing_grad_ratio: float = 1e-3
    """MSD207: first-layer / last-layer gradient-norm ratio below this is vanishing."""
    no_gradient_fraction: float = 1e-6
    """MSD207: a gradient RMS below this fraction of the median layer's on every probe is no gradient at all (no loss
    term reaches the parameter: a dropped output, a detection level no target is assigned to), and the message says
    so rather than "vanish" (mindyolo's unassigned YOLOv8 box branches: 5e-15 and exactly 0 against a median 1e-3)."""
    vanishing_update_fraction: float = 0.05
    """MSD207: ... only while the layer's update ratio is also below this fraction of its peers' (the upper
    quartile of the network's; the last layer's for the first/last ratio). Under AdamW a layer with RMS |g| 3e-8
    (ConvNeXt's layer scale 1e-6) moves as fast as the rest (0.7-1.1x) and learns; a deep sigmoid stack's first
    layers under Momentum move 1e-4x or less."""
    exploding_grad_growth: float = 2.0
    """MSD208: global gradient norm growing more than this per window."""
    exploding_grad_ratio: float = 70.0
    """MSD208: last / first gradient-norm ratio above this is exploding."""
    frozen_update_atol: float = 1e-8
    """MSD209: |dw| <= atol + rtol*|w| counts as not updated."""
    frozen_update_rtol: float = 1e-7
    """MSD209: about one float32 ulp of the weight (the catalog's 1e-5 also caught a tiny but non-zero
    learning rate, which is MSD210's case)."""
    redundant_grad_ratio: float = 1e-5
    """MSD115/MSD209: a bias/beta whose gradient RMS stays below this fraction of its cell's weight/gamma gradient
    (which learns) is cancelled by a following normalization: redundant (info), not frozen. Measured: 3e-7 on the
    projection BatchNorm betas of MobileNetV3; a learning beta is within 10x of its gamma."""
    update_ratio_min: float = 1e-4
    """MSD210: mean|dw| / mean|w| below this is too small (judged as at the schedule's peak learning rate)."""
    update_ratio_peer_fraction: float = 1e-3
    """MSD210: when the network's median update ratio is healthy, a layer below ``update_ratio_min`` is reported only
    if it is also below this fraction of that median (a parameter group whose rate is off). ShuffleNetV2's
    depthwise convs, large-init and followed by BatchNorm, run 1e-2 to 3e-2 of the median and learn."""
    update_ratio_max: float = 1e-1
    """MSD211: mean|dw| / mean|w| above this (median of the recent probes) is too large."""
    update_ratio_burst: float = 0.5
    """MSD211: a single probed step (the first included) moving the network's weights (median over them) by more
    than this fraction of themselves."""
    dead_relu_fraction: float = 0.999
    """MSD212: fraction of ReLU outputs <= 0 above which the layer is dead."""
    dead_unit_fraction: float = 0.5
    """MSD212: fraction of a ReLU layer's units that are <= 0 on the whole batch above which the layer is dying."""
    dead_unit_z: float = 1.645
    """MSD212: the dead-unit fraction must exceed ``dead_unit_fraction`` by this many binomial standard errors over
    the units measured (its one-sided Wilson lower bound; 1.645: 95 % confidence). The first squeeze-excite
    reduction of a healthy MobileNetV3-small has 8 units, 4 of them off on the whole batch from initialisation and
    6 at twice the recipe's learning rate: 7 of 8 must be dead to count, 12 of 16, 39 of 64, 142 of 256 sampled
    units. 0: the raw fraction."""
    saturated_fraction: float = 0.999
    """MSD213: fraction of Sigmoid/Tanh outputs in the flat tails."""
    overflow_rate: float = 0.1
    """MSD214: fraction of loss-scale overflow steps that is too many."""
    initial_loss_factor: float = 3.0
    """MSD215: first loss off ln(num_classes) by more than this factor."""
    activation_explode: float = 10.0
    """MSD216: mean |activation| at or above this and growing through the network."""
    oscillation_alternation: float = 0.8
    """MSD204: fraction of consecutive loss changes that flip sign within a window."""
    oscillation_amplitude: float = 0.25
    """MSD204: median |loss change| in the window, as a fraction of the first loss, that counts as large."""
    persistent_probes: int = 2
    """MSD115/207/209/212/213/218: a probe signal must hold on this many consecutive probed steps (MSD210/211 take
    the median of this many probes after step 1, at least 3)."""
    gan_collapse_fraction: float = 0.05
    """MSD217: the discriminator's loss (median of its last ``loss_window`` steps) below this fraction of its first
    window's median counts as collapsed (real + fake binary cross-entropy from ~1.39 to below ~0.07)."""
    gan_generator_rise: float = 2.0
    """MSD217: ... while the generator's loss ends at least this many times its first window's median."""
    gan_range_outside: float = 0.25
    """MSD218: fraction of the generator's output outside the real samples' range (widened by 5 % of it) that counts,
    on each of the last ``persistent_probes`` probes; 0.1 where the generator's output layer cannot span the data."""

    # --- data (MSD3xx) ---------------------------------------------------------------
    data_max_samples: int = 2048
    """Bound on samples read from a dataset by the data checks."""
    data_max_seconds: float = 2.0
    """Bound on seconds spent by the data checks."""
    imbalance_ratio: float = 10.0
    """MSD302: largest / smallest class count above this is imbalanced."""
    eval_dataset: Any = None
    """Evaluation dataset for the train/eval checks MSD308/MSD309 (``Doctor(eval_dataset=...)``)."""
    input_columns: tuple[str, ...] = ()
    """Dataset columns fed to the network; empty: all but the label column."""
    label_column: str | None = None
    """Dataset column holding the label; None: a column named label/target, else the last of several."""
    outlier_z: float = 10.0
    """MSD303: robust z-score |x - median| / (1.4826 MAD) above which a sample is an outlier."""
    outlier_gap: float = 3.0
    """MSD303: an outlier must also lie beyond an empty stretch of at least this many robust scales (1.4826 MAD)
    between it and the median: values of a discrete or sparse feature that run on without a break up to its
    maximum (a pixel at 16 of 0..16) are its range, not outliers."""
    normalized_max: float = 5.0
    """MSD304: a feature/channel whose |mean| or std exceeds this is not normalised."""
    scale_ratio_max: float = 100.0
    """MSD304: largest / smallest feature std above this: scales differ by orders of magnitude."""
    sparse_mode_fraction: float = 0.5
    """MSD304: a feature that takes one value in at least this fraction of the samples (a sparse count, a blank
    pixel) is compared by the RMS distance of its other values from that value, not by its std, which only says
    how rarely it varies."""
    shuffle_runs_ratio: float = 0.5
    """MSD305: fewer label runs than this fraction of those expected in random order: not shuffled."""
    shuffle_correlation: float = 0.5
    """MSD305: |rank correlation| between a regression target and its position above this: sorted."""
    params_per_sample_max: float = 1000.0
    """MSD307: trainable parameters per training sample above this: too few samples. A weight-shared parameter
    (convolution, recurrent cell, embedding) counts 1 / the input's positions per sample (H x W, steps): it is
    fitted at each, so RegNet's 2.3M parameters on 1024 32x32 images count 24 per sample, not 2263."""
    min_samples_per_class: int = 100
    """MSD307: a class with fewer (estimated) training samples than this may have too few (see
    ``params_per_class_sample_max``)."""
    params_per_class_sample_max: float = 100.0
    """MSD307: a class below ``min_samples_per_class`` is too small only for a network with more than this many
    trainable parameters per class (params / classes) per sample of that class: wine's 36-sample class under a
    547-parameter MLP (5) is normal, 40 samples per class under a 540k-parameter MLP (3375) are not."""
    mismatch_shift: float = 1.0
    """MSD308: eval mean off the train mean by more than this many train stds: mismatch."""
    mismatch_std_ratio: float = 3.0
    """MSD308: eval/train std ratio beyond this factor (either way): mismatch."""
    mismatch_noise_sigmas: float = 3.0
    """MSD308: a mean shift or std ratio must also exceed its threshold by this many standard errors of its own
    estimate (a sparse feature's std, measured on a few hundred samples, is noisy)."""
    leakage_min_matches: int = 1
    """MSD309: sampled eval samples byte-identical to sampled train samples needed to report leakage."""
    leakage_noise_sigmas: float = 3.0
    """MSD309: eval samples found in the training sample must exceed what the training set's own duplicate rate
    predicts by this many standard deviations (short token sequences repeat naturally)."""
    label_copy_tolerance: float = 1e-4
    """MSD205 (data check): an input feature that is an affine function of the regression target up to this
    relative RMS residual, sqrt(1 - r^2), is the target itself (float32 and standardised copies: ~1e-7; the last
    observed value of a smooth series before the one to forecast: >= 1e-2)."""

    # --- evaluation and sanity (MSD4xx) ------------------------------------------------
    eval_every: int = 1
    """Evaluate on ``eval_dataset`` every N epochs (MSD401/404/405); 0: never."""
    eval_max_batches: int = 50
    """Bound on the batches read per evaluation (eval set, and the train sample for MSD402)."""
    overfit_patience: int = 2
    """MSD401: consecutive evaluations with rising eval loss (while train loss falls) that mean overfitting, and
    evaluations without a new best eval loss that mean it stopped improving (the gap test)."""
    overfit_min_rise: float = 0.1
    """MSD401: rising eval loss must end at least this fraction above its best (a healthy run's eval loss wanders
    by a few percent once it has converged)."""
    overfit_gap_ratio: float = 2.0
    """MSD401: eval loss at or above this multiple of train loss, once eval loss stopped improving (no new best for
    ``overfit_patience`` evaluations)."""
    overfit_noise_sigmas: float = 3.0
    """MSD401: a rise of the eval loss above its best, and its gap above the train loss, must exceed this many
    standard errors of the losses (per-sample loss std / sqrt(samples)): on a 114-sample eval split one
    evaluation's mean loss moves by ~1 standard error, and the best of many evaluations sits 1-2 below the truth."""
    underfit_margin: float = 0.2
    """MSD402: train metric within this fraction of the headroom above the trivial baseline is underfitting."""
    baseline_margin: float = 0.05
    """MSD404: metric must beat the trivial baseline by this fraction of the headroom (accuracy) / of the baseline error."""
    mode_switch_max_change: float = 2.0
    """MSD405: L2 change of the outputs between train and eval mode on one batch, over the smaller output norm, above this."""
    overfit_batch_size: int = 8
    """MSD403: samples in the one batch the sanity check must overfit."""
    overfit_steps: int = 150
    """MSD403: step budget to drive the loss on that batch near zero."""
    overfit_loss_ratio: float = 0.05
    """MSD403: the batch is fitted when its loss falls to this fraction of its initial loss (or below 1e-3)."""
    lr_range: tuple[float, float] = (1e-6, 1.0)
    """LR range test: learning rates swept exponentially from the first to the second value."""
    lr_range_steps: int = 40
    """LR range test: steps of the sweep (stops early once the loss explodes)."""
    sanity_batches: int = 8
    """sanity(): batches read from the dataset (the last quarter is held out for the baseline check)."""
    sanity_train_epochs: int = 5
    """sanity(): epochs over the sampled batches for the baseline check (MSD404)."""

    # --- export --------------------------------------------------------------------
    summary_dir: str | None = None
    """Where doctor_report.json (and summaries, HTML) are written; None: nowhere."""
    mindinsight: bool = True
    """Also write the Doctor's scalars, histograms and lineage into summary_dir for MindInsight."""
    mindinsight_max_layers: int = 24
    """Parameters (and half as many activation cells) with their own MindInsight series; MindInsight keeps 300 tags per run."""
    histogram_layers: int = 4
    """Parameters whose weight histograms are written at each epoch end (those named in findings first)."""
    summary_flush_seconds: float = 10.0
    """Buffered summary records are appended to disk at least this often (and at each epoch end)."""
    hparams: Any = None
    """Extra hyperparameters of the run (a dict: name -> str/number/bool), shown with the run's configuration: the
    report's ``run`` section, TensorBoard's HParams, MindInsight's lineage columns (``tune`` passes each trial's)."""
    print_summary: bool = True
    """Print the findings at the end of training (``tune`` keeps them in each trial's attributes instead)."""
    html_report: bool = True
    """Write doctor_report.html next to doctor_report.json at the end of training."""
    tensorboard: bool = False
    """Also write TensorBoard event files into summary_dir: scalars, histograms, the findings table, HParams."""

    # --- distributed (MSD5xx) -----------------------------------------------------------
    rank_check_every: int = 50
    """MSD502: compare parameter fingerprints across ranks every N steps (and at train end)."""
    rank_rtol: float = 1e-5
    """MSD501/502: fingerprints within rank_atol + rank_rtol * |value| count as equal across ranks."""
    rank_atol: float = 1e-7
    """MSD501/502: absolute part of the cross-rank tolerance."""
    rank_batch_steps: int = 2
    """MSD503: the first N batches of each rank are hashed per sample and compared across ranks."""
    rank_duplicate_fraction: float = 0.5
    """MSD503: two ranks sharing at least this fraction of those samples read the same data."""
    collective_timeout_s: float = 120.0
    """Longest wait for one Doctor collective; past it the rank stops taking part in the Doctor's collectives."""

    @classmethod
    def from_options(cls, options: dict[str, Any] | None = None, base: "DoctorConfig | None" = None) -> "DoctorConfig":
        """Build from keyword options; unknown names raise one clear TypeError. ``config=DoctorConfig(...)``
        among them (or ``base``) is the starting point that the other options override."""
        options = dict(options or {})
        given = options.pop("config", None)
        if given is not None and not isinstance(given, cls):
            raise TypeError(f"config must be a DoctorConfig, not {type(given).__name__}")
        base = given or base
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"unknown mindspore_doctor option(s): {', '.join(unknown)}")
        for key in ("select", "ignore", "allow_shared"):
            if isinstance(options.get(key), str):
                options[key] = tuple(s.strip() for s in options[key].split(",") if s.strip())
            elif key in options:
                options[key] = tuple(options[key])
        return dataclasses.replace(base or cls(), **options)

    def values(self) -> dict[str, Any]:
        """The plain fields (thresholds and options, not datasets): what a run stores in its report, so that
        ``msdoctor report`` draws the thresholds the run used."""
        plain = (bool, int, float, str, tuple, type(None))
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {name: value for name, value in values.items() if isinstance(value, plain)}

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> "DoctorConfig":
        """Back from :meth:`values` (lists for tuples, as JSON has them); names this version lacks are dropped."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls.from_options({k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if k in names})

