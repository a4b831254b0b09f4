"""The diagnosis knowledge base: symptoms (finding codes + evidence predicates) → causes → remedies.

Pure data. Each cause lists the symptoms that speak for it with a weight
(negative: speaks against it) and an optional predicate on the findings of
that code, named in ``diagnosis.engine.PREDICATES`` and parameterised here, e.g.
``Symptom("MSD210", 3, "layer_fraction_at_least", 0.8)`` = "MSD210 on at least
80 % of the weight layers". A cause needs at least one matched ``key`` symptom
to be proposed at all. Remedies are in priority order (cheapest, most likely
first). Categories follow the accuracy-tuning checklist (seed 000) and the
troubleshooting workflow (seed 003): hyperparameters, data, algorithm/API,
structure, initialisation, mixed precision, distributed.

A cause may name the error-budget term it explains (``budget_term``, one of ``analysis.budget.TERMS``): when
the run's budget (``report.meta["error_budget"]``) finds that term dominant, the cause, once a key symptom
proposes it, gains weight and the guide's remedies for the term, in the guide's order.

To teach the doctor a new cause, add an entry; no code changes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mindspore_doctor._io import LABEL_ISSUES_FILE
from mindspore_doctor.analysis.budget import BIAS, REMEDIES, SHIFT, VARIANCE


@dataclass(frozen=True)
class Symptom:
    code: str
    weight: float
    predicate: str | None = None
    """Name of a predicate over this code's findings (None: the code is present)."""
    argument: Any = None
    key: bool = False
    """A key symptom: the cause is proposed only when at least one key symptom matches."""


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    category: str
    explanation: str
    symptoms: tuple[Symptom, ...]
    remedies: tuple[str, ...] = field(default_factory=tuple)
    budget_term: str | None = None
    """The error-budget term this cause explains ("avoidable bias", "variance", ...); None: none."""


def S(code: str, weight: float, predicate: str | None = None, argument: Any = None, key: bool = False) -> Symptom:
    """Shorthand keeping the table below one symptom per line."""
    return Symptom(code, weight, predicate, argument, key)


HYPERPARAMETERS, DATA, ALGORITHM, STRUCTURE, INITIALISATION, MIXED_PRECISION, DISTRIBUTED = (
    "hyperparameters", "data", "algorithm/API", "structure", "initialisation", "mixed precision", "distributed")

CAUSES: tuple[Cause, ...] = (
    # --- hyperparameters -------------------------------------------------------------------
    Cause(
        "learning-rate-too-low", "Learning rate too low", HYPERPARAMETERS,
        "Every layer moves by a tiny fraction of its weights per step, so the loss barely changes.",
        (
            S("MSD210", 3, "layer_fraction_at_least", 0.8, key=True),
            S("MSD111", 3, "evidence_below_range", "lr", key=True),
            S("MSD403", 4, "evidence_ratio_at_least", ("suggested_lr", "lr", 10.0), key=True),
            S("MSD210", 1),
            S("MSD203", 1.5),
            S("MSD402", 1),
            S("MSD211", -3),
            S("MSD202", -2),
            S("MSD209", -1, "cells_at_most", 1),
        ),
        ("Raise the learning rate about 10x (run `sanity()`'s learning-rate range test for a value).",
         "Check the schedule does not decay to zero and weight decay is not overwhelming the updates.",
         "Train longer once the updates are about 1e-3 of the weights per step."),
    ),
    Cause(
        "learning-rate-too-high", "Learning rate too high", HYPERPARAMETERS,
        "Steps overshoot: the loss diverges, oscillates or turns NaN after a few steps, updates are large.",
        (
            S("MSD211", 3, key=True),
            S("MSD202", 2.5, key=True),
            S("MSD204", 2.5, key=True),
            S("MSD111", 3, "evidence_above_range", "lr", key=True),
            S("MSD208", 2, key=True),
            S("MSD201", 1.5, "step_after", 3, key=True),
            S("MSD212", 0.5),
            S("MSD206", 0.5),
            S("MSD301", -4),
            S("MSD210", -2, "layer_fraction_at_least", 0.8),
            S("MSD304", -1.5),  # divergence at a sane lr on unnormalised inputs: the input scale is the cause
        ),
        ("Lower the learning rate 10x, or use the one `sanity()`'s range test suggests.",
         "Add a warm-up and clip gradients (ops.clip_by_global_norm).",
         "With Momentum, lower the momentum; or increase the batch size."),
    ),
    Cause(
        "momentum-too-high", "Momentum too high", HYPERPARAMETERS,
        "The optimizer's momentum is 1 or more (the velocity never decays) or close to it: each step moves "
        "lr/(1-m) on average, and the loss oscillates or diverges whatever the learning rate.",
        (
            S("MSD117", 4, key=True),
            S("MSD204", 1.5),
            S("MSD202", 1.5),
            S("MSD208", 1),
            S("MSD201", 1),
            S("MSD211", 1),
        ),
        ("Set the momentum to 0.9 (MindSpore's usual value), or below 0.99: a lower learning rate does not "
         "help at momentum 1.",
         "With a momentum above 0.9 on purpose, divide the learning rate by (1-0.9)/(1-m) to keep the step size."),
    ),
    Cause(
        "regularisation-too-strong", "Regularisation too strong", HYPERPARAMETERS,
        "Dropout that drops most activations keeps the model from fitting even the training data.",
        (
            S("MSD104", 3, key=True),
            S("MSD405", 2),
            S("MSD402", 1.5),
            S("MSD403", 1),
            S("MSD203", 1),
        ),
        ("Lower the drop rate (nn.Dropout(p=...) is the probability to DROP; keep_prob is the probability to keep).",
         "Reduce weight decay; add regularisation back only once the model overfits."),
    ),
    Cause(
        "training-too-short", "Training too short / model underfits", HYPERPARAMETERS,
        "The loss is still far from what the model can reach and the metric is close to a trivial predictor.",
        (
            S("MSD402", 3, key=True),
            S("MSD404", 1),
            S("MSD210", 0.5),
            S("MSD403", -2),
            S("MSD203", -1.5),  # too short means the loss is still falling, not stalled
        ),
        ("Train for more epochs, or raise the learning rate (range test).",
         "Use a bigger model (more units/layers) and less regularisation.",
         "Check the features carry the information the labels need."),
        budget_term=BIAS,
    ),
    # --- data ---------------------------------------------------------------------------------
    Cause(
        "nan-in-input-data", "NaN/Inf in the input data", DATA,
        "Non-finite values in the samples make the very first forward pass non-finite.",
        (
            S("MSD301", 5, key=True),
            S("MSD201", 2, "step_at_most", 3),
            S("MSD206", 1),
            S("MSD303", 0.5),
        ),
        ("Drop or impute non-finite samples in the pipeline (e.g. a .map() with np.nan_to_num, or filter).",
         "Check the preprocessing for divisions by zero and logs of zero.",
         "Keep `Doctor(stop_on=\"error\")` on until the data is clean."),
    ),
    Cause(
        "labels-out-of-range", "Labels outside the model's output range", DATA,
        "Class ids >= the number of outputs give silent zero targets (one-hot) or errors.",
        (
            S("MSD306", 5, key=True),
            S("MSD215", 1),
            S("MSD203", 1),
            S("MSD201", 1),
        ),
        ("Make the last layer as wide as the number of classes, or remap the labels to 0..C-1.",),
    ),
    Cause(
        "inputs-not-normalised", "Inputs not normalised", DATA,
        "Features on very different or large scales saturate activations and slow or destabilise training.",
        (
            S("MSD304", 3, key=True),
            S("MSD213", 1.5),
            S("MSD216", 1.5),
            S("MSD211", 1),  # large inputs make large gradients: updates and the loss blow up at a sane lr
            S("MSD208", 1),
            S("MSD201", 1),
            S("MSD212", 1),
            S("MSD202", 0.5),
            S("MSD203", 0.5),
            S("MSD303", 0.5),
        ),
        ("Standardise the inputs (subtract the mean, divide by the std per feature/channel) in the pipeline.",
         "Add a normalisation layer at the input (BatchNorm/LayerNorm)."),
    ),
    Cause(
        "labels-do-not-match-inputs", "Labels do not match the inputs (shuffled or noisy labels)", DATA,
        "The model cannot fit even one batch and stays at the trivial baseline: there is nothing to learn.",
        (
            S("MSD403", 3, key=True),
            S("MSD402", 2, key=True),
            S("MSD404", 2, key=True),
            S("MSD203", 1),
            S("MSD403", -3, "evidence_ratio_at_least", ("suggested_lr", "lr", 10.0)),
            S("MSD210", -2, "layer_fraction_at_least", 0.8),
            S("MSD209", -2),
            S("MSD102", -3),
            S("MSD111", -2),
            S("MSD104", -2),
        ),
        ("Check inputs and labels are zipped together (same order after shuffle/zip/concat).",
         "Look at a few samples with their labels by eye.",
         "Check the label column is the one the loss receives."),
    ),
    Cause(
        "class-imbalance", "Class imbalance", DATA,
        "One class dominates: the model learns to predict it and looks no better than the majority class.",
        (
            S("MSD302", 3, key=True),
            S("MSD307", 1),
            S("MSD404", 1.5),
            S("MSD402", 1),
        ),
        ("Resample (oversample the rare classes) or weight the loss by inverse class frequency.",
         "Judge the model by per-class recall / balanced accuracy, not accuracy."),
    ),
    Cause(
        "wrong-labels", "Some labels are wrong (label noise)", DATA,
        "Confident learning over the model's per-sample probabilities says a share of the labels is wrong: the "
        "network memorises them (the eval loss rises while the train loss falls), and on the eval set they cap and "
        "distort the metric every tuning decision reads.",
        (
            S("MSD311", 4, key=True),
            S("MSD401", 1),
            S("MSD402", 0.5),
        ),
        (f"Open {LABEL_ISSUES_FILE} (most suspect first), look at the top samples and fix or drop the wrong labels.",
         "A swapped pair that recurs points at the labelling rule (or the label mapping in code) to fix.",
         "Score the whole training set out of sample with `msdoctor labels ... --folds 5`.",
         "Until the labels are fixed: early stopping, or a noise-robust loss (label smoothing)."),
    ),
    Cause(
        "data-not-shuffled", "Training data not shuffled", DATA,
        "Batches of one class in a row make the loss swing and the model forget.",
        (
            S("MSD305", 3, key=True),
            S("MSD204", 1.5),
            S("MSD202", 0.5),
        ),
        ("Shuffle the dataset (.shuffle(buffer_size >= dataset size)); a GeneratorDataset over a plain "
         "generator function is NOT shuffled by shuffle=True.",),
    ),
    Cause(
        "too-little-data", "Too little training data for the model", DATA,
        "A large model memorises a small training set: train loss falls, eval loss rises.",
        (
            S("MSD307", 3, key=True),
            S("MSD401", 2, key=True),
        ),
        ("Get more data or augment it.",
         "Use a smaller model, add regularisation (dropout, weight decay) and early stopping."),
        budget_term=VARIANCE,
    ),
    Cause(
        "overfitting", "Model overfits the training data", STRUCTURE,
        "Eval loss rises while train loss falls: the model learns the training set, not the task.",
        (
            S("MSD401", 3, key=True),
            S("MSD307", 1),
        ),
        ("Stop earlier (keep the checkpoint with the best eval loss).",
         "Add more data or augmentation.",
         "Add regularisation: weight decay, dropout, normalisation; or use a smaller model."),
        budget_term=VARIANCE,
    ),
    Cause(
        "train-eval-mismatch", "Train and eval data preprocessed differently", DATA,
        "The eval inputs do not look like the training inputs, so eval metrics are poor whatever training does.",
        (
            S("MSD308", 4, key=True),
            S("MSD313", 4, key=True),
            S("MSD401", 1),
            S("MSD404", 1),
        ),
        ("Apply exactly the same .map() transforms (normalisation, resize, tokenisation) to both pipelines.",),
    ),
    Cause(
        "eval-random-augmentation", "Random augmentation in the evaluation pipeline", DATA,
        "The eval pipeline draws random crops, flips or colour changes: every evaluation scores another distorted "
        "version of the eval set, so the metric is noisy, biased, and depends on the pipeline's seed.",
        (
            S("MSD312", 4, key=True),
            S("MSD404", 1),
        ),
        ("Remove the random ops from the eval pipeline; keep only the deterministic transforms "
         "(resize, center crop, normalise, HWC2CHW).",),
    ),
    Cause(
        "distribution-shift", "The test distribution differs from the training data", DATA,
        "The model does clearly worse on validation data drawn from the test distribution than on validation data "
        "like its training data: more of the same data, regularisation or a bigger model will not close the gap.",
        (
            S("MSD407", 4, key=True),
            S("MSD308", 0.5),
        ),
        REMEDIES[SHIFT],
        budget_term=SHIFT,
    ),
    Cause(
        "train-eval-leakage", "Eval samples leak from the training set", DATA,
        "Eval metrics are optimistic because the model has seen the eval samples.",
        (
            S("MSD309", 4, key=True),
            S("MSD205", 1),
        ),
        ("Split train and eval by sample id before any augmentation; deduplicate.",),
    ),
    Cause(
        "label-leakage", "The label leaks into the inputs", DATA,
        "A loss near zero from the first steps means the answer is in the inputs or the loss ignores predictions.",
        (
            S("MSD205", 4, key=True),
            S("MSD309", 1),
        ),
        ("Make sure the label column is not also fed as an input feature.",
         "Check the loss receives (logits, labels) and compares them."),
    ),
    Cause(
        "constant-features", "Constant / uninformative features", DATA,
        "A channel or feature with a single value carries no information (broken preprocessing or reader).",
        (
            S("MSD310", 3, key=True),
            S("MSD402", 1),
        ),
        ("Check the reader and the preprocessing of that feature; drop it if it is truly constant.",),
    ),
    # --- algorithm / API ----------------------------------------------------------------------------
    Cause(
        "loss-activation-mismatch", "Loss wired to the wrong outputs (probabilities vs logits)", ALGORITHM,
        "A Softmax/Sigmoid before a logits loss (or none before a probability loss) flattens the gradients.",
        (
            S("MSD107", 5, key=True),
            S("MSD203", 1),
            S("MSD215", 1),
            S("MSD402", 1),
        ),
        ("Feed logits to SoftmaxCrossEntropyWithLogits / CrossEntropyLoss / BCEWithLogitsLoss; remove the "
         "final Softmax/Sigmoid from the training network.",),
    ),
    Cause(
        "softmax-wrong-axis", "Softmax over the batch axis", ALGORITHM,
        "Normalising across samples instead of classes makes the outputs meaningless per sample.",
        (
            S("MSD113", 5, key=True),
            S("MSD203", 1),
            S("MSD402", 1),
        ),
        ("Use axis=-1 (the class axis) in Softmax/LogSoftmax.",),
    ),
    Cause(
        "silent-broadcast", "Loss inputs broadcast to the wrong shape", ALGORITHM,
        "Logits (N,) against labels (N,1) become an (N,N) loss: the model fits the batch mean.",
        (
            S("MSD114", 5, key=True),
            S("MSD203", 1),
            S("MSD402", 1),
            S("MSD404", 1),
        ),
        ("Squeeze or reshape the labels (or logits) to the same shape before the loss.",),
    ),
    Cause(
        "train-eval-mode-misuse", "Train/eval mode misused (BatchNorm/Dropout)", ALGORITHM,
        "BatchNorm and Dropout behave differently in train and eval mode; a wrong mode skews training or eval.",
        (
            S("MSD105", 4, key=True),
            S("MSD405", 3, key=True),
            S("MSD401", 0.5),
        ),
        ("Call net.set_train(True) before training and net.set_train(False) before evaluation "
         "(Model does this for you).",
         "Use larger batches or GroupNorm/LayerNorm when BatchNorm statistics are noisy; check the momentum."),
    ),
    Cause(
        "unsafe-division", "Division or log by zero in the network", ALGORITHM,
        "A denominator that can reach zero produces Inf/NaN that then spreads through the weights.",
        (
            S("MSD106", 3, key=True),
            S("MSD206", 1.5),
            S("MSD201", 1.5),
            S("MSD301", -3),
        ),
        ("Add an epsilon to the denominator (x / (y + 1e-8)) and clamp before log/sqrt.",),
    ),
    # --- structure -----------------------------------------------------------------------------------
    Cause(
        "layer-frozen", "A layer is frozen (not trained)", STRUCTURE,
        "Some weights never change: requires_grad=False or the optimizer does not hold them.",
        (
            S("MSD102", 4, key=True),
            S("MSD209", 3, "cells_at_most", 2, key=True),
            S("MSD203", 1),
            S("MSD209", -2, "layer_fraction_at_least", 0.8),
            S("MSD110", -2),
        ),
        ("Build the optimizer from net.trainable_params() after setting requires_grad as intended.",
         "Unfreeze the layer (param.requires_grad = True) unless freezing it is deliberate."),
    ),
    Cause(
        "disconnected-cell", "A layer is not on the path to the loss", STRUCTURE,
        "A cell defined but never used in construct gets no gradient and never changes.",
        (
            S("MSD110", 4, key=True),
            S("MSD209", 2, "cells_at_most", 2),
            S("MSD207", 1),
        ),
        ("Call the cell in construct (or remove it); check for stop_gradient or integer casts on the path.",),
    ),
    Cause(
        "optimizer-from-another-network", "Optimizer built for another network instance", STRUCTURE,
        "The optimizer updates parameters of a different instance; the trained network never changes.",
        (
            S("MSD103", 5, key=True),
            S("MSD209", 2, "layer_fraction_at_least", 0.8),
            S("MSD203", 1),
        ),
        ("Build the optimizer from the same network object you train: nn.Momentum(net.trainable_params(), ...).",),
    ),
    Cause(
        "unintended-weight-sharing", "Unintended weight sharing", STRUCTURE,
        "The same Parameter under several cells (e.g. `[cell] * n`) ties layers that should be independent.",
        (
            S("MSD101", 4, key=True),
            S("MSD402", 1),
        ),
        ("Create a new cell instance for each layer (a list comprehension, not `[cell] * n`).",),
    ),
    Cause(
        "dead-relus", "Dead ReLUs", STRUCTURE,
        "Almost all ReLU outputs are zero, so no gradient flows through those layers.",
        (
            S("MSD212", 3, key=True),
            S("MSD207", 1),
            S("MSD209", 1),
            S("MSD203", 1),
            S("MSD211", 0.5),
        ),
        ("Lower the learning rate, use He init and a small positive bias.",
         "Use LeakyReLU/GELU, normalise the inputs, add BatchNorm before the activation."),
    ),
    Cause(
        "vanishing-gradients", "Vanishing gradients (saturating activations / depth)", STRUCTURE,
        "Gradients shrink layer by layer (Sigmoid/Tanh in their tails, deep plain stacks).",
        (
            S("MSD207", 3, key=True),
            S("MSD213", 3, key=True),
            S("MSD203", 1),
            S("MSD210", 0.5),
            S("MSD109", 1),
            S("MSD304", -1),
        ),
        ("Use ReLU-family activations, residual connections and normalisation layers.",
         "Use He/Glorot init for the fan-in."),
    ),
    Cause(
        "model-too-small", "Model too small / not expressive enough", STRUCTURE,
        "The model cannot even memorise one batch although the data and wiring look fine.",
        (
            S("MSD403", 2, key=True),
            S("MSD402", 1.5),
            S("MSD203", 1),
            S("MSD403", -3, "evidence_ratio_at_least", ("suggested_lr", "lr", 10.0)),
            S("MSD104", -2),
            S("MSD102", -3),
        ),
        ("Use a bigger model (more units/layers), remove bottlenecks, reduce regularisation.",),
    ),
    # --- initialisation ----------------------------------------------------------------------------------
    Cause(
        "zero-initialisation", "Weights initialised to zero/constant", INITIALISATION,
        "Identical weights give identical units: symmetry is never broken and the layer learns one feature.",
        (
            S("MSD108", 5, key=True),
            S("MSD203", 1),
            S("MSD207", 1),
            S("MSD212", 0.5),
        ),
        ("Use a random init: drop the explicit weight_init (MindSpore's default is HeUniform) or use "
         "'he_normal' / 'xavier_uniform'.",),
    ),
    Cause(
        "poor-initialisation", "Initialisation scale wrong", INITIALISATION,
        "Weights far from He/Glorot scale make the signal explode or vanish with depth.",
        (
            S("MSD109", 3, key=True),
            S("MSD215", 2, "evidence_greater", ("first_loss", "expected"), key=True),
            S("MSD216", 2),
            S("MSD207", 1),
            S("MSD201", 0.5, "step_at_most", 3),
        ),
        ("Use He init before ReLU and Glorot before Tanh/Sigmoid; scale the last layer down.",),
    ),
    # --- mixed precision ----------------------------------------------------------------------------------
    Cause(
        "loss-scale-problem", "Mixed precision: loss scale misconfigured / fp16 overflow", MIXED_PRECISION,
        "With float16 a fixed loss scale overflows (steps skipped) or gradients underflow.",
        (
            S("MSD112", 4, key=True),
            S("MSD214", 4, key=True),
            S("MSD201", 1),
            S("MSD206", 1),
            S("MSD209", 0.5),
        ),
        ("Use DynamicLossScaleManager (or a smaller fixed scale); keep BatchNorm/Softmax/loss in float32.",
         "Unscale gradients before clipping them."),
    ),
    # --- distributed --------------------------------------------------------------------------------------
    Cause(
        "distributed-misconfigured", "Data-parallel setup wrong", DISTRIBUTED,
        "Ranks start from different weights, drift apart, or read the same samples.",
        (
            S("MSD501", 4, key=True),
            S("MSD502", 4, key=True),
            S("MSD503", 3, key=True),
        ),
        ("Set the same seed on every rank (ms.set_seed) before building the network.",
         "Use a DistributedGradReducer / Model in data-parallel mode so gradients are all-reduced.",
         "Shard the dataset (num_shards=rank_size, shard_id=rank)."),
    ),
)
