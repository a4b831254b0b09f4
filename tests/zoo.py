"""A zoo of clean, real architectures written the way a competent MindSpore user writes them.

Every builder returns ``(net, loss_fn, optimizer, sample_inputs)`` with small
inputs; ``sample_inputs`` is ``(inputs..., label)`` as ``lint()`` expects.
Linting any of them must give zero warnings or errors: this is the project's
false-positive guard (tests/test_zoo.py). ``build_resnet50`` serves the lint
benchmark (scripts/bench_lint.py).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import mindspore as ms
from mindspore import nn, ops

Built = tuple[nn.Cell, nn.Cell, nn.Optimizer, tuple]

_BATCH = 2


def _images(channels: int, size: int) -> ms.Tensor:
    rng = np.random.default_rng(0)
    return ms.Tensor(rng.standard_normal((_BATCH, channels, size, size)).astype(np.float32))


def _class_labels(num_classes: int) -> ms.Tensor:
    return ms.Tensor(np.arange(_BATCH, dtype=np.int32) % num_classes)


def _classifier_setup(net: nn.Cell, inputs: ms.Tensor, num_classes: int, optimizer: str = "momentum") -> Built:
    """Sparse softmax cross-entropy on logits, with Momentum(0.01, 0.9) or Adam(1e-3)."""
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    if optimizer == "adam":
        opt = nn.Adam(net.trainable_params(), learning_rate=1e-3)
    else:
        opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    return net, loss_fn, opt, (inputs, _class_labels(num_classes))


# --- LeNet-5 -------------------------------------------------------------------------


class LeNet5(nn.Cell):
    """The MindSpore model-zoo LeNet-5 for 1x32x32 MNIST."""

    def __init__(self, num_classes: int = 10, num_channel: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.fc1 = nn.Dense(16 * 5 * 5, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, num_classes)
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()

    def construct(self, x):
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


def build_lenet5() -> Built:
    return _classifier_setup(LeNet5(), _images(1, 32), 10)


# --- ResNet (BasicBlock for ResNet-18, Bottleneck for ResNet-50) ------------------------


def _conv_bn(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1) -> nn.SequentialCell:
    return nn.SequentialCell(
        nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, pad_mode="same"),
        nn.BatchNorm2d(out_channels),
    )


class BasicBlock(nn.Cell):
    expansion = 1

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride=stride, pad_mode="same")
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, pad_mode="same")
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = _conv_bn(in_channels, channels, 1, stride)

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class Bottleneck(nn.Cell):
    expansion = 4

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        out_channels = channels * self.expansion
        self.conv1 = nn.Conv2d(in_channels, channels, 1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=stride, pad_mode="same")
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv3 = nn.Conv2d(channels, out_channels, 1)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = _conv_bn(in_channels, out_channels, 1, stride)

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Cell):
    """ResNet with an ImageNet stem (7x7/2 conv + max pool) or a CIFAR stem (3x3 conv)."""

    def __init__(self, block, layers: list[int], num_classes: int = 10, cifar_stem: bool = False):
        super().__init__()
        if cifar_stem:
            self.stem = nn.SequentialCell(nn.Conv2d(3, 64, 3, pad_mode="same"), nn.BatchNorm2d(64), nn.ReLU())
        else:
            self.stem = nn.SequentialCell(
                nn.Conv2d(3, 64, 7, stride=2, pad_mode="same"),
                nn.BatchNorm2d(64),
                nn.ReLU(),
                nn.MaxPool2d(kernel_size=3, stride=2, pad_mode="same"),
            )
        in_channels = 64
        stages = []
        for index, (channels, depth) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for i in range(depth):
                stride = 2 if index > 0 and i == 0 else 1
                blocks.append(block(in_channels, channels, stride))
                in_channels = channels * block.expansion
            stages.append(nn.SequentialCell(blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.fc = nn.Dense(in_channels, num_classes)

    def construct(self, x):
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = ops.mean(x, (2, 3))
        return self.fc(x)


def build_resnet18() -> Built:
    return _classifier_setup(ResNet(BasicBlock, [2, 2, 2, 2], cifar_stem=True), _images(3, 32), 10)


def build_resnet50() -> Built:
    """ResNet-50 (Bottleneck, [3, 4, 6, 3], ImageNet stem); small inputs suffice for lint."""
    return _classifier_setup(ResNet(Bottleneck, [3, 4, 6, 3], num_classes=1000), _images(3, 64), 1000)


# --- sequence models ---------------------------------------------------------------------


class LSTMClassifier(nn.Cell):
    """Token ids -> embedding -> LSTM -> last hidden state -> class logits."""

    def __init__(self, vocab_size: int = 100, embed_dim: int = 16, hidden_size: int = 32, num_classes: int = 4):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers=1, batch_first=True)
        self.fc = nn.Dense(hidden_size, num_classes)

    def construct(self, token_ids):
        x = self.embedding(token_ids)
        out, _ = self.lstm(x)
        return self.fc(out[:, -1, :])


class TransformerClassifier(nn.Cell):
    """Token ids -> embedding -> TransformerEncoder -> mean pool -> class logits."""

    def __init__(self, vocab_size: int = 100, d_model: int = 32, num_classes: int = 4):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2)
        self.fc = nn.Dense(d_model, num_classes)

    def construct(self, token_ids):
        x = self.encoder(self.embedding(token_ids))
        return self.fc(x.mean(axis=1))


def _token_ids(vocab_size: int = 100, length: int = 8) -> ms.Tensor:
    rng = np.random.default_rng(0)
    return ms.Tensor(rng.integers(0, vocab_size, (_BATCH, length)).astype(np.int32))


def build_lstm_classifier() -> Built:
    return _classifier_setup(LSTMClassifier(), _token_ids(), 4, optimizer="adam")


def build_transformer_classifier() -> Built:
    return _classifier_setup(TransformerClassifier(), _token_ids(), 4, optimizer="adam")


# --- MobileNet-style depthwise-separable net ----------------------------------------------


def _depthwise_separable(in_channels: int, out_channels: int, stride: int) -> nn.SequentialCell:
    return nn.SequentialCell(
        nn.Conv2d(in_channels, in_channels, 3, stride=stride, pad_mode="same", group=in_channels),
        nn.BatchNorm2d(in_channels),
        nn.ReLU6(),
        nn.Conv2d(in_channels, out_channels, 1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU6(),
    )


class MobileNetLike(nn.Cell):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.SequentialCell(nn.Conv2d(3, 16, 3, stride=2, pad_mode="same"), nn.BatchNorm2d(16), nn.ReLU6())
        self.features = nn.SequentialCell(
            _depthwise_separable(16, 32, 1),
            _depthwise_separable(32, 64, 2),
            _depthwise_separable(64, 64, 1),
        )
        self.classifier = nn.Dense(64, num_classes)

    def construct(self, x):
        x = self.features(self.stem(x))
        return self.classifier(ops.mean(x, (2, 3)))


def build_mobilenet_like() -> Built:
    return _classifier_setup(MobileNetLike(), _images(3, 32), 10)


# --- plain MLP (regression) -------------------------------------------------------------------


class MLP(nn.Cell):
    def __init__(self, in_features: int = 20, hidden: int = 64):
        super().__init__()
        self.body = nn.SequentialCell(
            nn.Dense(in_features, hidden), nn.ReLU(), nn.Dense(hidden, hidden), nn.ReLU(), nn.Dense(hidden, 1)
        )

    def construct(self, x):
        return self.body(x)


def build_mlp() -> Built:
    """Regression MLP: (N, 20) -> (N, 1), MSELoss against (N, 1) targets, Adam 1e-3."""
    net = MLP()
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((_BATCH, 20)).astype(np.float32))
    y = ms.Tensor(rng.standard_normal((_BATCH, 1)).astype(np.float32))
    return net, nn.MSELoss(), nn.Adam(net.trainable_params(), learning_rate=1e-3), (x, y)


ZOO: dict[str, Callable[[], Built]] = {
    "lenet5": build_lenet5,
    "resnet18": build_resnet18,
    "lstm_classifier": build_lstm_classifier,
    "transformer_classifier": build_transformer_classifier,
    "mobilenet_like": build_mobilenet_like,
    "mlp": build_mlp,
}
