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
import shlex
import time
from pathlib import Path

from mindspore_doctor._io import HTML_FILE

_SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
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


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``msdoctor demo`` (the CLI owns the parser, this module its options)."""
    parser.add_argument("--summary-dir", metavar="DIR", help="write the run (reports, MindInsight and TensorBoard "
                        "files, the repro bundle) here; default: runs/demo-YYYYmmdd-HHMMSS")
    parser.add_argument("--epochs", type=int, default=2, help="epochs to train (default: 2)")


def run_demo_command(args: argparse.Namespace) -> int:
    """Train the buggy model into its own run directory, then say how to look at the run."""
    summary_dir = Path(args.summary_dir or time.strftime("runs/demo-%Y%m%d-%H%M%S"))
    train(summary_dir, args.epochs)
    print(how_to_view(summary_dir))
    return 0


def train(summary_dir: Path, epochs: int) -> None:
    """The demo's training run, with a Doctor that writes every report it can into ``summary_dir``."""
    import mindspore as ms
    from mindspore.train import Model

    from mindspore_doctor.training.callback import Doctor

    logging.getLogger("mindspore_doctor").setLevel(logging.ERROR)  # the summary below says it all
    ms.set_seed(0)
    net, loss, optimizer = _build()
    # a demo can afford probing every step
    doctor = Doctor(summary_dir, ignore=("MSD002",), probe_every=1, tensorboard=True)
    print(f"Training a {_CLASSES}-class classifier with three deliberate bugs, {epochs} epochs...")
    Model(net, loss, optimizer).train(epochs, _dataset(), callbacks=[doctor], dataset_sink_mode=False)


def _shown(path: Path) -> str:
    """``path`` as typed from the current directory (relative below it), quoted for a shell."""
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.quote(str(path))


def how_to_view(summary_dir: Path) -> str:
    """A few lines: the HTML report, and the dashboards over the parent of ``summary_dir`` (each run one entry)."""
    base = _shown(summary_dir.parent)
    lines = [f"The run is in {_shown(summary_dir)}. Look at it:",
             f"  HTML report:  {_shown(summary_dir / HTML_FILE)}"]
    if (_SCRIPTS / "mindinsight.sh").is_file():  # a checkout of the repository, not a pip install
        lines += [f"  TensorBoard:  {_shown(_SCRIPTS / 'tensorboard.sh')} start {base}  (then open the URL it "
                  "prints, port 6006)",
                  f"  MindInsight:  {_shown(_SCRIPTS / 'mindinsight.sh')} start {base}  (then open the URL it "
                  "prints, port 8080)"]
    else:
        lines += [f"  TensorBoard:  tensorboard --logdir {base} --host 127.0.0.1  (then open http://127.0.0.1:6006)",
                  "  MindInsight:  needs its own virtualenv (MindInsight 2.3.1 cannot share one with MindSpore "
                  "2.10): see docs/reports.md"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="msdoctor demo", description=__doc__.splitlines()[0])
    add_demo_arguments(parser)
    return run_demo_command(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
