"""Construct-graph probes: unsafe divisions (MSD106), loss/activation wiring (MSD107),
disconnected cells (MSD110), silent broadcasting into the loss (MSD114).

Data flow comes from the AST of each user cell class's ``construct`` (parsed once
per class) with ``self.<attr>`` resolved to the real child cells and primitives.
MindSpore's own cells are trusted. MSD114 runs one forward pass on
``sample_inputs`` in eval mode, for elementwise losses only; every cell attribute and buffer is put back.
The functions here only measure: the signals (``static/signals.py``) are judged by ``rules/graph.py``, and
``runners/lint.py`` pairs the two.
"""
from __future__ import annotations

import ast
import re
from typing import Any

from mindspore_doctor.cells import unwrap
from mindspore_doctor.findings import Finding
from mindspore_doctor.library import is_mindspore_module, mindspore_classes
from mindspore_doctor.static.ast_cells import (
    child_path,
    instance_truth,
    is_library_object,
    library_kind,
    object_resolver,
    skipped,
    source_classes,
    user_classes,
)
from mindspore_doctor.static.ast_nodes import callee_identifier, norm_name, self_attribute
from mindspore_doctor.static.attribute_uses import attribute_uses, init_references, output_discarded
from mindspore_doctor.static.class_source import ClassSource, ConstructUnavailable, class_source, reachable_methods
from mindspore_doctor.static.divisions import DivisionSite, HeldMask, unsafe_divisions
from mindspore_doctor.static.loss_wiring import combines_arguments_elementwise, prediction_uses, returned_values
from mindspore_doctor.static.method_flow import Decide, LocalValues, function_flow, live_nodes
from mindspore_doctor.static.names import MODULE_NAMES, first_operand
from mindspore_doctor.checks import CheckSkipped
from mindspore_doctor.static.context import LOSS_PATH, LintContext, SourceContext
from mindspore_doctor.static.signals import (
    BroadcastSignal,
    DivisionSignal,
    OutputActivationSignal,
    UnusedMemberSignal,
    parameter_location,
)

# --- MSD106 ----------------------------------------------------------------------------------


def _division_signals(owner: str, sites: list[DivisionSite], source: ClassSource, location: dict,
                      instances: int = 1) -> list[DivisionSignal]:
    return [
        DivisionSignal(owner, s.expression, s.denominator, s.reason, {**location, "file": source.file, "line": s.line},
                       instances, s.mask)
        for s in sites
    ]


def _held_masks(cell: Any) -> HeldMask:
    """``self.<attr>`` that holds a constant 0/1 (or bool) tensor, as a GCN holds its training-node mask:
    "nonempty" when one entry is set (its count is never 0), "mask" when none is."""
    import numpy as np

    def judge(attr: str) -> str | None:
        value = cell.__dict__.get(attr)
        if value is None or not hasattr(value, "shape") or isinstance(value, (int, float, bool)):
            return None
        try:
            array = np.asarray(value.asnumpy() if hasattr(value, "asnumpy") else value)
        except Exception:  # noqa: BLE001 - a tensor that cannot be read on the host is simply not known
            return None
        if array.size == 0 or not (array.dtype == np.bool_ or np.isin(array, (0, 1)).all()):
            return None
        return "nonempty" if array.any() else "mask"

    return judge


def _instance_divisions(cell: Any, source: ClassSource, loss: bool) -> list[DivisionSite]:
    return unsafe_divisions(source, object_resolver(cell), instance_truth(cell), _held_masks(cell), loss)


def division_signals(ctx: LintContext) -> tuple[list[DivisionSignal], list[Finding]]:
    """The divisions of user cells' construct whose denominator can be zero (MSD106), one per class and site,
    and the MSD002 findings for the classes whose construct cannot be read."""
    analysed, skips = user_classes(ctx.construct_cells, "unsafe-division", ("MSD106",))
    loss_paths = {LOSS_PATH, unwrap(ctx.network).loss_path or LOSS_PATH}
    signals = []
    for a in analysed:
        sites: dict[tuple[int, str], DivisionSite] = {}
        for path in a.instances:  # the branches each instance takes, the masks each holds
            cell = ctx.construct_cells[path]
            for site in _instance_divisions(cell, a.source, path in loss_paths):  # its 2nd argument: labels
                sites.setdefault((site.line, site.expression), site)
        ordered = sorted(sites.values(), key=lambda site: site.line)
        signals += _division_signals(a.path or type(a.cell).__name__, ordered, a.source, {"cell": a.path},
                                     len(a.instances))
    return signals, skips


def division_source_signals(ctx: SourceContext) -> list[DivisionSignal]:
    return [s for source, resolve in source_classes(ctx.tree, str(ctx.path))
            for s in _division_signals(source.name, unsafe_divisions(source, resolve), source, {})]


# --- MSD110 ----------------------------------------------------------------------------------


def _used_attributes(cell: Any) -> tuple[frozenset[str] | None, frozenset[str], str | None]:
    """Attributes construct uses, those of them only called with the output dropped, or (None, {}, why)
    when that cannot be known statically."""
    try:
        source = class_source(type(cell))
        uses = attribute_uses(source)
    except ConstructUnavailable as why:
        return None, frozenset(), str(why)
    if uses.dynamic:
        return None, frozenset(), f"{type(cell).__name__}.construct: dynamic attribute access ({uses.dynamic})"
    children = cell.__dict__.get("_cells", {})
    decide = instance_truth(cell)
    discarded = frozenset(name for name in uses.names if name in children and output_discarded(source, name, decide))
    return uses.names - discarded, discarded, None


def _listed_cells(cell: Any, used: frozenset[str] | None) -> list[tuple[str, Any]]:
    """Cells held in a plain list/tuple/dict attribute construct uses (``for k in self.branches``): they
    are registered under other names, and used through this one."""
    from mindspore import nn

    found = []
    for attr, value in vars(cell).items():
        if used is not None and attr in used and isinstance(value, (list, tuple, dict)):
            items = value.values() if isinstance(value, dict) else value
            found += [(attr, item) for item in items if isinstance(item, nn.Cell)]
    return found


def _listed_parameters(cell: Any, used: frozenset[str] | None) -> set[int]:
    """Parameters of a ParameterTuple attribute construct uses (``self.pos_embed[i]``): registered under
    their own names, used through this one."""
    from mindspore import ParameterTuple

    held = [cell.__dict__.get(attr) for attr in used or ()]
    return {id(p) for value in held if isinstance(value, ParameterTuple) for p in value}


def _has_parameters(cell: Any) -> bool:
    """An unused cell without parameters (a Softmax or Identity defined but not called) changes nothing."""
    return next(iter(cell.get_parameters()), None) is not None


def unused_member_signals(ctx: LintContext) -> tuple[list[UnusedMemberSignal], list[Finding]]:
    """The cells (with parameters) and parameters no construct on the path from the root (or a loss passed
    beside it) uses (MSD110), and the MSD002 findings for the classes whose use cannot be known statically."""
    codes = ("MSD110",)
    queue = [("", ctx.network)]
    if LOSS_PATH in ctx.construct_cells:  # a loss passed beside the network
        queue.append((LOSS_PATH, ctx.construct_cells[LOSS_PATH]))
    reached = {id(cell) for _, cell in queue}
    unused_cells: list[tuple[str, Any]] = []
    signals, skips, skipped_classes = [], [], set()
    while queue:
        path, cell = queue.pop(0)
        used, discarded = None, frozenset()
        if not is_library_object(cell):
            used, discarded, why = _used_attributes(cell)
            if why and type(cell) not in skipped_classes:
                skipped_classes.add(type(cell))
                skips.append(skipped("disconnected-cell", codes, f"`{path or '<root>'}`: {why}", {"cell": path}))
        for name, child in [*cell.__dict__.get("_cells", {}).items(), *_listed_cells(cell, used)]:
            if child is None:
                continue
            if used is None or name in used:
                if id(child) not in reached:
                    reached.add(id(child))
                    queue.append((child_path(path, name), child))
            else:
                unused_cells.append((child_path(path, name), child, name in discarded))
        listed = _listed_parameters(cell, used)
        for name, param in (cell.__dict__.get("_params", {}).items() if used is not None else ()):
            if name not in used and id(param) not in listed:
                signals.append(UnusedMemberSignal(child_path(path, name), "parameter", "Parameter",
                                                  parameter_location(path, name, param.name)))
    reported: set[int] = set()
    for path, child, dropped in unused_cells:
        if id(child) not in reached and id(child) not in reported and _has_parameters(child):
            reported.add(id(child))
            signals.append(UnusedMemberSignal(path, "cell", type(child).__name__, {"cell": path}, dropped))
    return signals, skips


def _mindspore_imports(tree: Any) -> set[str]:
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and is_mindspore_module(node.module)
        for alias in node.names
    }


_PARAMETERLESS = re.compile(
    r"^(Dropout(\dd)?|Identity|Flatten|Unflatten|\w*Pool\dd|\w*Pad\dd|Pad|Softmax(\dd)?|LogSoftmax|Softmin|ReLU6?"
    r"|LeakyReLU|GELU|FastGelu|SiLU|Swish|Mish|ELU|CELU|SeLU|HSwish|HSigmoid|Sigmoid|Tanh|Hardtanh|LogSigmoid"
    r"|Softsign|Softplus|Upsample|PixelShuffle|PixelUnshuffle|\w*Loss)$"
)
"""MindSpore cells that hold no parameters: defined and never called, they change nothing (as in object mode)."""
_PRIMITIVE_MODULES = frozenset({"ops", "P", "F", "C", "msops"})


def _builds_cell(call: Any, cell_names: set[str]) -> bool:
    """``nn.Dense(...)``, ``Parameter(...)``, ``MyBlock(...)``: what ``__init__`` assigns that can be a cell
    with parameters (not ``nn.Softmax()`` nor an ``ops`` primitive)."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in cell_names and not _PARAMETERLESS.match(func.id)
    root = func
    while isinstance(root, ast.Attribute):
        root = root.value
    library = MODULE_NAMES - {"self", "np", "numpy"} - _PRIMITIVE_MODULES
    return isinstance(root, ast.Name) and root.id in library and func.attr[:1].isupper() and \
        not _PARAMETERLESS.match(func.attr)


def unused_member_source_signals(ctx: SourceContext) -> tuple[list[UnusedMemberSignal], list[Finding]]:
    file = str(ctx.path)
    classes = list(source_classes(ctx.tree, file))
    cell_names = (_mindspore_imports(ctx.tree) | {s.name for s, _ in classes}) - {"Tensor"}
    signals, skips = [], []
    for source, _ in classes:
        uses = attribute_uses(source)
        if uses.dynamic:
            skips.append(skipped("disconnected-cell", ("MSD110",), f"`{source.name}`: dynamic attribute access "
                                 f"({uses.dynamic})", {"file": file, "line": source.line}))
            continue
        referenced = init_references(source)
        discarded = {name for name in uses.names - referenced if output_discarded(source, name)}
        used = (uses.names - discarded) | referenced
        for attr, assignment in source.init_assignments().items():
            if attr not in used and _builds_cell(assignment.call, cell_names):
                kind = "parameter" if assignment.callee == "Parameter" else "cell"
                signals.append(UnusedMemberSignal(f"{source.name}.{attr}", kind, assignment.callee,
                                                  {"file": file, "line": assignment.line}, attr in discarded))
    return signals, skips


# --- MSD107 / MSD114: the network -> loss boundary ------------------------------------------


def _network_and_loss(ctx: LintContext) -> tuple[Any, Any, str, str]:
    """Unwrap TrainOneStepCell / WithLossCell: (backbone, loss, backbone cell path, loss cell path)."""
    found = unwrap(ctx.network)
    if ctx.loss_fn is not None or found.loss_fn is None:
        return found.backbone, ctx.loss_fn, found.path, LOSS_PATH
    return found.backbone, found.loss_fn, found.path, found.loss_path


_ACTIVATION_CELLS = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Sigmoid": "sigmoid"}
_ACTIVATION_OPS = {"softmax": "softmax", "logsoftmax": "log_softmax", "sigmoid": "sigmoid"}
_LINEAR_CELLS = {"Dense", "BiDense", "Conv1d", "Conv2d", "Conv3d"}
_LINEAR_OPS = {"dense", "linear", "matmul", "biasadd"}
_TRANSPARENT_CELLS = {"Flatten", "Dropout", "Identity", "Unflatten"}
_TRANSPARENT_OPS = {"reshape", "squeeze", "flatten", "view", "cast", "expanddims", "unsqueeze", "dropout", "identity"}
Activation = tuple[str, str]
"""(kind, producing layer) with kind softmax / log_softmax / sigmoid / logits / transparent / unknown."""


def _output_activation(cell: Any, path: str, depth: int = 0) -> Activation:
    """What the last op of ``cell`` produces, following child cells and SequentialCells."""
    name = library_kind(type(cell))
    if depth > 20:
        return "unknown", path
    if is_library_object(cell):
        if name in _ACTIVATION_CELLS:
            return _ACTIVATION_CELLS[name], path
        if name in _LINEAR_CELLS:
            return "logits", path
        if name in _TRANSPARENT_CELLS:
            return "transparent", path
        if name == "SequentialCell":
            for child_name, child in reversed(list(cell.__dict__.get("_cells", {}).items())):
                kind = _output_activation(child, child_path(path, child_name), depth + 1)
                if kind[0] != "transparent":
                    return kind
        return "unknown", path
    try:
        construct = class_source(type(cell)).construct
    except ConstructUnavailable:
        return "unknown", path
    decide = instance_truth(cell)
    live = live_nodes(construct, decide)  # the path this instance runs: branches on constant attributes folded
    values = LocalValues(construct, live)
    traced = [_traced(cell, path, expr, expr.lineno, values, depth, decide)
              for expr in returned_values(construct) if expr in live]
    return _agreed(traced, path)


def _agreed(traced: list[Activation], path: str) -> Activation:
    """One kind when every path agrees, else unknown."""
    return traced[0] if traced and len({kind for kind, _ in traced}) == 1 else ("unknown", path)


def _op_kind(op_name: str) -> str:
    op = norm_name(op_name)
    if op in _ACTIVATION_OPS:
        return _ACTIVATION_OPS[op]
    return "logits" if op in _LINEAR_OPS else "transparent" if op in _TRANSPARENT_OPS else "unknown"


def _traced(cell: Any, path: str, expr: Any, line: int, values: LocalValues, depth: int,
            decide: Decide) -> Activation:
    if depth > 20:
        return "unknown", path
    if isinstance(expr, ast.Name):
        value = values.value_of(expr.id, line)
        return _traced(cell, path, value, value.lineno, values, depth + 1, decide) if value is not None \
            else ("unknown", path)
    if isinstance(expr, ast.IfExp):  # `self.log_softmax(x) if self.use_log_softmax else x`
        truth = decide(expr.test)
        branches = [b for b, keep in ((expr.body, truth is not False), (expr.orelse, truth is not True)) if keep]
        return _agreed([_traced(cell, path, b, line, values, depth + 1, decide) for b in branches], path)
    if not isinstance(expr, ast.Call):
        return "unknown", path
    attr = self_attribute(expr.func)
    if attr is not None:
        child = cell.__dict__.get("_cells", {}).get(attr)
        if child is not None:
            kind = _output_activation(child, child_path(path, attr), depth + 1)
        else:
            prim = cell.__dict__.get("_primitives", {}).get(attr)
            kind = _op_kind(library_kind(type(prim)) if prim is not None else ""), child_path(path, attr)
    else:
        inner = expr.func if isinstance(expr.func, ast.Call) else expr
        kind = _op_kind(callee_identifier(inner) or ""), f"{path}: {ast.unparse(expr)}" if path else ast.unparse(expr)
    if kind[0] == "transparent":
        operand = first_operand(expr)
        return _traced(cell, path, operand, line, values, depth + 1, decide) if operand is not None \
            else ("unknown", path)
    return kind


def _library_name(loss: Any) -> str:
    """``class MyCE(nn.CrossEntropyLoss)`` that keeps MindSpore's construct is a ``CrossEntropyLoss``; so is
    ``mint.nn.CrossEntropyLoss``."""
    return next((library_kind(k) for k in mindspore_classes(type(loss))), type(loss).__name__)


def _unused_activations(loss: Any, source: ClassSource) -> tuple[tuple[str, str], ...]:
    """(attr, type) of the activation cells or primitives a loss defines and its construct never touches
    (``self.log_softmax``), or touches only in branches this instance never takes: the activation the author
    may have meant to apply."""
    uses = attribute_uses(source)
    if uses.dynamic:
        return ()
    decide = instance_truth(loss)
    live = {self_attribute(node) for func in reachable_methods(source) for node in live_nodes(func, decide)}
    held = {**loss.__dict__.get("_primitives", {}), **loss.__dict__.get("_cells", {})}
    return tuple((attr, library_kind(type(obj))) for attr, obj in held.items()
                 if library_kind(type(obj)) in _ACTIVATION_CELLS and attr not in live)


def _switched_off(cells: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
    """(path, type, test as written) of the activation cells a user cell calls only under an ``if`` test its
    instance fails (``if self.use_log_softmax: x = self.log_softmax(x)`` with the flag off): the graph compiler
    folds the branch away, so training never applies them."""
    found = []
    for path, cell in cells.items():
        if is_library_object(cell):
            continue
        try:
            construct = class_source(type(cell)).construct
        except ConstructUnavailable:
            continue
        decide = instance_truth(cell)
        live = live_nodes(construct, decide)
        flow = function_flow(construct)
        for attr, child in cell.__dict__.get("_cells", {}).items():
            calls = [n for n in ast.walk(construct) if isinstance(n, ast.Call) and self_attribute(n.func) == attr]
            if library_kind(type(child)) not in _ACTIVATION_CELLS or not calls or any(c in live for c in calls):
                continue
            node = calls[0]
            while node in flow.parents and not (isinstance(flow.parents[node], (ast.If, ast.IfExp))
                                                and flow.parents[node] in live and node is not flow.parents[node].test
                                                and decide(flow.parents[node].test) is not None):
                node = flow.parents[node]
            test = flow.parents.get(node)
            condition = ast.unparse(test.test) if isinstance(test, (ast.If, ast.IfExp)) else "its branch"
            found.append((child_path(path, attr), library_kind(type(child)), condition))
    return tuple(found)


def _user_loss_signals(loss: Any, output: OutputActivationSignal, loss_path: str) -> list[OutputActivationSignal]:
    """A hand-written loss judged by what it hands the library loss (or ``ops.log``) it reaches: the network
    output passed on unchanged, or the activation the loss applies on the way."""
    try:
        source = class_source(type(loss))
    except ConstructUnavailable:
        return []
    unused = _unused_activations(loss, source)
    signals = []
    for use in prediction_uses(source.construct, object_resolver(loss), instance_truth(loss)):
        location = {"cell": loss_path, "file": source.file, "line": use.line}
        common = dict(loss=use.sink, location=location, loss_cell=type(loss).__name__, call=use.call, unused=unused,
                      switched_off=output.switched_off)
        if use.applied:
            op, text = use.applied[-1]
            signals.append(OutputActivationSignal(_ACTIVATION_OPS[op], text, in_loss=True, **common))
        else:
            signals.append(OutputActivationSignal(output.activation, output.layer, **common))
    return signals


def output_activation_signals(ctx: LintContext) -> list[OutputActivationSignal]:
    """What reaches the loss (MSD107): the network output for a library loss; for a hand-written loss, one
    signal per library loss (or ``ops.log``) its construct hands the prediction to, in source order."""
    net, loss, path, loss_path = _network_and_loss(ctx)
    if loss is None:
        raise CheckSkipped("no loss function (pass loss_fn=, or a WithLossCell as the network)")
    activation, layer = _output_activation(net, path)
    output = OutputActivationSignal(activation, layer or type(net).__name__, _library_name(loss), {"cell": layer},
                                    switched_off=_switched_off(dict(net.cells_and_names(name_prefix=path))))
    return [output] if is_library_object(loss) else _user_loss_signals(loss, output, loss_path)


_ELEMENTWISE_LOSSES = {"MSELoss", "L1Loss", "SmoothL1Loss", "BCELoss", "BCEWithLogitsLoss", "HuberLoss", "RMSELoss",
                       "MAELoss", "SoftMarginLoss"}


def is_elementwise_loss(loss: Any) -> bool:
    """Only an elementwise loss broadcasts its two inputs: MSD114 needs a forward pass for no other loss."""
    if is_library_object(loss):
        return library_kind(type(loss)) in _ELEMENTWISE_LOSSES
    try:
        return combines_arguments_elementwise(class_source(type(loss)).construct)
    except ConstructUnavailable:
        return False


def _forward_in_eval_mode(net: Any, inputs: list[Any]) -> Any:
    import mindspore as ms
    import numpy as np

    from mindspore_doctor.forward import forward_in_eval_mode

    return forward_in_eval_mode(net, *(ms.Tensor(x) if isinstance(x, np.ndarray) else x for x in inputs))


def broadcast_signal(ctx: LintContext) -> BroadcastSignal | None:
    """The shapes of the network output (one forward pass on ``sample_inputs`` in eval mode) and the label an
    elementwise loss compares (MSD114); None for any other loss."""
    net, loss, path, _ = _network_and_loss(ctx)
    if loss is None:
        raise CheckSkipped("no loss function (pass loss_fn=, or a WithLossCell as the network)")
    if not is_elementwise_loss(loss):
        return None  # decided without the forward pass, the costly part (ResNet-50, batch 32, CPU: ~6 s)
    if ctx.sample_inputs is None:
        raise CheckSkipped("needs sample_inputs=(inputs..., label) for one forward pass")
    if len(ctx.sample_inputs) < 2:
        raise CheckSkipped("sample_inputs must be (inputs..., label)")
    *inputs, label = ctx.sample_inputs
    try:
        output = _forward_in_eval_mode(net, inputs)
    except Exception as exc:  # noqa: BLE001 - the user's network or inputs, not our bug
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise CheckSkipped(f"forward pass on sample_inputs failed: {type(exc).__name__}: {first_line}") from None
    if not hasattr(output, "shape") or not hasattr(label, "shape"):
        raise CheckSkipped("network output or label is not a single tensor")
    return BroadcastSignal(tuple(output.shape), tuple(label.shape), type(loss).__name__, elementwise=True,
                           location={"cell": path or None})
