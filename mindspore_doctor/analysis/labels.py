"""Label errors by confident learning, over per-sample class probabilities (MSD311 judges the result).

Two parts, both pure numpy:

- ``label_report(labels, pred_probs, ...)``: cleanlab 2.9 (``cleanlab.filter.find_label_issues``,
  ``cleanlab.rank.get_label_quality_scores``, ``cleanlab.count.estimate_joint``) over out-of-sample, or
  trajectory-averaged, probabilities: the samples whose given label is likely wrong, the estimated noise rate overall
  and per class, and the class pairs whose labels are most often swapped. Nothing of confident learning is
  re-implemented here; this module validates the input, calls cleanlab and turns its arrays into plain data.
- ``Trajectory``: the per-sample class probabilities of a fixed training sample, scored in eval mode at each
  evaluation point, kept as running sums (bounded memory: a few ``(n, k)`` and ``(n,)`` arrays, whatever the number
  of evaluations). It gives what cleanlab gets (``pred_probs``) and the per-sample training dynamics of dataset
  cartography (confidence, variability; Swayamdipta et al. 2020) and of AUM (the margin; Pleiss et al. 2020).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mindspore_doctor.rule import CheckSkipped

MAX_PAIRS = 20
"""Swapped class pairs kept in a report, most frequent first."""


@dataclass
class LabelSuspect:
    """One sample whose given label confident learning flags."""

    position: int
    """Where the sample sits; the report's ``positions`` says in what order."""
    given: int
    likely: int
    """The class the probabilities favour (their argmax)."""
    quality: float
    """cleanlab's label-quality score in [0, 1] (self-confidence: the probability of the given label); lower is more
    likely wrong."""
    sha1: str = ""
    """The sample's content hash where the caller has it (to find it again whatever the order)."""
    aum: float | None = None
    """With a trajectory (sources "eval", "train-sample"): the mean margin of the given label over the evaluations
    (AUM; negative: another class won on average). Beside it, dataset cartography's view: a wrong label has a low
    ``confidence`` (mean probability of the given label) and a low ``variability`` (its standard deviation: the
    model never hesitated), a hard but right one a high variability."""
    confidence: float | None = None
    variability: float | None = None


@dataclass
class SwappedPair:
    """Samples of class ``likely`` labelled ``given``, as cleanlab's estimated joint counts them."""

    given: int
    likely: int
    count: int
    """Estimated number of samples labelled ``given`` whose true class is ``likely``."""
    rate: float
    """``count`` as a share of the samples labelled ``given``."""


@dataclass
class ClassNoise:
    label: int
    support: int
    """Samples with this given label."""
    noise_rate: float
    """Estimated share of them whose true class is another one."""


@dataclass
class LabelReport:
    """What confident learning says about one set of labelled samples."""

    source: str
    """"eval" (the evaluation set), "train-sample" (a fixed sample of the training set scored along training) or
    "folds" (out-of-fold probabilities of K models)."""
    method: str
    """One line: where the probabilities come from."""
    positions: str
    """What ``LabelSuspect.position`` means, e.g. "index in the order the eval dataset yields"."""
    samples: int
    classes: int
    noise_rate: float
    """Estimated share of wrong labels (1 - trace of cleanlab's estimated joint of given and true labels)."""
    per_class: list[ClassNoise] = field(default_factory=list)
    swapped: list[SwappedPair] = field(default_factory=list)
    """The most often swapped pairs, most first (at most ``MAX_PAIRS``)."""
    flagged: list[LabelSuspect] = field(default_factory=list)
    """Every sample cleanlab flags, most suspect (lowest quality) first."""
    agreement: float | None = None
    """Share of the samples whose most likely class is their given label (None: not computed). Its complement is
    what the wrong labels and the model's own errors share between them."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LabelReport:
        return cls(
            source=str(d["source"]), method=str(d.get("method", "")), positions=str(d.get("positions", "")),
            samples=int(d["samples"]), classes=int(d["classes"]), noise_rate=float(d["noise_rate"]),
            per_class=[ClassNoise(**c) for c in d.get("per_class", ())],
            swapped=[SwappedPair(**s) for s in d.get("swapped", ())],
            flagged=[LabelSuspect(**s) for s in d.get("flagged", ())],
            agreement=None if d.get("agreement") is None else float(d["agreement"]),
        )

    @property
    def flagged_rate(self) -> float:
        return len(self.flagged) / self.samples if self.samples else 0.0


def _as_probabilities(pred_probs: Any, what: str = "pred_probs") -> np.ndarray:
    """``(n, k)`` float64 rows summing to 1. A vector (or one column) is the probability of class 1 of a binary task.
    Non-finite values raise ValueError; small negative values (rounding) are clipped; a row of zeros becomes uniform."""
    p = np.asarray(pred_probs, dtype=np.float64)
    if p.ndim == 1 or (p.ndim == 2 and p.shape[1] == 1):
        q = p.reshape(-1)
        p = np.stack([1.0 - q, q], axis=1)
    if p.ndim != 2:
        raise ValueError(f"{what} must be (samples, classes) class probabilities, got shape {p.shape}")
    bad = ~np.isfinite(p)
    if bad.any():
        rows = int(bad.any(axis=1).sum())
        raise ValueError(f"{what} holds {int(bad.sum())} non-finite value(s) (NaN/Inf) in {rows} of {p.shape[0]} "
                         "samples: the model's outputs are not finite, so no label analysis is possible")
    if p.shape[1] < 2:
        raise ValueError(f"{what} needs at least 2 classes, got {p.shape[1]}")
    p = np.clip(p, 0.0, None)
    total = p.sum(axis=1, keepdims=True)
    zero = total[:, 0] <= 0
    if zero.any():
        p[zero] = 1.0
        total[zero] = p.shape[1]
    return p / total


def _as_labels(labels: Any, n: int | None, k: int | None) -> np.ndarray:
    y = np.asarray(labels).reshape(-1)
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise ValueError("labels must be integer class ids")
    elif y.dtype.kind not in "iub":
        raise ValueError(f"labels must be integer class ids, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if n is not None and y.size != n:
        raise ValueError(f"{y.size} labels for {n} rows of probabilities")
    if k is not None and y.size and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"labels must lie in [0, {k}) for {k} classes of probabilities, got "
                         f"[{int(y.min())}, {int(y.max())}]")
    return y


def label_report(labels: Any, pred_probs: Any, *, source: str, method: str, positions_note: str,
                 positions: Sequence[int] | np.ndarray | None = None,
                 sha1: Sequence[str] | None = None) -> LabelReport:
    """Confident learning over ``pred_probs`` ``(n, k)`` (out-of-sample, or averaged along training) and the given
    ``labels`` ``(n,)`` (class ids in ``[0, k)``; classes missing from the labels are fine, and a binary task may
    pass one probability per sample). ``positions`` (default ``0..n-1``) and ``sha1`` name each sample in the
    report. Raises ValueError on non-finite probabilities or labels out of range."""
    p = _as_probabilities(pred_probs)
    n, k = p.shape
    y = _as_labels(labels, n, k)
    where = np.arange(n) if positions is None else np.asarray(positions, dtype=np.int64).reshape(-1)
    if where.size != n:
        raise ValueError(f"{where.size} positions for {n} samples")
    hashes = list(sha1) if sha1 is not None else [""] * n
    if len(hashes) != n:
        raise ValueError(f"{len(hashes)} sha1 for {n} samples")
    report = LabelReport(source=source, method=method, positions=positions_note, samples=n, classes=k,
                         noise_rate=0.0, agreement=float(np.mean(p.argmax(axis=1) == y)) if n else None)
    if n < 2 or np.unique(y).size < 2:  # one class: nothing to confuse it with
        return report

    from cleanlab.count import estimate_joint
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores

    with warnings.catch_warnings():  # "may not flag all label issues in class c, it has too few examples"
        warnings.simplefilter("ignore")
        # n_jobs=1: cleanlab otherwise forks a multiprocessing pool, and a fork after MindSpore's threads started
        # can deadlock (seen in the fault benchmark); one process is fast at these sizes
        issues = np.asarray(find_label_issues(y, p, n_jobs=1), dtype=bool)
        quality = np.asarray(get_label_quality_scores(y, p), dtype=np.float64)
        joint = np.asarray(estimate_joint(y, p), dtype=np.float64)  # [given, true], sums to 1

    report.noise_rate = float(np.clip(1.0 - np.trace(joint), 0.0, 1.0))
    support = np.bincount(y, minlength=k)
    row = joint.sum(axis=1)
    for c in np.flatnonzero(support):
        rate = 1.0 - joint[c, c] / row[c] if row[c] > 0 else 0.0
        report.per_class.append(ClassNoise(label=int(c), support=int(support[c]), noise_rate=float(max(rate, 0.0))))
    off = joint * n
    np.fill_diagonal(off, 0.0)
    order = np.argsort(-off, axis=None, kind="stable")[:MAX_PAIRS]
    for flat in order:
        i, j = divmod(int(flat), k)
        count = int(round(off[i, j]))
        if count < 1:
            break
        report.swapped.append(SwappedPair(given=i, likely=j, count=count,
                                          rate=float(joint[i, j] / row[i]) if row[i] > 0 else 0.0))
    likely = p.argmax(axis=1)
    flagged = np.flatnonzero(issues)
    flagged = flagged[np.argsort(quality[flagged], kind="stable")]
    report.flagged = [LabelSuspect(position=int(where[i]), given=int(y[i]), likely=int(likely[i]),
                                   quality=float(quality[i]), sha1=str(hashes[i])) for i in flagged]
    return report


PLATEAU_GAIN = 0.01
"""The early-learning phase ends at the first evaluation that raises the sample's agreement with its given labels by
less than this (the plateau) ..."""
MEMORISATION_MARGIN = 0.01
"""... and memorisation starts at the first one whose agreement exceeds the plateau's by more than this."""


class Trajectory:
    """Class probabilities of a fixed set of ``n`` training samples across evaluations, as running sums.

    Memory: three ``(n, k)`` float64 arrays (the sum of all evaluations' probabilities, the sum of the early ones,
    the last ones), three ``(n,)`` arrays and one number per evaluation, whatever the number of evaluations
    (``nbytes``).

    ``pred_probs()`` is what cleanlab gets: the **mean over the evaluations before memorisation** (``early_probs``).
    A network learns the clean structure first and memorises the wrong labels later (early learning): the sample's
    agreement with its given labels rises fast, plateaus near the share of right labels, then creeps up as the wrong
    labels are fitted. The early phase ends at the first evaluation whose agreement exceeds the plateau (the
    agreement at the first evaluation that raised it by less than ``PLATEAU_GAIN``) by more than
    ``MEMORISATION_MARGIN``; later evaluations still count in ``mean_probs`` and the cartography/AUM arrays, not in
    what cleanlab gets. Without a plateau (still learning) every evaluation is early.

    Chosen by measurement (``scripts/bench_labels.py``, plain loop, 80 % training split, Adam 1e-3, an evaluation
    per epoch; F1 of cleanlab's flags against the flipped labels / estimated noise rate):

    ====================  ==========  =============  ============  ============  ============  =====
    data (true rate)      early       mean (all)     last          later half    early evals   net
    ====================  ==========  =============  ============  ============  ============  =====
    digits sym5 (0.056)   0.85/0.046  0.35/0.012     0.07/0.002    0.10/0.003    9 of 30       MLP
    digits sym10 (0.102)  0.87/0.086  0.49/0.036     0.09/0.005    0.30/0.018    9 of 30       MLP
    digits sym20 (0.207)  0.89/0.189  0.71/0.116     0.28/0.035    0.54/0.079    8 of 30       MLP
    digits pairs (0.124)  0.90/0.108  0.46/0.037     0.15/0.010    0.17/0.012    8 of 30       MLP
    digits28 sym10 (0.10) 0.89/0.111  0.87/0.084     0.74/0.063    0.77/0.068    3 of 20       CNN
    wine sym10 (0.099)    0.80/0.077  -/0.000        -/0.000       -/0.000       5 of 60       MLP
    cancer sym10 (0.088)  0.88/0.073  0.18/0.009     -/0.000       0.05/0.002    8 of 30       MLP
    ====================  ==========  =============  ============  ============  ============  =====

    (cleanlab's anchor recipe, logistic regression with 5-fold ``cross_val_predict``, on digits sym10: 0.82.)
    The mean over all evaluations and the last evaluation are in-sample once the wrong labels are memorised: their
    noise estimates fall towards 0 and recall with them.
    """

    def __init__(self, labels: Any) -> None:
        self.labels = _as_labels(labels, None, None)
        self.evaluations = 0
        self.early_evaluations = 0
        """Evaluations before memorisation (averaged into ``pred_probs``)."""
        self.agreement: list[float] = []
        """Per evaluation: the share of samples whose most likely class is their given label."""
        self._sum: np.ndarray | None = None
        self._early: np.ndarray | None = None
        self._last: np.ndarray | None = None
        self._plateau: float | None = None
        self.memorising_from: int | None = None
        """The 1-based evaluation from which the network memorises (None: not seen)."""
        n = self.labels.size
        self._confidence = np.zeros(n)
        self._confidence_sq = np.zeros(n)
        self._margin = np.zeros(n)

    @property
    def samples(self) -> int:
        return int(self.labels.size)

    @property
    def classes(self) -> int | None:
        return None if self._sum is None else int(self._sum.shape[1])

    def add(self, probs: Any) -> None:
        """One evaluation: ``probs`` ``(n, k)`` class probabilities of the samples, in the order of ``labels``.
        Raises ValueError on non-finite values or a shape that differs from the first evaluation's."""
        p = _as_probabilities(probs, "probs")
        n, k = p.shape
        if n != self.samples:
            raise ValueError(f"{n} rows of probabilities for {self.samples} tracked samples")
        if self._sum is None:
            _as_labels(self.labels, n, k)
            self._sum, self._early = np.zeros((n, k)), np.zeros((n, k))
        elif k != self._sum.shape[1]:
            raise ValueError(f"{k} classes of probabilities, the first evaluation had {self._sum.shape[1]}")
        agreement = float(np.mean(p.argmax(axis=1) == self.labels)) if n else 0.0
        if self.memorising_from is None:
            if self._plateau is None and self.agreement and agreement - self.agreement[-1] < PLATEAU_GAIN:
                self._plateau = agreement
            if self._plateau is not None and agreement > self._plateau + MEMORISATION_MARGIN:
                self.memorising_from = self.evaluations + 1
        self.agreement.append(agreement)
        self._sum += p
        if self.memorising_from is None:
            self._early += p
            self.early_evaluations += 1
        self._last = p
        rows = np.arange(n)
        given = p[rows, self.labels]
        other = p.copy()
        other[rows, self.labels] = -np.inf
        self._confidence += given
        self._confidence_sq += given * given
        self._margin += given - other.max(axis=1)
        self.evaluations += 1

    def _need(self) -> int:
        if not self.evaluations:
            raise ValueError("no evaluation added yet")
        return self.evaluations

    def mean_probs(self) -> np.ndarray:
        """The mean over all evaluations."""
        return self._sum / self._need()

    def early_probs(self) -> np.ndarray:
        """The mean over the evaluations before memorisation (the first evaluation at least)."""
        self._need()
        return self._early / self.early_evaluations

    def last_probs(self) -> np.ndarray:
        self._need()
        return self._last.copy()

    def pred_probs(self) -> np.ndarray:
        """What cleanlab gets: the mean over the evaluations before memorisation (see the class docstring)."""
        return self.early_probs()

    def confidence(self) -> np.ndarray:
        """Cartography confidence: the mean probability of the given label across evaluations."""
        return self._confidence / self._need()

    def variability(self) -> np.ndarray:
        """Cartography variability: the standard deviation of the probability of the given label."""
        e = self._need()
        mean = self._confidence / e
        return np.sqrt(np.clip(self._confidence_sq / e - mean * mean, 0.0, None))

    def aum(self) -> np.ndarray:
        """Area under the margin: the mean of p[given] - max of the other classes (negative: another class wins)."""
        return self._margin / self._need()

    def annotate(self, suspects: Sequence[LabelSuspect]) -> None:
        """Write each suspect's AUM, cartography confidence and variability (its ``position`` is its row here)."""
        aum, confidence, variability = self.aum(), self.confidence(), self.variability()
        for suspect in suspects:
            row = suspect.position
            suspect.aum, suspect.confidence = float(aum[row]), float(confidence[row])
            suspect.variability = float(variability[row])

    @staticmethod
    def footprint(samples: int, classes: int) -> int:
        """Bytes of the arrays of a trajectory of ``samples`` x ``classes`` (``nbytes`` once filled, less the one
        number per evaluation): three (n, k) float64 arrays and four (n,) ones."""
        return 8 * samples * (3 * classes + 4)

    @property
    def nbytes(self) -> int:
        arrays = (self.labels, self._sum, self._early, self._last, self._confidence, self._confidence_sq,
                  self._margin)
        return int(sum(a.nbytes for a in arrays if a is not None)) + 8 * len(self.agreement)


CHILD_TIMEOUT_S = 120.0
"""How long the child may take: confident learning on the end-of-run sources (at most a few thousand samples) takes
1 to 2 s; past this the analysis is skipped (MSD002), never redone in the training process."""


def label_reports_apart(requests: Sequence[dict[str, Any]],
                        timeout: float = CHILD_TIMEOUT_S) -> list[LabelReport | str]:
    """``label_report(**request)`` for each request, in a child Python process: the report, or why that request's
    input is invalid (``label_report``'s ValueError, e.g. non-finite probabilities of a diverged model), so that one
    bad source does not lose the others.

    Why a child: cleanlab imports scikit-learn, SciPy and pandas: +90 MB of resident memory and ~1 s (measured next
    to MindSpore 2.10), which a training process would keep until it exits (the real-code corpus's peak RSS ratio
    went from 1.08 to 1.24 median with cleanlab in process). The child gives it back when it ends. A child that
    cannot start falls back to this process; one that runs past ``timeout`` raises CheckSkipped.
    """
    with tempfile.TemporaryDirectory(prefix="msdoctor-labels-") as folder:
        arrays, plain = {}, []
        for i, request in enumerate(requests):
            request = dict(request)
            arrays[f"labels_{i}"] = np.asarray(request.pop("labels"))
            arrays[f"pred_probs_{i}"] = np.asarray(request.pop("pred_probs"), dtype=np.float64)
            if request.get("positions") is not None:
                request["positions"] = [int(x) for x in np.asarray(request["positions"]).reshape(-1)]
            if request.get("sha1") is not None:
                request["sha1"] = list(request["sha1"])
            plain.append(request)
        np.savez(Path(folder, "arrays.npz"), **arrays)
        Path(folder, "requests.json").write_text(json.dumps(plain))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            done = subprocess.run([sys.executable, "-m", __name__, folder], env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CheckSkipped(f"confident learning took longer than {timeout:.0f} s") from None
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is None or done.returncode != 0:
            return _reports(folder)
        return [LabelReport.from_dict(d) if isinstance(d, dict) else d
                for d in json.loads(Path(folder, "reports.json").read_text())]


def _reports(folder: str) -> list[LabelReport | str]:
    """Each request's report, or the ValueError message of its invalid input."""
    plain = json.loads(Path(folder, "requests.json").read_text())
    out: list[LabelReport | str] = []
    with np.load(Path(folder, "arrays.npz")) as arrays:
        for i, request in enumerate(plain):
            try:
                out.append(label_report(**request, labels=arrays[f"labels_{i}"],
                                        pred_probs=arrays[f"pred_probs_{i}"]))
            except ValueError as exc:
                out.append(str(exc))
    return out


def _child(folder: str) -> int:
    reports = _reports(folder)
    Path(folder, "reports.json").write_text(json.dumps([r.to_dict() if isinstance(r, LabelReport) else r
                                                        for r in reports]))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
