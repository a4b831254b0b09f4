"""The layout shows the architecture: no import circle (function-level imports included) and one direction,
signals -> probes/static/data measure -> rules judge -> runners compose -> adapters and CLI; exporters format."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mindspore_doctor"


def _source(module: str) -> str:
    path = PACKAGE.parent / module.replace(".", "/")
    return (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:``: an import for annotations only is no dependency at run time
    (the rules name ``DoctorConfig`` in their signatures, and ``DoctorConfig`` is built from the rules)."""
    typing_only = {id(inner) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
                   for statement in node.body for inner in ast.walk(statement)}
    return [node for node in ast.walk(tree) if id(node) not in typing_only]


def _imports() -> dict[str, set[str]]:
    """Every module's imports of the package's own modules, wherever the import statement is."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    found.add(target if target in modules else base)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_even_through_function_level_imports():
    graph = _imports()
    # A package's __init__ re-exporting its modules is not a circle of the code's layers.
    for name in graph:
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    assert _cycles(graph) == []


def _importers(prefix: str) -> dict[str, set[str]]:
    return {name: targets for name, targets in _imports().items() if name.startswith(prefix)}


P = "mindspore_doctor."
MEASURING = (P + "static", P + "data", P + "probes")
RULES = (P + "rules",)
ANALYSIS = (P + "analysis",)
RUNNERS = (P + "runners", P + "sanity_checks", P + "tuner")
ADAPTERS = (P + "training", P + "cli", P + "demo", P + "distributed")
EXPORTERS = (P + "export", P + "diagnosis")

def _within(module: str, layers: tuple[str, ...]) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in layers)


def _reaching(layer: tuple[str, ...], forbidden: tuple[str, ...]) -> dict[str, set[str]]:
    """The modules of ``layer`` that import (at module or function level) a module of ``forbidden``, other than the
    plain signal modules (``*.signals``), which sit at the bottom whatever package holds them."""
    return {name: found for name, targets in _imports().items() if _within(name, layer)
            if (found := {t for t in targets if _within(t, forbidden) and not t.endswith(".signals")})}


def test_measuring_layers_never_import_the_layers_above():
    """static/, data/ and probes/ produce signals: they import no rule, runner, adapter or exporter."""
    assert _reaching(MEASURING, RULES + RUNNERS + ADAPTERS + EXPORTERS) == {}


def test_rules_never_import_measuring_layers_runners_adapters_or_exporters():
    assert _reaching(RULES, MEASURING + RUNNERS + ADAPTERS + EXPORTERS) == {}


def test_analysis_is_pure_numbers_in_the_layer_of_the_rules():
    """analysis/ (numeric analyses the rules judge: label errors, error analysis, the error budget) imports the
    signals, findings, rule and config at most: no measuring layer, rule, runner, adapter or exporter, no MindSpore."""
    assert _reaching(ANALYSIS, MEASURING + RULES + RUNNERS + ADAPTERS + EXPORTERS) == {}
    for name in _importers(P + "analysis"):
        source = _source(name)
        assert "import mindspore\n" not in source and "from mindspore " not in source and \
            "from mindspore." not in source, name


def test_the_layer_test_sees_function_level_imports():
    """An import inside a function counts as much as one at the top (the runners import lazily)."""
    sources = {name: set(targets) for name, targets in _imports().items()}
    assert P + "runners.network_inputs" in sources[P + "runners.check_data"]  # imported inside a function only


def test_rules_judge_numbers_only():
    """Rules import no MindSpore-facing layer (only the signals those layers produce): they are pure functions
    over signals and config."""
    for name, targets in _importers("mindspore_doctor.rules").items():
        below = {t for t in targets if not t.endswith(".signals") and t.startswith((
                                                      "mindspore_doctor.probes", "mindspore_doctor.static",
                                                      "mindspore_doctor.data", "mindspore_doctor.training",
                                                      "mindspore_doctor.export", "mindspore_doctor.diagnosis"))}
        assert not below, (name, below)
        source = _source(name)
        assert "import mindspore\n" not in source and "from mindspore " not in source, name


def test_probes_measure_and_do_not_judge():
    for name, targets in _importers("mindspore_doctor.probes").items():
        judging = {t for t in targets if t.startswith(("mindspore_doctor.rules", "mindspore_doctor.training",
                                                        "mindspore_doctor.export", "mindspore_doctor.catalog"))}
        assert not judging, (name, judging)


def test_exporters_and_the_core_do_not_reach_up_into_the_training_adapters():
    for prefix in ("mindspore_doctor.export", "mindspore_doctor.findings", "mindspore_doctor.signals",
                   "mindspore_doctor.analysis",
                   "mindspore_doctor.config", "mindspore_doctor.catalog", "mindspore_doctor.probes",
                   "mindspore_doctor.static", "mindspore_doctor.data", "mindspore_doctor.rules"):
        for name, targets in _importers(prefix).items():
            assert not {t for t in targets if t.startswith("mindspore_doctor.training")}, name
