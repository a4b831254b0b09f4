"""``msdoctor demo``: train a small model with three classic bugs and let the Doctor find them.

The bugs, each one a real habit:
* ``nn.Dropout(p=0.9)`` written by someone who meant "keep 90 %" (MSD104);
* a layer frozen with ``requires_grad=False`` and forgotten (MSD102);
* a "normalise by the sum of activations" division with no epsilon: a blank
  sample in the data makes the sum zero and the loss NaN (MSD106, MSD201, MSD206).
"""
from __future__ import annotations

import argparse
import logging

_SAMPLES, _FEATURES, _CLASSES, _BATCH, _BLANK_STEP = 384, 16, 3, 32, 9


def _build() -> tuple:
    from mindspore import nn, ops

    class BuggyClassifier(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Dense(_FEATURES, 32, has_bias=False)
            self.relu = nn.ReLU()
            self.hidden = nn.Dense(32, 32)
            self.tanh = nn.Tanh()
            self.dropout = nn.Dropout(p=0.9)  # bug: p is the DROP probability in MindSpore 2.x
            self.head = nn.Dense(32, _CLASSES)
            for param in self.hidden.get_parameters():
                param.requires_grad = False  # bug: frozen while debugging, never unfrozen
            self.sum = ops.ReduceSum(keep_dims=True)

        def construct(self, x):
            h = self.relu(self.embed(x))
            h = h / self.sum(h, 1)  # bug: zero when every unit is off (e.g. a blank sample)
            h = self.dropout(self.tanh(self.hidden(h)))
            return self.head(h)

    net = BuggyClassifier()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    return net, loss, optimizer


def _dataset():
    import mindspore.dataset as ds
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((_SAMPLES, _FEATURES)).astype(np.float32)
    y = (x[:, :_CLASSES].argmax(axis=1)).astype(np.int32)
    x[(_BLANK_STEP - 1) * _BATCH] = 0.0  # a blank record, as real data has
    return ds.NumpySlicesDataset({"features": x, "label": y}, shuffle=False).batch(_BATCH)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msdoctor demo", description=__doc__.splitlines()[0])
    parser.add_argument("--summary-dir", help="also write doctor_report.json and the repro bundle here")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)

    import mindspore as ms
    from mindspore.train import Model

    from mindspore_doctor.training.callback import Doctor

    logging.getLogger("mindspore_doctor").setLevel(logging.ERROR)  # the summary below says it all
    ms.set_seed(0)
    net, loss, optimizer = _build()
    doctor = Doctor(args.summary_dir, ignore=("MSD002",), probe_every=1)  # a demo can afford probing every step
    print(f"Training a {_CLASSES}-class classifier with three deliberate bugs, {args.epochs} epochs...")
    Model(net, loss, optimizer).train(args.epochs, _dataset(), callbacks=[doctor], dataset_sink_mode=False)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
