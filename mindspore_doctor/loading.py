"""The ``pkg.module:attr`` arguments of the commands that run the user's code (``msdoctor sanity``, ``tune``)."""
from __future__ import annotations

from typing import Any


def load_attr(spec: str, what: str) -> Any:
    """The object ``spec`` (``pkg.module:attr``, the attribute dotted or not) names; ``LoadError`` naming the
    argument ``what`` when it is malformed or cannot be imported."""
    from mindspore_doctor.static.loader import LoadError, import_module, resolve_attr

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise LoadError(f"bad {what} {spec!r}; expected pkg.module:attr")
    return resolve_attr(import_module(module_name), attr, spec)
