"""The label-error files of a run, and thumbnails of the samples they name.

In ``summary_dir`` (written once the run's label reports are final, each file atomically):

* ``doctor_label_issues.csv``: every sample cleanlab flags, per source (``eval``, ``train-sample``, ``folds``), most
  suspect first: ``source, position, given, likely, quality, sha1, aum, confidence, variability`` (the last three
  from the source's trajectory, blank for ``folds``);
* ``doctor_label_suspects.npz``: for the top suspects of each source, the inputs as the pipeline yields one sample
  (``<source>__inputs``, shape ``(m, ...)``) and their positions (``<source>__positions``, ``(m,)``). The HTML report
  and TensorBoard draw their thumbnails from it, also for a finished run (``msdoctor report RUN_DIR``).

A thumbnail is drawn for image-like inputs only: HW, CHW or HWC with 1, 3 or 4 channels (a leading batch axis of 1
dropped), min-max scaled per sample; a vector (tabular data, token ids) gets none.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from mindspore_doctor._io import LABEL_ISSUES_FILE, LABEL_SUSPECTS_FILE, atomic_write_bytes, atomic_write_text

CSV_COLUMNS = ("source", "position", "given", "likely", "quality", "sha1", "aum", "confidence", "variability")
TRAJECTORY_COLUMNS = CSV_COLUMNS[-3:]
"""Blank for a source without a trajectory (``folds``)."""
CHANNELS = (1, 3, 4)
MIN_SIDE = 4
"""An image is at least this many pixels high and wide (a (2, 5) array is a table, not a picture)."""
THUMBNAIL_SIDE = 96
"""Thumbnails are scaled (nearest pixel, whole factors) towards this many pixels on their longer side."""


def _as_dict(report: Any) -> dict[str, Any]:
    """A ``LabelReport`` or its ``to_dict()``."""
    return report.to_dict() if hasattr(report, "to_dict") else dict(report)


def _npz_key(source: str, what: str) -> str:
    return f"{source}__{what}"


def write_label_files(summary_dir: str | os.PathLike, reports: Iterable[Any],
                      suspect_inputs: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> list[Path]:
    """Write ``doctor_label_issues.csv`` (every flagged sample of every report) and, when ``suspect_inputs`` has any,
    ``doctor_label_suspects.npz`` (``{source: (inputs, positions)}``, inputs ``(m, ...)`` in the order of
    ``positions`` ``(m,)``; a source whose samples differ in shape, or are not arrays of numbers or strings, is left
    out). Returns the paths written.

    ``reports``: ``analysis.labels.LabelReport`` objects or their ``to_dict()``.
    """
    folder = Path(summary_dir)
    written = [atomic_write_text(folder / LABEL_ISSUES_FILE, label_issues_csv(reports))]
    arrays: dict[str, np.ndarray] = {}
    for source, (inputs, positions) in (suspect_inputs or {}).items():
        positions = np.asarray(positions).astype(np.int64).ravel()
        try:
            inputs = np.asarray(inputs)
        except ValueError:  # samples of unequal shapes (numpy >= 1.24 refuses the ragged array)
            continue
        if inputs.dtype == object:  # ragged, or not numbers: no thumbnail to draw, the CSV names them
            continue
        if len(inputs) != len(positions):
            raise ValueError(f"label suspects of {source!r}: {len(inputs)} input(s) for {len(positions)} position(s)")
        if len(positions):
            arrays[_npz_key(source, "inputs")] = inputs
            arrays[_npz_key(source, "positions")] = positions
    if arrays:
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        written.append(atomic_write_bytes(folder / LABEL_SUSPECTS_FILE, buffer.getvalue()))
    return written


def label_issues_csv(reports: Iterable[Any]) -> str:
    """The CSV text: one row per flagged sample, the sources in the order given, each most suspect first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for report in map(_as_dict, reports):
        for s in report.get("flagged", []):
            writer.writerow([report["source"], int(s["position"]), int(s["given"]), int(s["likely"]),
                             f"{float(s['quality']):.6g}", s.get("sha1", "")]
                            + ["" if s.get(k) is None else f"{float(s[k]):.6g}" for k in TRAJECTORY_COLUMNS])
    return buffer.getvalue()


def read_label_issues(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The CSV's rows (typed), or [] when the run has none."""
    path = Path(run_dir) / LABEL_ISSUES_FILE
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as fh:
        return [{"source": row["source"], "position": int(row["position"]), "given": int(row["given"]),
                 "likely": int(row["likely"]), "quality": float(row["quality"]), "sha1": row["sha1"],
                 **{k: float(row[k]) if row.get(k) else None for k in TRAJECTORY_COLUMNS}}
                for row in csv.DictReader(fh)]


def read_label_suspects(run_dir: str | os.PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{source: (inputs, positions)}`` from the run's ``doctor_label_suspects.npz``; {} when it has none (or when
    the file cannot be read: thumbnails are an extra, never a reason for a report to fail)."""
    path = Path(run_dir) / LABEL_SUSPECTS_FILE
    if not path.is_file():
        return {}
    try:
        with np.load(path, allow_pickle=False) as data:
            names = set(data.files)
            return {key[: -len("__inputs")]: (data[key], data[key[: -len("inputs")] + "positions"])
                    for key in sorted(names) if key.endswith("__inputs")
                    and key[: -len("inputs")] + "positions" in names}
    except (OSError, ValueError, KeyError):
        return {}


def suspect_samples(suspects: Mapping[str, tuple[np.ndarray, np.ndarray]], source: str) -> dict[int, np.ndarray]:
    """``{position: input}`` of one source's stored suspects."""
    if source not in suspects:
        return {}
    inputs, positions = suspects[source]
    return {int(p): inputs[i] for i, p in enumerate(np.asarray(positions).ravel())}


# --- thumbnails ------------------------------------------------------------------------------------------------


def image_of(sample: Any) -> np.ndarray | None:
    """One sample as a picture: ``(H, W)`` gray or ``(H, W, 3)`` colour, floats in [0, 1] (min-max over the sample;
    non-finite values black), or None when it does not look like an image (a vector, a table row, strings)."""
    array = np.asarray(sample)
    if array.dtype.kind not in "biuf" or array.size == 0:
        return None
    while array.ndim > 3 and array.shape[0] == 1:  # (1, C, H, W): one sample kept with its batch axis
        array = array[0]
    if array.ndim == 3:
        first, last = array.shape[0] in CHANNELS, array.shape[-1] in CHANNELS
        if first and (not last or array.shape[0] < array.shape[-1]):
            array = np.moveaxis(array, 0, -1)  # CHW -> HWC
        elif not last:
            return None
        array = array[..., 0] if array.shape[-1] == 1 else array[..., :3]  # gray; RGB (alpha dropped)
    elif array.ndim != 2:
        return None
    if min(array.shape[:2]) < MIN_SIDE:
        return None
    values = array.astype(np.float64)
    finite = np.isfinite(values)
    if not finite.any():
        return np.zeros(values.shape)
    low, high = values[finite].min(), values[finite].max()
    scaled = (values - low) / (high - low) if high > low else np.zeros(values.shape)
    return np.where(finite, scaled, 0.0)


def fit_side(image: np.ndarray, side: int = THUMBNAIL_SIDE) -> np.ndarray:
    """Nearest-pixel scaling by a whole factor: an 8x8 digit grows to 96x96 with sharp pixels, a 512x512 photo
    shrinks by striding."""
    longest = max(image.shape[:2])
    if longest < side:
        factor = side // longest
        return np.repeat(np.repeat(image, factor, axis=0), factor, axis=1) if factor > 1 else image
    stride = -(-longest // side)
    return image[::stride, ::stride]


def thumbnail_png(sample: Any, side: int = THUMBNAIL_SIDE) -> bytes | None:
    """A PNG of one sample's input (see :func:`image_of`), or None for a non-image input."""
    image = image_of(sample)
    if image is None:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib import image as mpimg

    buffer = io.BytesIO()
    mpimg.imsave(buffer, fit_side(image, side), format="png", cmap="gray", vmin=0.0, vmax=1.0,
                 metadata={"Software": None})
    return buffer.getvalue()


def suspect_grid(samples: Sequence[Any], captions: Sequence[str], columns: int = 8,
                 cell_inches: float = 1.1, title: str = "") -> np.ndarray | None:
    """The samples' thumbnails in a grid, each captioned (``#position: given → likely``), under ``title``, as one
    ``(H, W, 3)`` uint8 picture (TensorBoard's image tab shows it as is); None when no sample is an image."""
    images = [(image_of(s), c) for s, c in zip(samples, captions)]
    images = [(i, c) for i, c in images if i is not None]
    if not images:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    columns = max(1, min(columns, len(images)))
    rows = -(-len(images) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(cell_inches * columns, (cell_inches + 0.25) * rows
                                                     + (0.35 if title else 0)), squeeze=False, dpi=100)
    try:
        for ax in axes.ravel():
            ax.axis("off")
        for ax, (image, caption) in zip(axes.ravel(), images):
            ax.imshow(image, cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(caption, fontsize=8)
        if title:
            fig.suptitle(title, fontsize=9, x=0.01, ha="left")
        fig.tight_layout(pad=0.3)
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    finally:
        plt.close(fig)
