"""Where a layer's output goes: is its scale reset by a normalization further on (MSD109), and which
normalization cells read it (MSD102: a layer trained together with them)?

The value a cell returns is followed through its parents: into the next cell of a SequentialCell
or of an iterated CellList and, in a user cell, through the construct AST (calls, local names,
returns) with ``self.<attr>`` resolved to the real child cells. A path ends at a normalization
layer, a softmax, the network output, or at anything it cannot follow (treated like the output:
nothing resets the scale). A layer's result is the weakest over every path its output takes.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from mindspore_doctor.static.ast_cells import child_path, instance_truth, is_library_object, library_kind
from mindspore_doctor.static.signals import ACTIVATION_NORM, NORM, RELU_LIKE, RESIDUAL, SATURATING, SOFTMAX
from mindspore_doctor.static.ast_nodes import callee_identifier, norm_name, self_attribute
from mindspore_doctor.static.attribute_uses import call_sites, held_cells
from mindspore_doctor.static.class_source import ConstructUnavailable, class_source
from mindspore_doctor.static.method_flow import function_flow, live_nodes

_NORM_CELL = re.compile(r"Norm(\dd)?$|^L2Normalize$")
_SOFTMAX_CELLS = frozenset({"Softmax", "LogSoftmax", "Softmin", "Softmax2d"})
_HOMOGENEOUS_CELLS = frozenset({"ReLU", "LeakyReLU", "PReLU"})
"""relu(a*x) = a*relu(x) for a > 0: the scale passes through unchanged."""
_LINEAR_CELL = re.compile(
    r"^(Dense|BiDense|Conv\dd(Transpose)?|Dropout(\dd)?|Identity|Flatten|Unflatten|\w*Pool\dd|\w*Pad\dd|Pad"
    r"|Upsample|PixelShuffle|PixelUnshuffle|ResizeBilinear)$"
)
_ACTIVATION_CELLS = RELU_LIKE | SATURATING | {"Swish", "Softplus", "HardSwish", "HardSigmoid"}

_NORM_OPS = frozenset({"layernorm", "batchnorm", "groupnorm", "instancenorm", "l2normalize", "normalize", "rmsnorm"})
_SOFTMAX_OPS = frozenset({"softmax", "logsoftmax", "softmin"})
_ADD_OPS = frozenset({"add", "tensoradd", "addn"})
_HOMOGENEOUS_OPS = frozenset({"relu", "leakyrelu", "prelu"})
_ACTIVATION_OPS = frozenset(
    {"gelu", "fastgelu", "silu", "swish", "sigmoid", "tanh", "hswish", "hardswish", "hsigmoid", "hardsigmoid",
     "mish", "softplus", "elu", "selu", "celu", "relu6"}
)
_LINEAR_OPS = frozenset(
    {"transpose", "reshape", "view", "permute", "squeeze", "unsqueeze", "expanddims", "flatten", "concat", "cat",
     "stack", "cast", "astype", "pad", "dropout", "identity", "depend", "tile", "broadcastto", "contiguous",
     "swapaxes", "moveaxis", "flip", "roll", "narrow", "stridedslice", "slice", "avgpool", "maxpool", "avgpool2d",
     "maxpool2d", "adaptiveavgpool2d", "adaptivemaxpool2d", "mean", "reducemean", "sum", "reducesum", "matmul",
     "batchmatmul", "bmm", "mm", "dense", "linear", "conv1d", "conv2d", "mul", "muls", "sub", "div", "realdiv",
     "pixelshuffle", "interpolate", "resizebilinear", "resizenearestneighbor", "expand", "expandas", "clone",
     "float"}
)

_NORM_END = ("norm", False, False, None)
_SOFTMAX_END = ("softmax", False, False, None)
_OPEN_END = ("end", False, False, None)
Outcomes = frozenset
"""Set of (terminal, crossed a non-homogeneous activation, crossed a residual add, normalization cell path) for
the paths of a value; terminal is "norm", "softmax" or "end"; the path is set for a normalization cell."""
_BUDGET = 2000
_BUDGET_PER_CELL = 20
"""Positions expanded per network: ``_BUDGET`` plus this many per registered cell, a bound for tangled graphs
(past it, paths count as open). Memoized, a network needs 1.4 (ResNet) to 4.6 (Swin) per cell; a fixed 2000 ran
out after 28 blocks of CaiT-S36 or CMT-B, and the rest of their layers were judged as if nothing normalized them."""


def _marked(outcomes: Outcomes, nonlinear: bool = False, residual: bool = False) -> Outcomes:
    return frozenset((end, a or nonlinear, r or residual, norm) for end, a, r, norm in outcomes)


def _strength(outcome: tuple[str, bool, bool, str | None]) -> tuple[int, str | None]:
    end, nonlinear, residual, _ = outcome
    if end == "norm":
        return (2, ACTIVATION_NORM) if nonlinear else (3, NORM)
    if end == "softmax":
        return 1, SOFTMAX
    return (1, RESIDUAL) if residual else (0, None)


class ScaleFlow:
    """Follows layer outputs through one network; ``cells`` maps every registration path to its cell."""

    def __init__(self, cells: dict[str, Any]) -> None:
        self.cells = cells
        self._memo: dict[tuple, Outcomes] = {}
        self._live_nodes: dict[tuple[str, ast.FunctionDef], set[ast.AST]] = {}
        self._budget = _BUDGET + _BUDGET_PER_CELL * len(cells)

    def scale_reset(self, paths: tuple[str, ...]) -> str | None:
        """How the scale of the output of the cell registered at ``paths`` is reset downstream (the weakest
        over its paths): a scale-reset kind of ``signals`` (NORM, ACTIVATION_NORM, SOFTMAX, RESIDUAL), or None."""
        outcomes = frozenset().union(*(self._out(p) for p in paths))
        return min((_strength(o) for o in outcomes), default=(0, None))[1]

    def normalized_by(self, paths: tuple[str, ...]) -> set[str]:
        """Paths of the normalization cells that read the output of the cell at ``paths`` through linear or
        ReLU-like ops only: they were trained on what this layer computes."""
        outcomes = frozenset().union(*(self._out(p) for p in paths))
        return {norm for _, nonlinear, residual, norm in outcomes if norm and not (nonlinear or residual)}

    def _memoized(self, key: tuple, compute) -> Outcomes:
        if key in self._memo:
            return self._memo[key]
        if self._budget <= 0:
            return frozenset({_OPEN_END})
        self._budget -= 1
        self._memo[key] = frozenset()  # a cycle back here adds nothing
        self._memo[key] = result = compute()
        return result

    # --- the branches this instance takes ---------------------------------------------------------

    def _live(self, path: str, func: ast.FunctionDef) -> set[ast.AST]:
        key = (path, func)
        if key not in self._live_nodes:
            self._live_nodes[key] = live_nodes(func, instance_truth(self.cells[path]))
        return self._live_nodes[key]

    def _sites(self, path: str, source: Any, attr: str) -> list[tuple[ast.FunctionDef, ast.Call]]:
        """Calls of ``self.<attr>`` by the cell at ``path``, outside branches it never takes."""
        return [(func, call) for func, call in call_sites(source, attr) if call in self._live(path, func)]

    # --- cells -----------------------------------------------------------------------------------

    def _source(self, cell: Any):
        if is_library_object(cell):
            return None
        try:
            return class_source(type(cell))
        except ConstructUnavailable:
            return None

    def _out(self, path: str, element: int | None = None) -> Outcomes:
        """The output of the cell registered at ``path`` (item ``element`` of it when it returns a tuple)."""
        return self._memoized(("out", path, element), lambda: self._compute_out(path, element))

    def _compute_out(self, path: str, element: int | None) -> Outcomes:
        if not path:
            return frozenset({_OPEN_END})
        parent_path, _, key = path.rpartition(".")
        parent = self.cells.get(parent_path)
        if parent is None:
            return frozenset({_OPEN_END})
        kind = type(parent).__name__
        if kind == "SequentialCell" or (kind == "CellList" and self._looped(parent_path)):
            keys = list(parent._cells)
            following = keys[keys.index(key) + 1:] if key in keys else []
            if following:
                return self._enter(child_path(parent_path, following[0]), 0, None) if element is None else \
                    frozenset({_OPEN_END})
            if kind == "SequentialCell":
                return self._out(parent_path, element)
        if kind in ("CellList", "CellDict"):  # the element's output: where the list's holder calls it
            parent_path, _, key = parent_path.rpartition(".")
            parent = self.cells.get(parent_path)
        source = self._source(parent) if parent is not None else None
        if source is None:
            return frozenset({_OPEN_END})
        return frozenset().union(*(self._result(parent_path, func, call, element)
                                   for func, call in self._sites(parent_path, source, key)))

    def _looped(self, list_path: str) -> bool:
        """The holder of a CellList runs it in order with ``for blk in self.<list>`` (not by index)."""
        holder_path, _, key = list_path.rpartition(".")
        holder = self.cells.get(holder_path)
        source = self._source(holder) if holder is not None else None
        return source is not None and any(isinstance(call.func, ast.Name)
                                          for _, call in self._sites(holder_path, source, key))

    def _result(self, path: str, func: ast.FunctionDef, call: ast.Call, element: int | None) -> Outcomes:
        """The value ``call`` returns in the user cell at ``path``, or item ``element`` of the tuple it returns
        (followed when unpacked into names: ``x, cls = self.pool(x, cls)``)."""
        if element is None:
            return self._node(path, func, call)
        flow = function_flow(func)
        statement = flow.parents.get(call)
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if len(targets) != 1 or not isinstance(targets[0], (ast.Tuple, ast.List)) or element >= len(targets[0].elts):
            return frozenset({_OPEN_END})
        name = targets[0].elts[element]
        if not isinstance(name, ast.Name):
            return frozenset({_OPEN_END})
        readers = flow.readers(name.id, statement.end_lineno or statement.lineno, self._live(path, func), statement)
        return frozenset().union(*(self._node(path, func, load) for load in readers))

    def _enter(self, path: str, index: int | None, keyword: str | None) -> Outcomes:
        """A value passed to the cell at ``path`` as argument ``index`` (or keyword)."""
        return self._memoized(("in", path, index, keyword), lambda: self._compute_enter(path, index, keyword))

    def _compute_enter(self, path: str, index: int | None, keyword: str | None) -> Outcomes:
        cell = self.cells.get(path)
        if cell is None:
            return frozenset({_OPEN_END})
        name = library_kind(type(cell))
        if _NORM_CELL.search(name):
            return frozenset({("norm", False, False, path)})
        source = self._source(cell)
        if source is not None:
            flow = function_flow(source.construct)
            readers = flow.argument_readers(index if index is not None else 0, keyword,
                                            self._live(path, source.construct))
            return frozenset().union(*(self._node(path, source.construct, load) for load in readers))
        if name in _SOFTMAX_CELLS:
            return frozenset({_SOFTMAX_END})
        if name == "SequentialCell":
            first = next(iter(cell._cells), None)
            return self._out(path) if first is None else self._enter(child_path(path, first), 0, None)
        nonlinear = name in _ACTIVATION_CELLS - _HOMOGENEOUS_CELLS or bool(getattr(cell, "activation_flag", False))
        if nonlinear or name in _HOMOGENEOUS_CELLS or _LINEAR_CELL.match(name):
            return _marked(self._out(path), nonlinear=nonlinear)
        return frozenset({_OPEN_END})

    # --- inside a user cell's construct ------------------------------------------------------------

    def _node(self, path: str, func: ast.FunctionDef, node: ast.AST) -> Outcomes:
        """The value computed by ``node`` in ``func`` of the user cell at ``path``."""
        return self._memoized(("node", path, id(node)), lambda: self._compute_node(path, func, node))

    def _compute_node(self, path: str, func: ast.FunctionDef, node: ast.AST) -> Outcomes:
        flow = function_flow(func)
        parent = flow.parents.get(node)
        follow = lambda: self._node(path, func, parent)  # noqa: E731 - the value goes on through ``parent``
        if isinstance(parent, (ast.Tuple, ast.List)) and isinstance(flow.parents.get(parent), ast.Call):
            node, parent = parent, flow.parents[parent]  # ops.concat((a, b)): the tuple is the argument
        if isinstance(parent, ast.keyword):
            return self._call(path, func, flow.parents[parent], None, parent.arg)
        if isinstance(parent, ast.Call):
            if node is parent.func:
                return frozenset()
            return self._call(path, func, parent, parent.args.index(node) if node in parent.args else None, None)
        if isinstance(parent, ast.Attribute):
            caller = flow.parents.get(parent)
            if isinstance(caller, ast.Call) and caller.func is parent:
                return self._op(parent.attr, lambda: self._node(path, func, caller))
            return follow() if parent.attr in ("T", "mT") else frozenset()  # .shape, .dtype: not the data
        if isinstance(parent, ast.BinOp):
            if isinstance(parent.op, (ast.Add, ast.Sub)):
                other = parent.right if node is parent.left else parent.left
                return _marked(follow(), residual=not isinstance(other, ast.Constant))
            return follow() if isinstance(parent.op, (ast.Mult, ast.Div, ast.MatMult)) else frozenset({_OPEN_END})
        if isinstance(parent, ast.UnaryOp):
            return follow() if isinstance(parent.op, (ast.USub, ast.UAdd)) else frozenset()
        if isinstance(parent, ast.Subscript):
            return follow() if node is parent.value else frozenset()
        if isinstance(parent, ast.IfExp):
            return follow() if node is not parent.test else frozenset()
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                return frozenset({_OPEN_END})
            readers = flow.readers(targets[0].id, parent.end_lineno or parent.lineno, self._live(path, func), parent)
            found = frozenset().union(*(self._node(path, func, load) for load in readers))
            return _marked(found, residual=isinstance(parent, ast.AugAssign) and isinstance(parent.op, ast.Add))
        if isinstance(parent, ast.Return):
            return self._returned(path, func, None)
        if isinstance(parent, ast.Tuple) and isinstance(flow.parents.get(parent), ast.Return):
            return self._returned(path, func, parent.elts.index(node))
        if isinstance(parent, (ast.Compare, ast.BoolOp, ast.If, ast.While, ast.Assert, ast.Expr)):
            return frozenset()
        return frozenset({_OPEN_END})

    def _returned(self, path: str, func: ast.FunctionDef, element: int | None) -> Outcomes:
        """A method's return value (item ``element`` of it): the cell's output for construct, else where the
        helper method is called."""
        if func.name == "construct":
            return self._out(path, element)
        source = self._source(self.cells[path])
        sites = self._sites(path, source, func.name) if source is not None else []
        return frozenset().union(*(self._result(path, f, call, element) for f, call in sites))

    def _call(self, path: str, func: ast.FunctionDef, call: ast.Call, index: int | None,
              keyword: str | None) -> Outcomes:
        """The value is an argument of ``call`` in the user cell at ``path``."""
        cell = self.cells[path]
        target = call.func.value if isinstance(call.func, ast.Subscript) else call.func
        attr = self_attribute(target)
        onward = lambda: self._node(path, func, call)  # noqa: E731
        if attr is not None:
            child = cell._cells.get(attr)
            if child is not None and isinstance(call.func, ast.Subscript):
                return frozenset().union(*(self._enter(child_path(child_path(path, attr), k), index, keyword)
                                           for k in child._cells))
            if child is not None:
                return self._enter(child_path(path, attr), index, keyword)
            primitive = cell._primitives.get(attr)
            if primitive is not None:
                return self._op(type(primitive).__name__, onward)
            source = self._source(cell)
            if source is not None and attr in source.methods:
                method = source.methods[attr][0]
                readers = function_flow(method).argument_readers(index, keyword, self._live(path, method))
                return frozenset().union(*(self._node(path, method, load) for load in readers))
            return frozenset({_OPEN_END})
        if isinstance(target, ast.Name) and target.id in held_cells(func):
            return self._enter_held(path, held_cells(func)[target.id], index, keyword)
        if isinstance(call.func, ast.Attribute) and call.func.attr in ("append", "extend", "insert") and \
                isinstance(call.func.value, ast.Name):  # output.append(conv(x)): the value goes on in the list
            flow = function_flow(func)
            statement = flow.statement_of(call)
            readers = flow.readers(call.func.value.id, statement.end_lineno or statement.lineno, self._live(path, func),
                                   statement)
            return frozenset().union(*(self._node(path, func, load) for load in readers))
        inner = call.func if isinstance(call.func, ast.Call) else call
        return self._op(callee_identifier(inner) or "", onward)

    def _enter_held(self, path: str, held: tuple[str, str], index: int | None, keyword: str | None) -> Outcomes:
        """A value passed to a local name holding a child cell: ``blk(x)`` in ``for blk in self.blocks`` enters
        the first block; ``conv = self.convs[i]`` any of them; ``f = self.fc`` that cell."""
        attr, how = held
        child = self.cells[path]._cells.get(attr)
        if child is None:
            return frozenset({_OPEN_END})
        at = child_path(path, attr)
        keys = list(child._cells) if how != "alias" else []
        if how == "loop":
            keys = keys[:1]
        targets = [child_path(at, k) for k in keys] if how != "alias" else [at]
        return frozenset().union(*(self._enter(t, index, keyword) for t in targets)) if targets else \
            frozenset({_OPEN_END})

    def _op(self, name: str, onward) -> Outcomes:
        op = norm_name(name)
        if op in _NORM_OPS:
            return frozenset({_NORM_END})
        if op in _SOFTMAX_OPS:
            return frozenset({_SOFTMAX_END})
        if op in _ADD_OPS:
            return _marked(onward(), residual=True)
        if op in _HOMOGENEOUS_OPS or op in _LINEAR_OPS:
            return onward()
        if op in _ACTIVATION_OPS:
            return _marked(onward(), nonlinear=True)
        return frozenset({_OPEN_END})
