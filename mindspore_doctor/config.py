"""Every option and threshold of the doctor, in one dataclass with documented defaults.

The thresholds are defined with the rules that read them (``Rule.options`` in ``rules/``); the options of the runs
themselves (selection, cadence, data and evaluation budgets, exports) are ``RUN_OPTIONS`` below. ``DoctorConfig`` is
built from both, so ``lint(**options)``, ``Doctor(**options)`` and ``[tool.msdoctor]`` in pyproject.toml fill one
dataclass, and an option means the same thing everywhere. Defaults come from shared/CATALOG.md (and the tools it
cites).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mindspore_doctor.catalog import RULE_OPTIONS
from mindspore_doctor.rule import Option

RUN_OPTIONS = (
    # --- selection and behaviour -----------------------------------------------------------------------------
    Option(
        "select", (),
        "Only report these codes/prefixes/slugs (empty: all).",
        type="tuple[str, ...]",
    ),
    Option(
        "ignore", (),
        "Never report these codes/prefixes/slugs.",
        type="tuple[str, ...]",
    ),
    Option(
        "stop_on", None,
        "Ask training to stop at a finding of this severity or worse (\"error\"); None: never stop.",
        type="str | None",
    ),
    Option(
        "probe_every", 50,
        "Run the probed step (gradient/update/activation statistics) every N steps. A probed step runs the same "
        "compiled graph with its gradient sums switched on, then reads the statistics. At this default, "
        "``probe_budget`` thins the probes of a fast step; an explicit probe_every probes exactly every N steps.",
    ),
    Option(
        "probe_budget", 0.03,
        "Share of the training time the probe steps may take at the default probe_every, once step 1 and the "
        "first 4 regular probes have run (as many as a probe rule needs): a later due probe runs only while the "
        "probe steps, it included, take at most this share of the time since the first regular one (a small "
        "MLP's probe step costs ~2 ms on CPU: at 0.4 ms a step it then probes about every 170 steps, a ResNet's "
        "every 50); None: every probe_every steps, however fast the step (training/probe_budget.py).",
        type="float | None",
    ),
    Option(
        "loss_read", "auto",
        "How the host gets each step's loss: \"step\" reads it every step (step-exact; on CPU the wait is short, "
        "docs/custom-loops.md); \"deferred\" holds each step's loss tensor and reads the held steps on probe steps, "
        "at epoch end and every probe_every steps (no per-step wait on GPU/Ascend, no device op); \"auto\": \"step\" "
        "on CPU, \"deferred\" elsewhere.",
    ),
    Option(
        "sampled_activations", 16,
        "The most activation cells whose output a compiled step samples on every step (MSD212/213/216), spread "
        "evenly through the network; None: every one. Only where the probe steps do not sample in a forward pass of "
        "their own (GRAPH mode under doctor.watch(), a train cell of the user's, fewer than 8 activation cells): "
        "there the sample runs on every step, a gather and a copy a cell (35-50 us a cell on CPU). Under Model.train "
        "(8 cells or more), under a probe phase of its own and in PyNative every cell is sampled, on probe steps "
        "only.",
        type="int | None",
    ),
    # --- data ------------------------------------------------------------------------------------------------
    Option(
        "data_max_samples", 2048,
        "Bound on samples read from a dataset by the data checks.",
    ),
    Option(
        "data_max_seconds", 2.0,
        "Bound on seconds spent by the data checks.",
    ),
    Option(
        "eval_dataset", None,
        "Evaluation dataset for the train/eval checks MSD308/MSD309 (``Doctor(eval_dataset=...)``).",
        type="Any",
    ),
    Option(
        "input_columns", (),
        "Dataset columns fed to the network; empty: all but the label column.",
        type="tuple[str, ...]",
    ),
    Option(
        "label_column", None,
        "Dataset column holding the label; None: a column named label/target, else the last of several.",
        type="str | None",
    ),
    # --- evaluation and sanity -------------------------------------------------------------------------------
    Option(
        "eval_every", 1,
        "Evaluate on ``eval_dataset`` every N epochs (MSD401/404/405); 0: never.",
    ),
    Option(
        "eval_budget", 0.05,
        "Share of the training time the evaluations may take on a long run: after the first 10 evaluations, one "
        "runs only while those since take at most this share of the time trained since (the last epoch's always "
        "runs); None: every ``eval_every`` epochs, however long the run (training/evaluation_schedule.py).",
        type="float | None",
    ),
    Option(
        "eval_max_batches", 50,
        "Bound on the batches read per evaluation: the eval set, the train sample (MSD402, and the label trajectory "
        "of MSD311), target_eval_dataset and holdout_dataset.",
    ),
    Option(
        "target_eval_dataset", None,
        "A second validation set drawn from the test (deployment) distribution: the error budget's distribution-"
        "shift term is its error minus ``eval_dataset``'s (MSD407).",
        type="Any",
    ),
    Option(
        "holdout_dataset", None,
        "A held-out test set used for nothing else: the error budget's validation-set-overfitting term is its error "
        "minus the validation error.",
        type="Any",
    ),
    Option(
        "target_error", None,
        "The error the task allows (e.g. human-level error, 0.02 for 98 % accuracy; MSE for regression): the error "
        "budget's avoidable bias is the train error minus it. None: unknown (the budget then bounds it).",
        type="float | None",
    ),
    Option(
        "label_sample_size", 1024,
        "Training samples kept at the first evaluation and scored in eval mode at every evaluation (the train "
        "loss/metric and the per-sample label-error trajectory, MSD311); 0: none (the train loss then reads fresh "
        "batches).",
    ),
    Option(
        "label_sample_max_mb", 32.0,
        "Bound on the host memory of MSD311's scoring: the training sample (its inputs and labels as numpy), and "
        "each source's per-sample probabilities kept across evaluations (beyond it, the eval set is judged on its "
        "last evaluation and the training sample is not scored).",
    ),
    Option(
        "analysis_top", 20,
        "Rows in the end-of-run tables: top-loss evaluation samples, label-error suspects, confused class pairs.",
    ),
    Option(
        "lr_range", (1e-6, 1.0),
        "LR range test: learning rates swept exponentially from the first to the second value.",
        type="tuple[float, float]",
    ),
    Option(
        "lr_range_steps", 40,
        "LR range test: steps of the sweep (stops early once the loss explodes).",
    ),
    Option(
        "sanity_batches", 8,
        "sanity(): batches read from the dataset (the last quarter is held out for the baseline check).",
    ),
    Option(
        "sanity_train_epochs", 5,
        "sanity(): epochs over the sampled batches for the baseline check (MSD404).",
    ),
    # --- export ----------------------------------------------------------------------------------------------
    Option(
        "summary_dir", None,
        "Where doctor_report.json (and summaries, HTML) are written; None: nowhere.",
        type="str | None",
    ),
    Option(
        "mindinsight", True,
        "Also write the Doctor's scalars, histograms and lineage into summary_dir for MindInsight.",
    ),
    Option(
        "mindinsight_max_layers", 24,
        "Parameters (and half as many activation cells) with their own MindInsight series; MindInsight keeps 300 "
        "tags per run.",
    ),
    Option(
        "histogram_layers", 4,
        "Parameters whose weight histograms are written at each epoch end (those named in findings first).",
    ),
    Option(
        "summary_flush_seconds", 10.0,
        "Buffered summary records are appended to disk at least this often (and at each epoch end).",
    ),
    Option(
        "hparams", None,
        "Extra hyperparameters of the run (a dict: name -> str/number/bool), shown with the run's configuration: "
        "the report's ``run`` section, TensorBoard's HParams, MindInsight's lineage columns (``tune`` passes each "
        "trial's).",
        type="Any",
    ),
    Option(
        "print_summary", True,
        "Print the findings at the end of training (``tune`` keeps them in each trial's attributes instead).",
    ),
    Option(
        "html_report", True,
        "Write doctor_report.html next to doctor_report.json at the end of training.",
    ),
    Option(
        "tensorboard", False,
        "Also write TensorBoard event files into summary_dir: scalars, histograms, the findings table, HParams.",
    ),
    # --- distributed -----------------------------------------------------------------------------------------
    Option(
        "collective_timeout_s", 120.0,
        "Longest wait for one Doctor collective; past it the rank stops taking part in the Doctor's collectives.",
    ),
)


class _Options:
    """What every DoctorConfig can do besides holding its fields."""

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



OPTIONS: dict[str, Option] = {o.name: o for o in RUN_OPTIONS} | RULE_OPTIONS
"""Every field of DoctorConfig, with its default and its documentation."""
DEFAULT_PROBE_EVERY: int = OPTIONS["probe_every"].default
if len(OPTIONS) != len(RUN_OPTIONS) + len(RULE_OPTIONS):
    raise RuntimeError("a run option has the name of a rule option")


def _doc() -> str:
    lines = ["Every option and threshold of the doctor (``DoctorConfig(field=...)``, ``Doctor(field=...)``, "
             "``[tool.msdoctor]``).", ""]
    lines += [f"{o.name} = {o.default!r}\n    {o.doc}" for o in OPTIONS.values()]
    return "\n".join(lines)


DoctorConfig = dataclasses.make_dataclass(
    "DoctorConfig",
    [(o.name, o.annotation, dataclasses.field(default=o.default)) for o in OPTIONS.values()],
    bases=(_Options,),
    namespace={"__doc__": _doc(), "__module__": __name__},
)
