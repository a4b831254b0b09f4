"""Probe for the network's parameters (MSD101, 102, 108, 109): one ``ParamSignal`` per Parameter.

Walks the cell tree of the linted network (``static/cell_walk.py``: every registration path, so a cell registered
twice is seen twice) and turns each Parameter into the plain signal of ``static/signals.py`` that the rules of
``rules/parameters/`` judge: its role and fans (``param_roles``), its init statistics (``param_values``), whether a
frozen one is still at its initial value (``param_origin``), how it is shared (``param_sharing``) and whether the
optimizer holds it. Measured once per lint and shared by the checks. The optimizer's own settings are measured by
``static/optimizer_settings.py``.
"""
from __future__ import annotations

from typing import Any

from mindspore_doctor.static.cell_walk import lint_optimizer, own_params, walk_cells
from mindspore_doctor.static.context import LintContext
from mindspore_doctor.static.dataflow import ScaleFlow
from mindspore_doctor.static.param_origin import frozen_state, is_fixed
from mindspore_doctor.static.param_roles import fans, following_activation, param_role
from mindspore_doctor.static.param_sharing import (
    calls_per_run,
    cell_settings,
    computing_holders,
    fewest_wrappers,
    registered_twice,
)
from mindspore_doctor.static.param_values import init_statistics
from mindspore_doctor.static.signals import WEIGHT, ParamSignal

_CACHE_KEY = "parameter_signals"


def _held_state(param: Any, held_ids: set[int] | None, held_names: set[str]) -> bool | None:
    """Held by the optimizer; None when unknown or when a same-named copy is held (MSD103 explains that)."""
    if held_ids is None:
        return None
    if id(param) in held_ids:
        return True
    return None if param.name in held_names else False


def _network_params(network: Any, held: list[Any] | None) -> list[ParamSignal]:
    held_ids = None if held is None else {id(p) for p in held}
    held_names = {p.name for p in held or ()}
    seen: dict[int, dict[str, Any]] = {}
    cells: dict[str, Any] = {}
    runs: dict[str, int] = {}
    repeated: dict[str, bool] = {}
    counts: dict[tuple[int, str], int] = {}
    for path, alias, cell, parent, key in walk_cells(network):
        cells[path] = cell
        if parent is None:
            runs[path], repeated[path] = 1, False
        else:
            parent_path = path.rpartition(".")[0]
            runs[path] = runs[parent_path] * calls_per_run(parent, key, counts)
            repeated[path] = repeated[parent_path] or registered_twice(parent, cell)
        for param_key, param, listed in own_params(cell):
            entry = seen.get(id(param))
            if entry is None or (entry["listed"] and not listed):
                entry = seen[id(param)] = {"param": param, "cell": cell, "parent": parent, "key": key,
                                           "param_key": param_key, "listed": listed, "paths": {}, "owners": {}}
            if listed == entry["listed"]:
                if entry["paths"].setdefault(alias, path) == path:
                    entry["owners"].setdefault(id(cell), (cell, []))[1].append(path)
    flow = ScaleFlow(cells)
    signals = []
    for entry in seen.values():
        param, cell = entry["param"], entry["cell"]
        shape = tuple(int(d) for d in param.shape)
        role = param_role(cell, entry["param_key"], param)
        fan_in, fan_out = fans(cell, shape) if role == WEIGHT else (None, None)
        direct = fewest_wrappers(entry["paths"])
        owners = computing_holders([(owner, [p for p in held if p in direct])
                                     for owner, held in entry["owners"].values() if direct.intersection(held)])
        paths = tuple(path for path in entry["paths"].values() if any(path in held for _, held in owners))
        signals.append(
            ParamSignal(
                name=param.name,
                cell=paths[0],
                key=entry["param_key"],
                cell_type=type(cell).__name__,
                role=role,
                shape=shape,
                requires_grad=bool(param.requires_grad),
                paths=paths,
                uses=sum(runs[p] for p in paths),
                repeated=any(repeated[p] for p in paths),
                owner_types=tuple(type(owner).__name__ for owner, _ in owners),
                owner_cells=tuple(owner_paths[0] for _, owner_paths in owners),
                owners_running=sum(any(runs[p] for p in owner_paths) for _, owner_paths in owners),
                owners_alike=len(owners) > 1 and len({cell_settings(owner) for owner, _ in owners}) == 1,
                in_optimizer=_held_state(param, held_ids, held_names),
                fan_in=fan_in,
                fan_out=fan_out,
                activation=following_activation(cell, entry["parent"], entry["key"]) if fan_in else None,
                scale_reset=flow.scale_reset(paths) if fan_in else None,
                at_init=None if param.requires_grad else frozen_state(param, cell, role, paths, flow, cells),
                fixed=is_fixed(param, cell, role),
                **init_statistics(param, role, fan_in),
            )
        )
    return signals


def param_signals(ctx: LintContext) -> list[ParamSignal]:
    """Measured once per lint and shared by the checks (the walk and host copies are the cost)."""
    cache = ctx.memo
    if _CACHE_KEY not in cache:
        optimizer = lint_optimizer(ctx)
        held = None if optimizer is None else list(optimizer.parameters)
        cache[_CACHE_KEY] = _network_params(ctx.network, held)
    return cache[_CACHE_KEY]
