"""The layering of the packages, read from the source with ``ast``: the library ``index``
imports nothing of the service (``streaming``, ``connectors``), and no module of the
project imports itself back through others (no import cycles, counting imports inside
functions too: a cycle there is a design cycle all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
PACKAGES = ("psmatch",)
SERVICE = ("psmatch.service", "psmatch.adapters", "psmatch.devservers")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """The project's modules: its Python files, and its C extensions
    (``src/psmatch/core/_kernels.c`` is ``psmatch.core._kernels``), which import no module
    of the project."""
    return {module_name(path): path for package in PACKAGES
            for pattern in ("*.py", "*.c") for path in sorted((SRC / package).rglob(pattern))}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (a ``from X import Y`` names module
    ``X.Y`` when there is one, else ``X``); none for a C extension."""
    if path.suffix == ".c":
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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


def test_the_graph_sees_the_project():
    graph = import_graph()
    assert {"psmatch", "psmatch.core.pipeline", "psmatch.service.worker",
            "psmatch.service.metrics"} <= set(graph)
    assert "psmatch.core.registry" in graph["psmatch.core.pipeline"]
    assert "psmatch" in graph["psmatch.service.worker"]
    assert "psmatch.core._kernels" in graph["psmatch.core.columns"]
    assert not graph["psmatch.core._kernels"]


def test_the_library_imports_nothing_of_the_service():
    graph = import_graph()
    def service(name: str) -> bool:
        return name.startswith(tuple(f"{s}." for s in SERVICE)) or name in SERVICE

    offending = {name: sorted(t for t in targets if service(t))
                 for name, targets in graph.items()
                 if not service(name) and name != "psmatch.__main__"}
    assert {name: t for name, t in offending.items() if t} == {}


def test_no_import_cycles():
    graph = import_graph()
    ties = [sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)
            for component in cycles(graph)]
    assert ties == [], f"import cycles (each module's imports inside its cycle): {ties}"


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
