"""check_data on real pipelines (MindRecord, generators, maps, unbatched, NHWC) and on bad input."""
from __future__ import annotations

import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import nn
from mindspore.mindrecord import FileWriter

from mindspore_doctor.config import DoctorConfig
from mindspore_doctor import check_data

rng = np.random.default_rng(3)


def _codes_only(report, *codes):
    return report.codes() <= set(codes)


def test_mindrecord_with_map_and_batch(tmp_path):
    path = str(tmp_path / "digits.mindrecord")
    writer = FileWriter(path, shard_num=1)
    writer.add_schema({"image": {"type": "float32", "shape": [1, 8, 8]}, "label": {"type": "int32"}}, "digits")
    images = (rng.random((300, 1, 8, 8)) * 255).astype(np.float32)
    writer.write_raw_data([{"image": images[i], "label": int(i % 3)} for i in range(300)])
    writer.commit()
    def dataset():
        return ds.MindDataset(path, columns_list=["image", "label"], shuffle=True)

    raw = check_data(dataset().batch(50))
    assert raw.codes() == {"MSD304"}, str(raw)
    assert "channel 0" in raw.by_code("MSD304")[0].message
    rescaled = check_data(dataset().map(lambda x: (x / 255.0 - 0.5) / 0.29, "image").batch(50))
    assert rescaled.findings == [], str(rescaled)
    assert rescaled.meta["data"]["train"]["total_samples"] == 300


def test_nhwc_images_use_channels_and_the_network_backbone():
    x = rng.normal(size=(200, 8, 8, 3)).astype(np.float32)
    x[..., 2] = 7.0  # one constant channel
    y = (np.arange(200) % 2).astype(np.int32)
    backbone = nn.SequentialCell([nn.Flatten(), nn.Dense(192, 2)])
    report = check_data(ds.NumpySlicesDataset({"image": x, "label": y}, shuffle=True).batch(20), network=nn.WithLossCell(
        backbone, nn.SoftmaxCrossEntropyWithLogits(sparse=True)))
    assert report.meta["data"]["train"]["columns"] == {"image": "image HWC"}
    assert report.codes() == {"MSD310"}, str(report)  # constant: not also "not normalised"
    assert "`image` channel 2 is constant" in report.by_code("MSD310")[0].message


def test_token_sequences_and_column_overrides():
    tokens = rng.integers(0, 50, size=(300, 12)).astype(np.int32)
    mask = np.ones((300, 12), dtype=np.float32)
    target = rng.integers(0, 2, 300).astype(np.int32)
    dataset = ds.NumpySlicesDataset({"ids": tokens, "target": target, "mask": mask}, shuffle=True).batch(30)
    report = check_data(dataset, input_columns=("ids",), label_column="target")
    assert report.meta["data"]["inputs"] == ["ids"] and report.meta["data"]["label"] == "target"
    assert report.meta["data"]["train"]["columns"] == {"ids": "tokens F"}
    assert report.findings == [], str(report)
    bad = check_data(dataset, label_column="nope")
    assert bad.codes() == {"MSD002"} and "'nope'" in bad.findings[0].message


def test_config_object_selection_and_sample_bounds():
    x = rng.normal(size=(1000, 4)).astype(np.float32) * 100
    dataset = ds.NumpySlicesDataset({"x": x, "label": np.arange(1000) % 2}, shuffle=True).batch(50)
    report = check_data(dataset, config=DoctorConfig(data_max_samples=100, select=("MSD305",)))
    assert report.findings == [] and report.meta["data"]["train"]["samples"] == 100
    assert report.meta["data"]["train"]["total_samples"] == 1000
    timed = check_data(dataset, data_max_seconds=0.0)
    assert timed.meta["data"]["train"]["samples"] == 50 and timed.meta["data"]["train"]["truncated_by_time"]
    assert "MSD304" in timed.codes()


def test_forward_pass_restores_mixed_train_eval_modes_and_skips_when_net_rejects_batch():
    net = nn.SequentialCell([nn.Dense(4, 8), nn.BatchNorm1d(8), nn.Dense(8, 3)])
    net.set_train(True)
    net[1].set_train(False)  # a frozen BatchNorm inside a training network
    before = {name: cell.training for name, cell in net.cells_and_names()}
    dataset = ds.NumpySlicesDataset({"x": rng.normal(size=(300, 4)).astype(np.float32),
                                     "label": rng.integers(0, 5, 300).astype(np.int32)}, shuffle=True).batch(30)
    report = check_data(dataset, network=net)
    assert {name: cell.training for name, cell in net.cells_and_names()} == before
    assert report.by_code("MSD306")[0].evidence["num_outputs"] == 3
    wrong = nn.SequentialCell([nn.Dense(5, 3)])  # cannot take 4 features
    skipped = check_data(dataset, network=wrong)
    assert "MSD306" not in skipped.codes()
    assert any("forward pass" in f.message and "MSD306" in f.message for f in skipped.by_code("MSD002")), str(skipped)


def _rows(n):
    for i in range(n):
        yield rng.normal(size=3).astype(np.float32), np.int32(i % 2)


class _OneShot:
    """An iterator object: it can be read once only."""

    def __init__(self, n):
        self.rows = _rows(n)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.rows)


def _raises_after_three():
    yield from _rows(3)
    raise ValueError("disk on fire")


def _ragged():
    for i in range(40):
        yield np.ones(1 + i % 3, np.float32), np.int32(i % 2)


def _node_with_two_consumers():
    source = ds.NumpySlicesDataset({"x": rng.normal(size=(40, 3)).astype(np.float32), "label": np.arange(40) % 2})
    source.batch(4)  # a second consumer of the same node: MindSpore refuses to iterate either
    return source.map(lambda v: v * 2, "x")


BAD = {
    "empty": (lambda: ds.GeneratorDataset(lambda: iter([]), ["x", "label"]), "yielded no samples"),
    "raises": (lambda: ds.GeneratorDataset(_raises_after_three, ["x", "label"]).batch(2), "ValueError: disk on fire"),
    "one-shot": (lambda: ds.GeneratorDataset(_OneShot(40), ["x", "label"]), "one-shot Python iterator"),
    "generator-object": (lambda: ds.GeneratorDataset(_rows(40), ["x", "label"]), "one-shot Python iterator"),
    "strings": (lambda: ds.NumpySlicesDataset({"x": rng.normal(size=(40, 3)).astype(np.float32),
                                               "name": np.array([f"s{i}" for i in range(40)]),
                                               "label": np.arange(40) % 2}), "column `name` holds"),
    "ragged": (lambda: ds.GeneratorDataset(_ragged, ["x", "label"]), "ragged samples"),
    "not-a-pipeline": (lambda: rng.normal(size=(40, 3)), "not a mindspore.dataset pipeline"),
    "not-a-tree": (_node_with_two_consumers, "not a tree"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_check_skipped_not_an_exception(case):
    make, why = BAD[case]
    dataset = make()
    report = check_data(dataset, make(), nn.Dense(3, 2))
    skipped = report.by_code("MSD002")
    assert skipped and any(why in f.message for f in skipped), str(report)
    assert not report.by_code("MSD001")
    if case in ("one-shot", "generator-object"):  # training still gets every sample
        assert sum(1 for _ in dataset.create_tuple_iterator(num_epochs=1)) == 40
