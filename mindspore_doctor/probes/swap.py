"""Giving one cell a probed class, in place, without changing what it computes; and taking it back.

Why not a plain subclass: MindSpore compiles a cell's ``construct`` from ``type(cell)`` and reads a
zero-argument ``super()`` inside it as ``super(type(self), self)`` (``analyze_super`` in its graph parser),
while Python reads it as ``super(<the class that defines the method>, self)``. Under a probed *subclass*,
the user's ``return super().construct(grads)`` lands on the user's own ``construct`` again, and the first
compiled step raises "Exceed function call depth limit 1000".

So the probed class is a *sibling* by default: a copy of the user's class under the same name, module and
bases. ``type(self)``'s parent is then the user's parent, as MindSpore expects, and the copied methods that use
``super()`` get their ``__class__`` cell pointed at the copy, as Python expects. The probed ``construct`` calls
the user's ``construct`` as a method of the cell (``self._msd_inner(...)``): called as a plain function
(``base.construct(self, ...)``) MindSpore 2.10 compiles ``self`` as an argument and drops the cell's own
state writes (Adam's ``beta1_power``).

The one thing a sibling cannot do is a named ``super(UserClass, self)`` run by Python (an eager PyNative
call: the copy is no ``UserClass``); a *subclass* with a new name handles that form in both readings. A class
using both forms, in a cell that may run eagerly, is not swapped: the caller skips its probes (MSD002).
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

import mindspore as ms

from mindspore_doctor.library import is_mindspore_class

PROBED_MARK = "_msd_base"
"""Class attribute of every probed class: the user's class it stands in for."""


class CannotProbe(Exception):
    """This cell's class cannot take probes safely; the message says why (becomes MSD002)."""


def user_class(cell: Any) -> type:
    """The class the user gave ``cell``, whether or not it carries probes now."""
    return getattr(type(cell), PROBED_MARK, type(cell))


def is_probed(cell: Any) -> bool:
    return PROBED_MARK in type(cell).__dict__


def class_functions(cls: type) -> list[Callable[..., Any]]:
    """The plain functions ``cls`` defines (those under ``ms.jit``-style wrappers too), but ``__init__``: it has
    run already and does not run again."""
    found = []
    for name, value in vars(cls).items():
        value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        value = getattr(value, "fget", value)  # a property's getter
        while hasattr(value, "__wrapped__"):
            value = value.__wrapped__
        if isinstance(value, types.FunctionType) and name != "__init__":
            found.append(value)
    return found


def _super_forms(function: Callable[..., Any]) -> set[str]:
    """``{"bare", "named"}``: the forms of ``super`` the function's source uses; both when unreadable."""
    code = function.__code__
    if "super" not in code.co_names and not any(isinstance(c, types.CodeType) and "super" in c.co_names
                                                 for c in code.co_consts):
        return set()
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return {"bare", "named"}
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == "super"]
    return {"named" if call.args else "bare" for call in calls}


def _jitted(cls: type) -> bool:
    """A ``@jit`` construct among its classes: MindSpore then compiles the cell's whole ``construct``, even in
    PyNative (the ``nn`` optimizers)."""
    return any(hasattr(vars(c).get("construct"), "__wrapped__") for c in cls.__mro__)


def _copy(function: types.FunctionType, *, owner: type | None = None, name: str | None = None) -> types.FunctionType:
    """A copy of ``function``, with its ``__class__`` cell (what Python's bare ``super()`` reads) set to ``owner``
    and/or under another ``name``."""
    cells = tuple(types.CellType(owner) if owner is not None and var == "__class__" else cell
                  for var, cell in zip(function.__code__.co_freevars, function.__closure__ or ()))
    copy = types.FunctionType(function.__code__, function.__globals__, name or function.__name__,
                              function.__defaults__, cells or function.__closure__)
    copy.__kwdefaults__, copy.__dict__ = function.__kwdefaults__, dict(function.__dict__)
    copy.__qualname__, copy.__module__, copy.__doc__ = function.__qualname__, function.__module__, function.__doc__
    return copy


def _sibling(base: type, members: dict[str, Any]) -> type:
    namespace = {k: v for k, v in vars(base).items() if k not in ("__dict__", "__weakref__")}
    namespace.update(members, __qualname__=base.__qualname__)
    cls = type(base)(base.__name__, base.__bases__, namespace)
    for name, value in vars(base).items():
        if (isinstance(value, types.FunctionType) and "__class__" in value.__code__.co_freevars
                and name not in members):
            setattr(cls, name, _copy(value, owner=cls))
    return cls


def _subclass(base: type, members: dict[str, Any], suffix: str = "") -> type:
    return type(base)(base.__name__ + suffix, (base,), {**members, "__qualname__": base.__qualname__ + suffix})


def probed_class(base: type, probed_construct: Callable[..., Any], extra: dict[str, Any] | None = None) -> type:
    """A class for a cell of class ``base`` whose ``construct`` is ``probed_construct``, which calls the user's
    ``construct`` as ``self._msd_inner(...)``; ``extra`` members replace others (MindSpore's own methods, never
    one using ``super()``). Raises ``CannotProbe`` when no form is safe for ``base``."""
    if PROBED_MARK in vars(base):
        raise CannotProbe("it already carries probes (another Doctor is watching it, or one was not closed)")
    # With a jitted construct in its classes the probe compiles with the cell, in PyNative as well. Under the name
    # ``construct``: MindSpore's ``@jit`` compiles a cell's method only by the name the cell has it under; else it
    # takes ``self`` and the gradients for constants and compiles again at every step.
    construct = _copy(probed_construct, name="construct")
    members = {"construct": ms.jit(construct) if _jitted(base) else construct, PROBED_MARK: base,
               "__module__": base.__module__, "_msd_inner": base.construct, **(extra or {})}
    if is_mindspore_class(base):
        # MindSpore's own classes: no bare super() in their constructs; the name is kept for messages and rules.
        return _subclass(base, members)
    forms = set().union(set(), *map(_super_forms, class_functions(base)))
    if "bare" not in forms:
        # A name of its own: MindSpore finds ``super(UserClass, self)``'s class by name in ``type(self).__mro__``.
        return _subclass(base, members, "_msdoctor")
    if "__slots__" in vars(base):
        raise CannotProbe(f"{base.__name__} defines __slots__ and uses super(): its class cannot be copied")
    if "named" in forms and not (_jitted(base) or ms.get_context("mode") == ms.GRAPH_MODE):
        raise CannotProbe(f"{base.__name__} uses both super() and super({base.__name__}, self) and may run eagerly "
                          "(PyNative): no probed class keeps both meaning what they mean without the Doctor")
    cls = _sibling(base, members)
    own = vars(base).get("construct")
    if isinstance(own, types.FunctionType) and "__class__" in own.__code__.co_freevars:
        cls._msd_inner = _copy(own, owner=cls)
    return cls


def swap(cell: Any, probed: type, state: dict[str, Any]) -> Callable[[], None]:
    """Give ``cell`` the class ``probed`` and the instance attributes ``state``; returns the undo."""
    base = type(cell)
    for attribute, value in state.items():
        object.__setattr__(cell, attribute, value)
    cell.__class__ = probed

    def undo() -> None:
        try:
            cell.__class__ = base
        finally:
            for attribute in state:
                cell.__dict__.pop(attribute, None)

    return undo
