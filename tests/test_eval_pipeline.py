"""MSD312 (random augmentation in the eval pipeline) and MSD313 (eval preprocessing that differs from training),
on real mindspore.dataset pipelines: NumpySlicesDataset and vision ops over small arrays."""
from __future__ import annotations

import random

import cv2
import mindspore as ms
import mindspore.dataset as mds
import mindspore.dataset.transforms as T
import mindspore.dataset.vision as V
import numpy as np
import pytest

from mindspore_doctor import check_data
from mindspore_doctor.data.pipeline import measure_pipeline
from mindspore_doctor.data.signals import DataSignals, DatasetSignals, PipelineOp, PipelineSignals, Replay
from mindspore_doctor.config import DoctorConfig
from mindspore_doctor.rules.data.eval_pipeline import eval_random_augmentation

CODES = ["MSD312", "MSD313", "MSD001", "MSD002"]
X = np.random.default_rng(0).integers(0, 256, (48, 40, 36, 3)).astype(np.uint8)
Y = (np.arange(48) % 4).astype(np.int32)
MEAN_255 = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD_255 = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def _pipeline(ops, shuffle=False, x=X, batch=8):
    ds = mds.NumpySlicesDataset({"image": x, "label": Y[:len(x)]}, shuffle=shuffle)
    if ops:
        ds = ds.map(ops, input_columns="image")
    return ds.batch(batch)


def _train():
    return _pipeline([V.RandomResizedCrop(32), V.RandomHorizontalFlip(), V.Normalize(MEAN_255, STD_255), V.HWC2CHW()],
                     shuffle=True)


def _eval(*ops, shuffle=False):
    return _pipeline(list(ops), shuffle=shuffle)


STANDARD_EVAL = (V.Resize(36), V.CenterCrop(32), V.Normalize(MEAN_255, STD_255), V.HWC2CHW())


def _findings(train, evaluate, code=None):
    report = check_data(train, evaluate, select=CODES)
    assert not [f for f in report.findings if f.code in ("MSD001", "MSD002")], report.findings
    return [f for f in report.findings if code is None or f.code == code]


@pytest.fixture(autouse=True)
def _unseeded_afterwards():
    yield
    mds.config.set_seed(np.random.randint(1 << 30))  # the tests that seed the pipeline leave no fixed seed behind


# --- MSD312 -----------------------------------------------------------------------------------------------


def test_random_crop_and_flip_in_eval_is_reported_with_op_and_stage():
    found = _findings(_train(), _eval(V.RandomCrop(32), V.RandomHorizontalFlip(), V.Normalize(MEAN_255, STD_255),
                                      V.HWC2CHW()), "MSD312")
    assert len(found) == 1
    f = found[0]
    assert "RandomCrop and RandomHorizontalFlip in map 1 of 1 (input_columns=['image'])" in f.message
    assert "fed 16 times" in f.message
    assert f.location == {"dataset": "eval", "op": "RandomCrop", "stage": "map 1 of 1 (input_columns=['image'])",
                          "column": "image"}
    assert f.evidence["confirmed_stages"] and f.evidence["replays"][0]["distinct"] > 1


def test_a_seeded_pipeline_is_still_confirmed():
    """With ``set_seed``, two fresh iterators yield the same first row; the replay's successive draws do not."""
    mds.config.set_seed(7)
    found = _findings(_train(), _eval(V.Resize(32), V.RandomRotation(30), V.HWC2CHW()), "MSD312")
    assert len(found) == 1 and "RandomRotation" in found[0].message


def test_standard_imagenet_recipe_is_quiet():
    assert _findings(_train(), _eval(*STANDARD_EVAL)) == []


def test_a_shuffled_eval_set_without_augmentation_is_quiet():
    assert _findings(_train(), _eval(*STANDARD_EVAL, shuffle=True)) == []


def test_random_apply_with_probability_zero_is_quiet():
    """The op is there, but the replay shows one output: not reported."""
    ops = (V.Resize(36), V.CenterCrop(32), T.RandomApply([V.RandomRotation(20)], prob=0.0),
           V.RandomHorizontalFlip(prob=0.0), V.Normalize(MEAN_255, STD_255), V.HWC2CHW())
    assert _findings(_train(), _eval(*ops)) == []


def test_a_random_op_inside_compose_is_found():
    ops = (T.Compose([V.Resize(36), V.RandomColorAdjust(brightness=0.4)]), V.CenterCrop(32),
           V.Normalize(MEAN_255, STD_255), V.HWC2CHW())
    found = _findings(_train(), _eval(*ops), "MSD312")
    assert len(found) == 1 and "RandomColorAdjust (in Compose())" in found[0].message


def test_a_deterministic_python_function_is_not_judged():
    def to_float(image):
        return image.astype(np.float32)

    assert _findings(_train(), _eval(*STANDARD_EVAL[:2], to_float, *STANDARD_EVAL[2:]), "MSD312") == []


def test_a_random_python_augmentation_is_reported_once_replayed_and_the_global_random_state_is_kept():
    class RandomNoise:
        def __call__(self, image):
            return (image + np.random.normal(0, 5, image.shape)).astype(np.float32)

    evaluate = _eval(*STANDARD_EVAL, RandomNoise())
    found = _findings(_train(), evaluate, "MSD312")
    assert len(found) == 1 and "RandomNoise in map 1 of 1" in found[0].message
    # the replay itself (16 draws of the user's np.random) leaves numpy's and Python's global states as they were
    np.random.seed(3)
    random.seed(3)
    before = np.random.get_state()[1].copy(), random.getstate()
    signals = measure_pipeline(evaluate, "eval", None, True, replay=True)
    assert signals.replays[0].distinct > 1
    assert np.array_equal(np.random.get_state()[1], before[0]) and random.getstate() == before[1]


def test_mixup_batch_after_batching_is_found():
    onehot = np.eye(4, dtype=np.float32)[Y]
    ds = mds.NumpySlicesDataset({"image": X, "label": onehot}, shuffle=False)
    ds = ds.map([V.Resize(32), V.HWC2CHW()], "image").batch(8)
    ds = ds.map(V.MixUpBatch(alpha=1.0), input_columns=["image", "label"])
    train = mds.NumpySlicesDataset({"image": X, "label": onehot}, shuffle=True)
    train = train.map([V.Resize(32), V.HWC2CHW()], "image").batch(8)
    found = _findings(train, ds, "MSD312")
    assert len(found) == 1 and "MixUpBatch in map 2 of 2" in found[0].message


def test_judge_on_hand_built_signals_reports_an_op_it_could_not_replay():
    op = PipelineOp("RandomCrop", "map 1 of 1 (input_columns=['image'])", ("image",), "size", "RandomCrop(size=(8, 8))",
                    random=True)
    signals = DataSignals(DatasetSignals("train", 10), DatasetSignals("eval", 10))
    signals.pipelines["eval"] = PipelineSignals("eval", [op], [Replay(op.stage, 0, why="RuntimeError: x")])
    found = eval_random_augmentation(signals, DoctorConfig())
    assert len(found) == 1 and "not replayed: RuntimeError: x" in found[0].message
    signals.pipelines["eval"].replays = [Replay(op.stage, 16, 1)]
    assert eval_random_augmentation(signals, DoctorConfig()) == []


# --- MSD313 -----------------------------------------------------------------------------------------------


def test_different_normalize_constants_name_both_values():
    found = _findings(_train(), _eval(V.Resize(36), V.CenterCrop(32), V.Rescale(1 / 255, 0),
                                      V.Normalize([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]), V.HWC2CHW()), "MSD313")
    assert len(found) == 1
    f = found[0]
    assert f.location == {"dataset": "eval", "column": "image", "aspect": "normalisation"}
    assert "train Normalize(mean=(123.7, 116.3, 103.5), std=(58.4, 57.12, 57.38))" in f.message
    assert "eval Rescale(rescale=0.003922, shift=0) + Normalize(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))" in f.message


def test_the_same_normalisation_written_on_the_0_1_scale_is_quiet():
    ops = (V.Resize(36), V.CenterCrop(32), V.Rescale(1 / 255, 0),
           V.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]), V.HWC2CHW())
    assert _findings(_train(), _eval(*ops)) == []


def test_eval_data_already_normalised_in_numpy_is_quiet():
    """The eval chain lacks the Normalize, but its data arrive normalised: the measured channels refute it."""
    x = X.astype(np.float32)
    normalised = ((x - np.array(MEAN_255, np.float32)) / np.array(STD_255, np.float32)).astype(np.float32)
    evaluate = _pipeline([V.Resize(36), V.CenterCrop(32), V.HWC2CHW()], x=normalised)
    assert _findings(_train(), evaluate, "MSD313") == []


def test_hwc2chw_in_train_only():
    found = _findings(_train(), _eval(*STANDARD_EVAL[:3]), "MSD313")
    assert len(found) == 1 and found[0].location["aspect"] == "layout"
    assert "HWC (32, 32, 3)" in found[0].message and "CHW (3, 32, 32)" in found[0].message
    assert "train only" in found[0].message


def test_resize_without_center_crop_is_a_different_final_size():
    found = _findings(_train(), _eval(V.Resize(36), V.Normalize(MEAN_255, STD_255), V.HWC2CHW()), "MSD313")
    assert len(found) == 1 and found[0].location["aspect"] == "size"
    assert "Eval `image` ends at 40x36 (Resize(size=36)) but train `image` at 32x32" in found[0].message


def test_an_eval_set_at_its_native_size_is_not_judged():
    train = _pipeline([V.RandomCrop(24), V.Normalize(MEAN_255, STD_255), V.HWC2CHW()], shuffle=True)
    assert _findings(train, _eval(V.Normalize(MEAN_255, STD_255), V.HWC2CHW()), "MSD313") == []


def test_a_different_dtype_cast():
    train = _pipeline([V.Resize((32, 32)), V.Rescale(1 / 255, 0), V.HWC2CHW()], shuffle=True)
    evaluate = _eval(V.Resize((32, 32)), V.Rescale(1 / 255, 0), V.HWC2CHW(), T.TypeCast(ms.float16))
    found = _findings(train, evaluate, "MSD313")
    assert [f.location["aspect"] for f in found] == ["dtype"]
    assert "float16" in found[0].message and "float32" in found[0].message and "TypeCast" in found[0].message


def test_a_different_python_function_makes_the_normalisation_unknown():
    def scale(image):
        return image.astype(np.float32) / 127.5 - 1

    evaluate = _eval(V.Resize(36), V.CenterCrop(32), scale, V.HWC2CHW())
    assert _findings(_train(), evaluate, "MSD313") == []


def _jpegs(n, seed):
    rng = np.random.default_rng(seed)
    images = [cv2.imencode(".jpg", rng.integers(0, 256, (60 + 4 * (i % 3), 52, 3)).astype(np.uint8))[1]
              for i in range(n)]
    return images, (np.arange(n) % 4).astype(np.int32)


def _jpeg_dataset(images, labels, shuffle):
    def rows():
        for image, label in zip(images, labels):
            yield image, label

    return mds.GeneratorDataset(rows, column_names=["image", "label"], shuffle=shuffle)


def test_mindcv_imagenet_recipe_is_quiet():
    """mindcv's own train/eval transforms (RandomCropDecodeResize, flip, colour jitter, RandomErasing against
    Decode, Resize, CenterCrop) on JPEG bytes: the library's standard recipe, no finding."""
    from mindcv.data import create_transforms

    images, labels = _jpegs(24, 0)
    train = _jpeg_dataset(images, labels, True).map(
        create_transforms("imagenet", image_resize=32, is_training=True, color_jitter=0.4, re_prob=0.25),
        "image").batch(8)
    evaluate = _jpeg_dataset(images, labels, False).map(
        create_transforms("imagenet", image_resize=32, is_training=False), "image").batch(8)
    assert _findings(train, evaluate) == []


def test_mindcv_training_transforms_used_for_eval_are_reported():
    from mindcv.data import create_transforms

    images, labels = _jpegs(24, 0)
    train = _jpeg_dataset(images, labels, True).map(
        create_transforms("imagenet", image_resize=32, is_training=True), "image").batch(8)
    evaluate = _jpeg_dataset(images, labels, False).map(
        create_transforms("imagenet", image_resize=32, is_training=True), "image").batch(8)
    found = _findings(train, evaluate)
    assert [f.code for f in found] == ["MSD312"]
    assert "RandomCropDecodeResize and RandomHorizontalFlip" in found[0].message


@pytest.mark.parametrize("name", ["cifar10", "mnist"])
def test_mindcv_create_loader_train_and_eval_are_quiet(name):
    """mindcv's create_loader as its train.py calls it: the training loader with mixup/cutmix (a Python ``Mixup`` after
    batching, train only) and the dataset's own transforms, the eval loader without."""
    from mindcv.data import create_loader, create_transforms

    x = X[:, :32, :32] if name == "cifar10" else X[:, :28, :28, :1]

    def loader(training):
        source = mds.NumpySlicesDataset({"image": x, "label": Y}, shuffle=training)
        return create_loader(source, batch_size=8, drop_remainder=True, is_training=training,
                             mixup=0.2 if training else 0.0, cutmix=1.0 if training else 0.0, cutmix_prob=1.0,
                             num_classes=4, transform=create_transforms(name, image_resize=32, is_training=training),
                             num_parallel_workers=1)

    assert _findings(loader(True), loader(False)) == []


def test_mindcv_mixup_left_in_the_eval_loader_is_reported():
    from mindcv.data import create_loader, create_transforms

    def loader(training):
        source = mds.NumpySlicesDataset({"image": X[:, :32, :32], "label": Y}, shuffle=training)
        return create_loader(source, batch_size=8, drop_remainder=True, is_training=True, mixup=0.2, cutmix=1.0,
                             cutmix_prob=1.0, num_classes=4,
                             transform=create_transforms("cifar10", image_resize=32, is_training=training),
                             num_parallel_workers=1)

    found = _findings(loader(True), loader(False))
    assert [f.code for f in found] == ["MSD312"] and "Mixup in map 3 of 3" in found[0].message


def test_a_shuffled_eval_set_with_augmentation_is_still_confirmed():
    found = _findings(_train(), _eval(V.RandomResizedCrop(32), *STANDARD_EVAL[2:], shuffle=True), "MSD312")
    assert len(found) == 1 and found[0].evidence["confirmed_stages"]


def test_the_diagnosis_names_the_eval_pipeline():
    from mindspore_doctor.diagnosis.engine import diagnose

    report = check_data(_train(), _eval(V.RandomCrop(32), *STANDARD_EVAL[2:]), select=CODES)
    assert diagnose(report.findings).cause_ids()[0] == "eval-random-augmentation"
    report = check_data(_train(), _eval(V.Resize(36), V.CenterCrop(32), V.HWC2CHW()), select=CODES)
    assert diagnose(report.findings).cause_ids()[0] == "train-eval-mismatch"


def test_a_random_per_batch_map_is_replayed_on_the_same_batch():
    def mixup_batch(images, labels, info):  # per_batch_map gets each column as a list of samples
        images, lam = np.stack(images), np.random.beta(0.4, 0.4)
        order = np.random.permutation(len(images))
        return list((lam * images + (1 - lam) * images[order]).astype(np.float32)), labels

    def pipeline(per_batch_map):
        ds = mds.NumpySlicesDataset({"image": X, "label": Y}, shuffle=False)
        ds = ds.map([V.Resize(32), V.Rescale(1 / 255, 0), V.HWC2CHW()], "image")
        return ds.batch(8, per_batch_map=per_batch_map, input_columns=["image", "label"])

    def identity_batch(images, labels, info):
        return images, labels

    found = _findings(pipeline(identity_batch), pipeline(mixup_batch), "MSD312")
    assert len(found) == 1 and "mixup_batch in batch (per_batch_map" in found[0].message
    assert found[0].evidence["replays"][0]["reads"] == 16
    assert _findings(pipeline(identity_batch), pipeline(identity_batch)) == []


def test_reading_and_replaying_the_pipelines_changes_no_training_batch_or_weight():
    """Seeded training on an augmented pipeline, plain and after check_data replayed the random eval stage: the same
    batches, bitwise, and the same weights."""
    from mindspore import nn
    from mindspore.train import Callback, Model

    class Recorder(Callback):
        def __init__(self):
            self.batches = []

        def on_train_step_end(self, run_context):
            self.batches.append([t.asnumpy().copy() for t in run_context.original_args().train_dataset_element])

    def augmented(shuffle):
        return _pipeline([V.RandomCrop(32), V.RandomHorizontalFlip(), V.Rescale(1 / 255, 0), V.HWC2CHW()],
                         shuffle=shuffle)

    def run(check):
        ms.set_seed(0)
        mds.config.set_seed(0)
        train = augmented(True)
        if check:
            found = check_data(train, augmented(False), select=["MSD312"]).findings
            assert [f.code for f in found] == ["MSD312"]
        net = nn.SequentialCell([nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Dense(4 * 32 * 32, 4)])
        model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                      nn.Momentum(net.trainable_params(), 0.01, 0.9))
        recorder = Recorder()
        model.train(1, train, callbacks=[recorder], dataset_sink_mode=False)
        return recorder.batches, {p.name: p.asnumpy().copy() for p in net.get_parameters()}

    plain_batches, plain_weights = run(False)
    checked_batches, checked_weights = run(True)
    assert len(plain_batches) == len(checked_batches) == len(X) // 8
    for plain, checked in zip(plain_batches, checked_batches):
        for a, b in zip(plain, checked):
            np.testing.assert_array_equal(a, b)
    for name, value in plain_weights.items():
        np.testing.assert_array_equal(value, checked_weights[name], err_msg=name)
