"""What belongs to MindSpore itself, named once (no MindSpore import): its classes are trusted, known by name in
the checks' tables and probed without reading their source.

The package is the first dotted part of a module name: ``mindspore.nn.layer.activation`` is MindSpore's,
``mindspore_doctor.probes`` and ``mindspore_gs`` are not (``startswith("mindspore")`` would take them).
"""
from __future__ import annotations

from typing import Iterator


def is_mindspore_module(name: object) -> bool:
    """``mindspore`` or one of its submodules, by dotted name (a class's ``__module__``, an ``import`` statement's
    module)."""
    return isinstance(name, str) and name.partition(".")[0] == "mindspore"


def is_mindspore_class(cls: type) -> bool:
    """A class MindSpore defines (``nn.ReLU``, ``mint.nn.Linear``, a primitive); a user's subclass of one is not."""
    return is_mindspore_module(getattr(cls, "__module__", None))


def mindspore_classes(cls: type) -> Iterator[type]:
    """``cls`` and its bases that MindSpore defines, nearest first: a user's ``class MyCE(nn.CrossEntropyLoss)``
    gives ``CrossEntropyLoss``, then its MindSpore bases."""
    return (k for k in cls.__mro__ if is_mindspore_class(k))
