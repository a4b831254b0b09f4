"""Load what ``msdoctor lint TARGET`` should lint: a ``.py`` file or ``pkg.module:attr``.

From a file we take every ``nn.Cell`` subclass defined there that builds
without arguments and every zero-argument ``build_*``/``create_*`` factory
returning a Cell or ``(net, loss, optimizer[, sample_inputs])``. Anything that
goes wrong becomes a ``LoadError`` whose message is one line the user can act
on; the CLI prints it and exits 2.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

FACTORY_PREFIXES = ("build_", "create_")
_module_counter = itertools.count()


class LoadError(Exception):
    """TARGET cannot be loaded; ``str(error)`` is one line for the user."""


@dataclass
class LintTarget:
    """One thing to lint and the name the report shows for it (class or factory name)."""

    name: str
    network: Any
    loss_fn: Any = None
    optimizer: Any = None
    sample_inputs: Any = None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _where_raised(exc: BaseException, path: Path | None) -> str:
    """``file:line`` of the deepest frame inside the user's file (or the deepest frame at all)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if path is not None:
        mine = [f for f in frames if Path(f.filename).resolve() == path.resolve()]
        frames = mine or frames
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


def _import_failure(exc: BaseException, what: str, path: Path | None) -> LoadError:
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else what
        return LoadError(f"{where}: syntax error: {exc.msg}")
    if isinstance(exc, ImportError):
        missing = f" (module {exc.name!r})" if exc.name else ""
        return LoadError(f"cannot import {what}: {_one_line(exc)}{missing}")
    if isinstance(exc, SystemExit):
        return LoadError(
            f"{what} called exit({exc.code}) while being imported; "
            "guard the script part with `if __name__ == \"__main__\":`"
        )
    return LoadError(f"importing {what} raised {_one_line(exc)} at {_where_raised(exc, path)}")


def import_file(path: str | Path) -> ModuleType:
    """Import a ``.py`` file under a unique module name, its directory first on ``sys.path``."""
    path = Path(path)
    if path.is_dir():
        raise LoadError(f"{path} is a directory; give a .py file or pkg.module:attr")
    if not path.is_file():
        raise LoadError(f"no such file: {path}")
    if path.suffix != ".py":
        raise LoadError(f"{path} is not a .py file")
    name = f"_msdoctor_target_{path.stem}_{next(_module_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    sys.modules[name] = module  # inspect.getsourcefile (cell locations) looks modules up here
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code: report it in one line
        sys.modules.pop(name, None)
        raise _import_failure(exc, str(path), path) from None
    finally:
        if sys.path and sys.path[0] == folder:
            sys.path.pop(0)
    return module


def import_module(name: str) -> ModuleType:
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # as `python -m` does
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        raise _import_failure(exc, name, None) from None


def _required_arguments(func: Callable) -> list[str]:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _call(func: Callable, label: str) -> Any:
    try:
        return func()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code
        origin = getattr(sys.modules.get(getattr(func, "__module__", "")), "__file__", None)
        where = _where_raised(exc, Path(origin) if origin else None)
        raise LoadError(f"{label} raised {_one_line(exc)} at {where}") from None


def _cell_type() -> type | None:
    """``nn.Cell``, or None while MindSpore is not imported (then nothing here can be a Cell)."""
    if "mindspore" not in sys.modules:
        return None
    from mindspore import nn

    return nn.Cell


def _as_target(name: str, value: Any) -> LintTarget | None:
    """A Cell, or a ``(net, loss, optimizer[, sample_inputs])`` tuple whose first item is a Cell."""
    cell = _cell_type()
    if cell is None:
        return None
    if isinstance(value, cell):
        return LintTarget(name, value)
    if isinstance(value, (tuple, list)) and 1 <= len(value) <= 4 and isinstance(value[0], cell):
        return LintTarget(name, *value)
    return None


def _is_cell_class(value: Any) -> bool:
    cell = _cell_type()
    return cell is not None and inspect.isclass(value) and issubclass(value, cell)


def targets_from_module(module: ModuleType, label: str) -> list[LintTarget]:
    """Cells defined in ``module`` that build without arguments, and its zero-argument factories."""
    classes, factories, needs_args = [], [], []
    for attr, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported, not defined here
        if _is_cell_class(value):
            (needs_args if _required_arguments(value) else classes).append(value)
        elif inspect.isfunction(value) and attr.startswith(FACTORY_PREFIXES) and not _required_arguments(value):
            factories.append(value)
    targets = []
    for func in factories:
        target = _as_target(func.__name__, _call(func, f"{func.__name__}()"))
        if target is not None:
            targets.append(target)
    built = [LintTarget(cls.__name__, _call(cls, f"{cls.__name__}()")) for cls in classes]
    # A class already linted inside another target (a block of a bigger net, or the net a
    # factory returns with its loss and optimizer) would only repeat the same findings.
    inside = {type(cell) for t in targets + built for path, cell in t.network.cells_and_names() if path}
    inside |= {type(t.network) for t in targets}
    targets += [t for t in built if type(t.network) not in inside]
    if not targets:
        skipped = f" (these need constructor arguments: {', '.join(c.__name__ for c in needs_args)})" if needs_args else ""
        raise LoadError(
            f"{label}: no nn.Cell subclass that builds without arguments and no zero-argument "
            f"build_*/create_* factory returning a Cell{skipped}"
        )
    return targets


def resolve_attr(module: ModuleType, dotted: str, target: str) -> Any:
    value: Any = module
    for part in dotted.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise LoadError(f"{target}: {module.__name__} has no attribute {dotted!r}") from None
    return value


def _target_from_attr(module: ModuleType, dotted: str, target: str) -> LintTarget:
    value = resolve_attr(module, dotted, target)
    name = dotted.rsplit(".", 1)[-1]
    if _is_cell_class(value):
        missing = _required_arguments(value)
        if missing:
            raise LoadError(f"{target}: {value.__name__}() needs arguments ({', '.join(missing)}); point at a factory")
        value = _call(value, f"{value.__name__}()")
    elif callable(value) and not isinstance(value, type) and _as_target(name, value) is None:
        missing = _required_arguments(value)
        if missing:
            raise LoadError(f"{target}: {name}() needs arguments ({', '.join(missing)}); give a zero-argument factory")
        value = _call(value, f"{name}()")
    found = _as_target(name, value)
    if found is None:
        raise LoadError(
            f"{target} is a {type(value).__name__}, not an nn.Cell, a Cell class or a factory "
            "returning a Cell or (net, loss, optimizer)"
        )
    return found


def load_targets(target: str) -> list[LintTarget]:
    """Resolve ``path/to/file.py``, ``pkg.module`` or ``pkg.module:attr`` to what to lint."""
    if ":" in target and not target.endswith(".py") and not Path(target).exists():
        module_name, _, attr = target.partition(":")
        if not module_name or not attr:
            raise LoadError(f"bad TARGET {target!r}; expected path/to/file.py or pkg.module:attr")
        return [_target_from_attr(import_module(module_name), attr, target)]
    if target.endswith(".py") or Path(target).exists() or "/" in target or "\\" in target:
        return targets_from_module(import_file(target), target)
    return targets_from_module(import_module(target), target)
