"""The run behind docs/reports-analysis.md and its screenshots: scikit-learn's digits upsampled to 28x28, 10 % of
the labels flipped at random (train and eval alike), a small CNN trained with ``Doctor(eval_dataset=...,
summary_dir=..., tensorboard=True)``.

    .venv/bin/python scripts/analysis_report_example.py /tmp/shots/runs/digits [EPOCHS]
    .venv/bin/python scripts/docs_screenshots.py /tmp/shots/runs --analysis

Prints, after the Doctor's summary, how many of the flagged samples are truly flipped: the eval set's by position,
the training sample's by the sha1 of their inputs (``doctor_label_issues.csv``).
"""
from __future__ import annotations

import csv
import hashlib
import sys
from pathlib import Path

import numpy as np


def digits_28(seed: int = 0, noise: float = 0.10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images (N, 1, 28, 28) in [-1, 1] (8x8 pixels grown 3x, padded by 2), true labels, given (noisy) labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = np.stack([np.kron(img, np.ones((3, 3))) for img in digits.images / 16.0]).astype(np.float32)
    x = (np.pad(x, ((0, 0), (2, 2), (2, 2)))[:, None] - 0.5) / 0.5
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    x, y = x[order], digits.target[order].astype(np.int32)
    given = y.copy()
    flip = rng.random(len(y)) < noise
    given[flip] = (y[flip] + rng.integers(1, 10, flip.sum())) % 10  # another class, uniformly
    return x, y, given


def main(out: Path, epochs: int = 5, cut: int = 1437) -> None:
    import mindspore as ms
    from mindspore import nn
    from mindspore.dataset import NumpySlicesDataset

    from mindspore_doctor import Doctor
    from mindspore_doctor.export.labels import read_label_issues

    ms.set_seed(0)
    x, y, given = digits_28()
    train = NumpySlicesDataset({"x": x[:cut], "y": given[:cut]}, shuffle=True).batch(32)
    evaluation = NumpySlicesDataset({"x": x[cut:], "y": given[cut:]}, shuffle=False).batch(60)
    net = nn.SequentialCell(
        nn.Conv2d(1, 16, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Conv2d(16, 32, 3, pad_mode="same"), nn.ReLU(), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Dense(32 * 7 * 7, 10))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = ms.Model(net, loss, nn.Adam(net.trainable_params(), 1e-3))
    doctor = Doctor(summary_dir=str(out), eval_dataset=evaluation, tensorboard=True, mindinsight=False)
    model.train(epochs, train, callbacks=[doctor], dataset_sink_mode=False)

    wrong = y != given
    by_hash = {hashlib.sha1(np.ascontiguousarray(x[i]).tobytes()).hexdigest()[:12]: i for i in range(cut)}
    rows = read_label_issues(out)
    for source, index in (("eval", lambda r: cut + r["position"]), ("train-sample", lambda r: by_hash[r["sha1"]])):
        flagged = [index(r) for r in rows if r["source"] == source]
        print(f"{source}: {len(flagged)} flagged, {int(wrong[flagged].sum())} of them truly flipped"
              + (f"; {int(wrong[cut:].sum())} flipped in the eval set" if source == "eval" else
                 f"; {int(wrong[:cut].sum())} flipped in the training set ({wrong[:cut].mean():.1%})"))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3]))
