"""The layout shows the architecture: no import circle (function-level imports included) and one direction,
probes/static/data measure -> rules judge -> diagnosis/export format; the training adapters sit on top."""
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


def _imports() -> dict[str, set[str]]:
    """Every module's imports of the package's own modules, wherever the import statement is."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
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
                   "mindspore_doctor.config", "mindspore_doctor.catalog", "mindspore_doctor.probes",
                   "mindspore_doctor.static", "mindspore_doctor.data", "mindspore_doctor.rules"):
        for name, targets in _importers(prefix).items():
            assert not {t for t in targets if t.startswith("mindspore_doctor.training")}, name
