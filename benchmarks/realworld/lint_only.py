"""mindcv models too heavy to train on 2 CPU cores: linted only, as shipped, with their recipe's optimizer and loss.

Each entry becomes a program named ``mindcv_<model>`` with the same interface as the
modules in ``programs/`` (``FAULT``, ``LIBRARY``, ``COVERS``, ``recipe()``, and
``sample_inputs()`` instead of ``DATA``); ``lint`` gets one small random batch.
This module imports nothing heavy, so ``scripts/bench_realworld.py`` can list the names.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


@dataclass(frozen=True)
class LintOnly:
    model: str
    """``mindcv.create_model`` name."""
    arch: str
    covers: tuple[str, ...]
    opt: str
    """The optimizer of the model's mindcv recipe."""
    lr: float
    weight_decay: float
    size: int
    """Side of the square input of lint's forward pass."""
    fast: bool = False


MODELS = {f"mindcv_{m.model}": m for m in (
    LintOnly("efficientnet_b0", "efficientnet", ("depthwise conv", "SE block", "swish", "BatchNorm everywhere",
                                                 "drop path", "inverted residual"), "rmsprop", 0.016, 1e-5, 64),
    LintOnly("squeezenet1_0", "squeezenet", ("Fire modules (1x1/3x3 concat)", "conv classifier registered twice",
                                             "Dropout"), "momentum", 0.01, 1e-4, 64, fast=True),
    LintOnly("resnet18", "resnet", ("residual", "BatchNorm everywhere", "max-pool stem"), "momentum", 0.1, 1e-4, 32),
    LintOnly("densenet121", "densenet", ("dense concatenation", "BatchNorm-ReLU-conv", "transition pooling"),
             "momentum", 0.1, 1e-4, 32),
    LintOnly("ghostnet_050", "ghostnet", ("ghost modules (cheap depthwise + concat)", "SE block", "depthwise conv",
                                          "BatchNorm everywhere"), "momentum", 0.1, 4e-5, 32),
    LintOnly("mnasnet_050", "mnasnet", ("depthwise conv", "inverted residual", "BatchNorm everywhere"), "momentum",
             0.1, 4e-5, 32),
    LintOnly("mixnet_s", "mixnet", ("mixed-kernel depthwise conv (grouped)", "SE block", "swish",
                                    "BatchNorm everywhere"), "momentum", 0.1, 1e-5, 32),
    LintOnly("repvgg_a0", "repvgg", ("parallel 3x3/1x1/identity branches", "BatchNorm everywhere"), "momentum", 0.1,
             1e-4, 32),
    LintOnly("mobilevit_xx_small", "mobilevit", ("transformer blocks inside a CNN", "LayerNorm", "depthwise conv",
                                                 "SiLU"), "adamw", 2e-3, 0.01, 64),
    LintOnly("poolformer_s12", "poolformer", ("pooling token mixer", "GroupNorm", "layer scale 1e-5"), "adamw", 1e-3,
             0.05, 64),
    LintOnly("edgenext_xx_small", "edgenext", ("cross-covariance attention", "LayerNorm", "depthwise conv",
                                               "layer scale"), "adamw", 6e-3, 0.05, 64),
    LintOnly("swin_tiny", "swin_transformer", ("windowed attention", "relative position bias", "LayerNorm",
                                               "drop path"), "adamw", 1e-3, 0.05, 224),
)}


def program(name: str) -> Any:
    """The lint-only entry ``name`` as a program object (imports MindSpore and mindcv)."""
    import mindcv

    from benchmarks.faults import kit
    from benchmarks.realworld import corpus

    spec = MODELS[name]

    def recipe() -> corpus.Recipe:
        net = mindcv.create_model(spec.model, num_classes=10, pretrained=False)
        return corpus.mindcv_recipe(net, 100, 10, opt=spec.opt, lr=spec.lr, weight_decay=spec.weight_decay)

    return SimpleNamespace(
        FAULT=kit.Fault(f"healthy: mindcv {spec.model} as shipped", expect=(), arch=spec.arch,
                        data="images (lint sample)", category="healthy", fast=spec.fast),
        LIBRARY="mindcv 0.3.0", COVERS=spec.covers, recipe=recipe,
        sample_inputs=lambda: corpus.image_batch(2, 3, spec.size, 10))
