"""The label-noise benchmark (issue 25): are the wrong labels found, and is the noise rate estimated, on real data?

    ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python scripts/bench_labels.py [--only digits] [--methods anchor,train,folds]
        [--json OUT] [--write-docs]

(``ONEDNN_MAX_CPU_ISA=AVX2``: this machine's MindSpore CPU kernels, as for the other benchmarks.)

Data: scikit-learn's digits (64 features, an MLP), the same digits upsampled to 28x28 images (a small CNN), wine and
breast_cancer (an MLP), standardised. Noise, with fixed seeds: none (the sets as shipped), symmetric 5/10/20 % (a
flipped label goes to any other class), and for digits the class pairs 3<->8, 1<->7, 4<->9 (20 % of those classes'
samples swapped with their partner). The noisy set is split 80/20 (stratified, fixed seed): every method scores the
80 % training split (the truth: its flipped samples); the 20 % is the Doctor's ``eval_dataset``.

Methods, side by side:

- ``anchor``: cleanlab's own recipe: scikit-learn ``LogisticRegression`` (after ``StandardScaler``),
  ``cross_val_predict(..., method="predict_proba")`` with 5 stratified folds, ``find_label_issues``;
- ``train``: the in-training scores: the network trained once on the whole set with ``Model.train`` and the Doctor
  (``eval_dataset`` given, ``label_sample_size`` covering the training set), its ``LabelReport`` of source
  "train-sample" (the eval-mode probabilities of a fixed training sample at each epoch end, averaged:
  ``Trajectory.pred_probs``), and its "eval" report on the 20 % eval split (column ``eval``);
- ``plain``: the same idea without the Doctor, from a plain MindSpore loop: eval-mode softmax of the training set at
  each epoch end, into ``Trajectory``; every epoch's probabilities are kept, so the candidates of
  ``Trajectory.pred_probs`` are compared (the trajectory table);
- ``folds``: ``mindspore_doctor.find_label_errors(build, data, folds=5)``: out-of-fold probabilities of the same
  network trained 5 times.

For each: precision, recall and F1 of the flagged samples against the flipped ones, the estimated noise rate against
the true one, and whether MSD311 warns (default options). ``--json OUT`` writes the rows; ``--write-docs`` renders
``docs/label-noise-benchmark.md``. The in-training rows also compare what cleanlab could be given from the
trajectory (mean over the epochs, the last epoch, the mean of the later half): the choice of
``Trajectory.pred_probs``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cpu import pin_cpu_isa  # noqa: E402
from mindspore_doctor._io import atomic_write_text  # noqa: E402
from mindspore_doctor.analysis.labels import LabelReport, label_report  # noqa: E402

DOC = ROOT / "docs" / "label-noise-benchmark.md"
PAIRS = ((3, 8), (1, 7), (4, 9))
NOISES = ("clean", "sym5", "sym10", "sym20", "pairs20")
SEED = 0


@dataclass
class Data:
    name: str
    flat: np.ndarray
    """(n, d) standardised features: what the anchor (logistic regression) reads."""
    net: np.ndarray
    """What the network reads: the same features, or (n, 1, 28, 28) images."""
    labels: np.ndarray
    classes: int
    arch: str
    epochs: int
    batch: int
    eval_net: np.ndarray | None = None
    eval_labels: np.ndarray | None = None
    eval_flip: np.ndarray | None = None

    def split(self, given: np.ndarray, flip: np.ndarray) -> tuple[Data, np.ndarray, np.ndarray]:
        """The 80 % training split (with the noisy labels as its labels, the 20 % as its eval set), and its given
        labels and flipped mask."""
        from sklearn.model_selection import train_test_split

        train, held = train_test_split(np.arange(given.size), test_size=0.2, stratify=self.labels,
                                       random_state=SEED)
        part = Data(self.name, self.flat[train], self.net[train], given[train], self.classes, self.arch, self.epochs,
                    self.batch, self.net[held], given[held], flip[held])
        return part, given[train], flip[train]


def load(name: str) -> Data:
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine
    from sklearn.preprocessing import StandardScaler

    if name in ("digits", "digits28"):
        x, y = load_digits(return_X_y=True)
        if name == "digits28":
            from scipy.ndimage import zoom

            images = zoom(x.reshape(-1, 8, 8) / 16.0, (1, 3.5, 3.5), order=1)  # bilinear 8x8 -> 28x28
            images = ((images - images.mean()) / images.std()).astype(np.float32)
            return Data(name, images.reshape(len(y), -1), images[:, None], y.astype(np.int32), 10, "cnn", 20, 32)
        flat = StandardScaler().fit_transform(x).astype(np.float32)
        return Data(name, flat, flat, y.astype(np.int32), 10, "mlp", 30, 32)
    loader = {"wine": load_wine, "breast_cancer": load_breast_cancer}[name]
    x, y = loader(return_X_y=True)
    flat = StandardScaler().fit_transform(x).astype(np.float32)
    return Data(name, flat, flat, y.astype(np.int32), int(y.max()) + 1, "mlp", 60 if name == "wine" else 30, 16)


def add_noise(labels: np.ndarray, classes: int, noise: str, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The given labels and the mask of flipped samples."""
    rng = np.random.default_rng(seed)
    given = labels.copy()
    if noise == "clean":
        return given, np.zeros(labels.size, dtype=bool)
    if noise.startswith("sym"):
        flip = rng.random(labels.size) < int(noise[3:]) / 100
        given[flip] = (labels[flip] + rng.integers(1, classes, int(flip.sum()))) % classes
        return given, flip
    rate = int(noise[5:]) / 100
    flip = np.zeros(labels.size, dtype=bool)
    draw = rng.random(labels.size) < rate
    for a, b in PAIRS:
        for src, dst in ((a, b), (b, a)):
            chosen = (labels == src) & draw
            given[chosen] = dst
            flip |= chosen
    return given, flip


# --- the methods -----------------------------------------------------------------------------------------------------


def anchor_probs(data: Data, given: np.ndarray) -> np.ndarray:
    """cleanlab's recipe: out-of-fold probabilities of a logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cross_val_predict(LogisticRegression(max_iter=1000), data.flat, given, method="predict_proba",
                                 cv=StratifiedKFold(5, shuffle=True, random_state=SEED))


def build_net(data: Data):
    from mindspore import nn

    if data.arch == "cnn":
        return nn.SequentialCell([
            nn.Conv2d(1, 8, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(8, 16, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(), nn.Dense(16 * 7 * 7, 64), nn.ReLU(), nn.Dense(64, data.classes)])
    return nn.SequentialCell([nn.Dense(data.flat.shape[1], 128), nn.ReLU(), nn.Dense(128, 64), nn.ReLU(),
                              nn.Dense(64, data.classes)])


def builder(data: Data) -> Callable[[dict], tuple]:
    def build(params: dict) -> tuple:
        from mindspore import nn

        net = build_net(data)
        return net, nn.CrossEntropyLoss(), nn.Adam(net.trainable_params(), learning_rate=params.get("lr", 1e-3))
    return build


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def train_plain(data: Data, given: np.ndarray) -> tuple[list[np.ndarray], list[float]]:
    """A plain MindSpore loop (GRAPH-compiled step, shuffled batches); the eval-mode softmax of the whole training
    set after each epoch, and the accuracy on the eval split then (against its given labels): one (n, k) array and
    one number per epoch."""
    import mindspore as ms
    from mindspore import Tensor

    from benchmarks.faults.kit import quick_start_step

    ms.set_seed(SEED)
    net, loss_fn, optimizer = builder(data)({})
    step = quick_start_step(net, loss_fn, optimizer)
    rng = np.random.default_rng(SEED)
    n = given.size
    epochs, held = [], []
    x_all = Tensor(data.net)
    for _ in range(data.epochs):
        net.set_train(True)
        order = rng.permutation(n)
        for start in range(0, n - data.batch + 1, data.batch):  # drop the last partial batch: one compiled shape
            idx = order[start:start + data.batch]
            step(Tensor(data.net[idx]), Tensor(given[idx]))
        net.set_train(False)
        epochs.append(_softmax(net(x_all).asnumpy().astype(np.float64)))
        held.append(float((net(Tensor(data.eval_net)).asnumpy().argmax(axis=1) == data.eval_labels).mean()))
    return epochs, held


def train_doctor(data: Data, given: np.ndarray, summary_dir: str) -> dict[str, LabelReport]:
    """``Model.train`` with the Doctor: the 20 % split as ``eval_dataset``, the training sample covering the whole
    training split; returns the "train-sample" report (positions are mapped back to rows by the samples' sha1,
    ``by_sha1``: the Doctor reads the shuffled training set in its own order), and the "eval" one (positions: rows of
    the eval split, which is not shuffled), by source."""
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore.train import Model

    from mindspore_doctor import Doctor

    ms.set_seed(SEED)
    ds.config.set_seed(SEED)
    net, loss_fn, optimizer = builder(data)({})
    train = ds.NumpySlicesDataset({"x": data.net, "label": given}, shuffle=True).batch(data.batch)
    evaluation = ds.NumpySlicesDataset({"x": data.eval_net, "label": data.eval_labels}, shuffle=False).batch(256)
    batches = -(-given.size // data.batch) + 1
    doctor = Doctor(eval_dataset=evaluation, label_sample_size=given.size, label_sample_max_mb=256.0,
                    eval_max_batches=batches, summary_dir=summary_dir, print_summary=False)
    Model(net, loss_fn, optimizer).train(data.epochs, train, callbacks=[doctor], dataset_sink_mode=False)
    from mindspore_doctor.findings import Report

    report_path = Path(summary_dir) / "doctor_report.json"
    if not report_path.is_file():
        return {}
    report = Report.from_dict(json.loads(report_path.read_text()))
    return {d["source"]: LabelReport.from_dict(d) for d in report.meta.get("label_issues", [])}


def by_sha1(report: LabelReport, data: Data) -> np.ndarray:
    """Row indices of the report's flagged samples, found by the sha1 of their inputs."""
    from mindspore_doctor.runners.labels import input_sha1s

    index: dict[str, int] = {}
    for i, h in enumerate(input_sha1s((data.net,))):
        index.setdefault(h, i)
    return np.array([index.get(s.sha1, -1) for s in report.flagged], dtype=np.int64)


def folds_report(data: Data, given: np.ndarray) -> LabelReport:
    from mindspore_doctor import find_label_errors

    return find_label_errors(builder(data), (data.net, given), folds=5, epochs=data.epochs, batch_size=data.batch,
                             seed=SEED)


# --- scoring ---------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    data: str
    noise: str
    method: str
    samples: int
    true_rate: float
    est_rate: float
    flagged: int
    precision: float | None
    recall: float | None
    f1: float | None
    warns: bool
    seconds: float
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    agreement: float | None = None
    """Share of the scored samples whose most likely class is their given label."""


def score(flagged_rows: np.ndarray, flip: np.ndarray) -> tuple[float | None, float | None, float | None]:
    found = np.zeros(flip.size, dtype=bool)
    found[flagged_rows[flagged_rows >= 0]] = True
    hit = int((found & flip).sum())
    precision = hit / found.sum() if found.any() else None
    recall = hit / flip.sum() if flip.any() else None
    if precision is None or recall is None:
        return precision, recall, None
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def warns(report: LabelReport) -> bool:
    from mindspore_doctor.config import DoctorConfig
    from mindspore_doctor.rules.data.label_errors import label_error_findings

    return bool(label_error_findings([report], DoctorConfig()))


def row(data: Data, noise: str, method: str, report: LabelReport, flip: np.ndarray, seconds: float,
        rows: np.ndarray | None = None, note: str = "", **extra: Any) -> Row:
    rows = np.array([s.position for s in report.flagged], dtype=np.int64) if rows is None else rows
    p, r, f = score(rows, flip)
    return Row(data.name, noise, method, report.samples, float(flip.mean()), report.noise_rate, len(report.flagged),
               p, r, f, warns(report), round(seconds, 1), note, extra, report.agreement)


def trajectory_choices(epochs: list[np.ndarray], given: np.ndarray, flip: np.ndarray) -> dict[str, float | None]:
    """F1 of cleanlab on each candidate of ``Trajectory.pred_probs``, from the stored per-epoch probabilities."""
    from mindspore_doctor.analysis.labels import Trajectory

    traj = Trajectory(given)
    for p in epochs:
        traj.add(p)
    half = len(epochs) // 2
    candidates = {"early (chosen)": traj.early_probs(), "mean": traj.mean_probs(), "last": traj.last_probs(),
                  "later half": np.mean(epochs[half:], axis=0)}
    out: dict[str, Any] = {}
    for name, probs in candidates.items():
        report = label_report(given, probs, source="train-sample", method=name, positions_note="row")
        out[name] = [score(np.array([s.position for s in report.flagged], dtype=np.int64), flip)[2],
                     report.noise_rate]
    out["early evaluations"] = f"{traj.early_evaluations}/{traj.evaluations}"
    return out


def run_one(whole: Data, noise: str, methods: list[str], log: Callable[[str], None]) -> list[Row]:
    data, given, flip = whole.split(*add_noise(whole.labels, whole.classes, noise))
    rows = []
    if "anchor" in methods:
        t = time.perf_counter()
        report = label_report(given, anchor_probs(data, given), source="folds", method="anchor",
                              positions_note="row")
        rows.append(row(data, noise, "anchor", report, flip, time.perf_counter() - t))
        log(fmt(rows[-1]))
    if "train" in methods:
        import tempfile

        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            reports = train_doctor(data, given, tmp)
        report = reports["train-sample"]
        rows.append(row(data, noise, "train", report, flip, time.perf_counter() - t, rows=by_sha1(report, data),
                        note="Doctor"))
        log(fmt(rows[-1]))
        if "eval" in reports:
            rows.append(row(data, noise, "eval", reports["eval"], data.eval_flip, 0.0, note="Doctor"))
            log(fmt(rows[-1]))
    if "plain" in methods:
        from mindspore_doctor.analysis.labels import Trajectory

        t = time.perf_counter()
        epochs, held = train_plain(data, given)
        traj = Trajectory(given)
        for p in epochs:
            traj.add(p)
        report = label_report(given, traj.pred_probs(), source="train-sample", method="plain loop",
                              positions_note="row")
        rows.append(row(data, noise, "plain", report, flip, time.perf_counter() - t, note="plain loop",
                        choices=trajectory_choices(epochs, given, flip),
                        train_accuracy=float((epochs[-1].argmax(1) == given).mean())))
        log(fmt(rows[-1]))
    if "folds" in methods:
        t = time.perf_counter()
        try:
            report = folds_report(data, given)
        except ImportError as exc:
            log(f"folds: not available ({exc})")
        else:
            rows.append(row(data, noise, "folds", report, flip, time.perf_counter() - t))
            log(fmt(rows[-1]))
    return rows


def _n(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _choice(value: Any) -> str:
    return value if isinstance(value, str) else f"{_n(value[0])} / {value[1]:.3f}"


def fmt(r: Row) -> str:
    choices = r.extra.get("choices")
    tail = "  choices " + " ".join(f"{k}={_choice(v)}" for k, v in choices.items()) if choices else ""
    agreement = "-" if r.agreement is None else f"{r.agreement:.3f}"
    return (f"{r.data:14} {r.noise:8} {r.method:7} true {r.true_rate:.3f} est {r.est_rate:.3f} flagged {r.flagged:4} "
            f"agree {agreement} "
            f"P {_n(r.precision)} R {_n(r.recall)} F1 {_n(r.f1)} warns {'yes' if r.warns else 'no '} "
            f"({r.seconds:.0f} s){tail}")


def _order(key: tuple[str, str]) -> tuple[int, int]:
    data, noise = key
    names = ("digits", "digits28", "wine", "breast_cancer")
    return (names.index(data) if data in names else 99, NOISES.index(noise) if noise in NOISES else 99)


def goals(keyed: dict[tuple[str, str, str], Row]) -> list[str]:
    """The issue's goals, read off the rows: in-training F1 >= the anchor's at 10 % noise, folds above the anchor,
    no MSD311 warning on the clean sets."""
    out = ["## The goals", ""]
    datasets = sorted(dict.fromkeys(d for d, _, _ in keyed), key=lambda d: _order((d, "clean")))
    for data in datasets:
        anchor, train, folds = (keyed.get((data, "sym10", m)) for m in ("anchor", "train", "folds"))
        if anchor is None or anchor.f1 is None:
            continue
        parts = [f"anchor F1 {_n(anchor.f1)}"]
        for name, r in (("in-training", train), ("folds", folds)):
            if r is not None and r.f1 is not None:
                verdict = "reaches it" if r.f1 >= anchor.f1 else "below it"
                parts.append(f"{name} {_n(r.f1)} ({verdict})")
        out.append(f"- {data}, 10 % symmetric noise: " + ", ".join(parts) + ".")
    quiet = [f"{r.data} {r.noise} ({r.method}: est. {r.est_rate:.3f}, {r.flagged} flagged of {r.samples})"
             for (d, n, m), r in keyed.items() if n != "clean" and not r.warns]
    if quiet:
        out.append("- Noisy settings where MSD311 stays quiet: " + "; ".join(quiet) + ".")
    clean = [r for (d, n, m), r in keyed.items() if n == "clean"]
    if clean:
        warned = [f"{r.data} ({r.method})" for r in clean if r.warns]
        out.append(f"- Clean data (the sets as shipped), {len(clean)} scores: MSD311 warns on "
                   + (", ".join(warned) if warned else "none") + ".")
    return out + [""]


def markdown(rows: list[Row], commands: list[str]) -> str:
    methods = [m for m in ("anchor", "train", "plain", "folds", "eval") if any(r.method == m for r in rows)]
    keyed = {(r.data, r.noise, r.method): r for r in rows}
    lines = [
        "# Label-noise benchmark (issue 25)",
        "",
        "Written by `scripts/bench_labels.py --write-docs`; the commands of the runs shown (rows of earlier runs "
        "read back with `--merge`):",
        "",
        "```",
        *commands,
        "```",
        "",
        *goals(keyed),
        "## The table",
        "",
        "Flagged samples against the truly flipped ones (precision P, recall R, F1), the estimated share of wrong "
        "labels against the true one, and whether MSD311 warns at its default options. `anchor`: cleanlab's recipe "
        "(logistic regression, 5-fold `cross_val_predict`, `find_label_issues`); `train`: the in-training scores "
        "(`Model.train` with the Doctor: its report's eval-mode probabilities of the training set at each epoch end, "
        "averaged over the epochs before the network memorises, `Trajectory.pred_probs`); `plain`: the same from a "
        "plain MindSpore loop; "
        "`folds`: `find_label_errors(build, data, folds=5)` with the same network; `eval`: the Doctor's report on "
        "its 20 % eval split (its probabilities averaged over the evaluations, out of sample; its own true "
        "rate differs a little from the training split's). `anchor`, `train` and `folds` score the same 80 % "
        "training split.",
        "",
        "Each method's first column: the estimated noise rate, (the number flagged) and **W** where MSD311 warns; "
        "its second: P / R / F1.",
        "",
        "| data | noise | true rate | " + " | ".join(f"{m}: est. (flagged) | {m}: P / R / F1" for m in methods)
        + " |",
        "|---|---|---|" + "---|---|" * len(methods),
    ]
    for data, noise in sorted(dict.fromkeys((r.data, r.noise) for r in rows), key=_order):
        cells = [data, noise]
        true = next(r.true_rate for r in rows if (r.data, r.noise) == (data, noise) and r.method != "eval")
        cells.append(f"{true:.3f}")
        for m in methods:
            r = keyed.get((data, noise, m))
            if r is None:
                cells += ["", ""]
                continue
            cells += [f"{r.est_rate:.3f} ({r.flagged}){' **W**' if r.warns else ''}",
                      f"{_n(r.precision)} / {_n(r.recall)} / {_n(r.f1)}"]
        lines.append("| " + " | ".join(cells) + " |")
    choices = sorted((r for r in rows if r.extra.get("choices")), key=lambda r: _order((r.data, r.noise)))
    if choices:
        names = list(choices[0].extra["choices"])
        lines += ["", "## What cleanlab gets from the trajectory", "",
                  "F1 of the in-training flags / estimated noise rate for each candidate of `Trajectory.pred_probs` "
                  "(per-epoch probabilities stored by the benchmark): the mean over the evaluations before "
                  "memorisation (the choice), the mean over all epochs, the last epoch, the mean of the later half "
                  "of the epochs; and how many evaluations counted as early.", "",
                  "| data | noise | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for r in choices:
            lines.append(f"| {r.data} | {r.noise} | " + " | ".join(_choice(r.extra["choices"][n]) for n in names)
                         + " |")
    lines += ["", "Seconds per method (2 CPU cores shared with other work, several runs at once: slow, not a cost "
              "measurement): " + ", ".join(
        f"{m} {sum(r.seconds for r in rows if r.method == m):.0f} s" for m in methods) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="digits,digits28,wine,breast_cancer", help="datasets, comma-separated")
    parser.add_argument("--noise", default=",".join(NOISES), help="noise settings, comma-separated")
    parser.add_argument("--methods", default="anchor,train,plain,folds",
                        help="comma-separated: anchor, train (the Doctor; its eval report too), plain, folds")
    parser.add_argument("--folds-noise", default=None,
                        help="run folds only at these noise settings (comma-separated; default: all): K trainings each")
    parser.add_argument("--json", dest="json_out", help="write the rows as JSON here")
    parser.add_argument("--write-docs", action="store_true", help=f"render {DOC.relative_to(ROOT)}")
    parser.add_argument("--merge", nargs="*", default=(), help="also read these --json outputs (rows of other runs)")
    args = parser.parse_args(argv)
    pin_cpu_isa()
    methods = [m for m in args.methods.split(",") if m]
    rows: list[Row] = []
    command = "ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python scripts/bench_labels.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    commands = []
    for other in args.merge:
        earlier = json.loads(Path(other).read_text())
        commands.append(earlier["command"])
        rows += [Row(**r) for r in earlier["rows"]]
    commands.append(command.strip())
    started = time.perf_counter()
    for name in [n for n in args.only.split(",") if n and methods]:
        data = load(name)
        for noise in args.noise.split(","):
            if noise.startswith("pairs") and data.classes < 10:
                continue
            wanted = [m for m in methods if m != "folds" or args.folds_noise is None
                      or noise in args.folds_noise.split(",")]
            rows += run_one(data, noise, wanted, lambda line: print(line, flush=True))
            if args.json_out:  # after each setting: a long run that is stopped keeps its rows
                atomic_write_text(args.json_out, json.dumps({"command": command.strip(),
                                                             "rows": [asdict(r) for r in rows]}, indent=1))
    print(f"{len(rows)} rows in {time.perf_counter() - started:.0f} s")
    if args.write_docs:
        atomic_write_text(DOC, markdown(rows, commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
