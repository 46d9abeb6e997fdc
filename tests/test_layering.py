"""The layering of ``psmatch``, read from the source with ``ast`` (imports inside functions
count too: a cycle there is a design cycle all the same).

The layers, lowest first; a module may import its own layer and those below it:

1. ``language``: the subscription language (``psmatch.language``, and ``psmatch.errors``,
   the one exception root every layer raises under);
2. ``library``: the matching library (``psmatch`` itself, its core, the matcher
   families, BE-Gen, ``events``, ``scan``, ``explain``);
3. ``adapters`` (Kafka, Redis, Arrow) and ``devservers`` (the development Kafka, Redis and
   Spark), side by side and blind to each other;
4. ``service``: the streaming job and its CLI; of it, only the CLI may start development
   servers (``run --start-local``, ``servers``).

``psmatch.__main__`` is the CLI's entry point, above everything. Besides the layers: no
module imports another module's private (underscore) names, a private module is imported
only from its own layer, and no modules or packages import each other in a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "psmatch"
ENTRY = "psmatch.__main__"
LAYERS = ("language", "library", "adapters", "devservers", "service")
BELOW: dict[str, set[str]] = {
    "language": set(),
    "library": {"language"},
    "adapters": {"language", "library"},
    "devservers": {"language", "library"},
    "service": {"language", "library", "adapters", "devservers"},
}
DEVSERVER_USERS = "psmatch.service.cli"
"""The one part of the service that may import ``psmatch.devservers``."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    """The project's modules: its Python files, and its C extensions (a ``.c`` file under
    ``src/`` names the module of its path), which import no module of the project."""
    return {module_name(path): path
            for pattern in ("*.py", "*.c") for path in sorted((SRC / ROOT).rglob(pattern))}


def layer_of(name: str) -> str:
    parts = name.split(".")
    second = parts[1] if len(parts) > 1 else ""
    if second in ("language", "errors"):
        return "language"
    if second in ("adapters", "devservers", "service"):
        return second
    return "library"


def _imports(path: Path, name: str) -> list[tuple[str, str | None]]:
    """``(module, imported name or None)`` for every import statement of the file, with
    relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.extend((base, alias.name) for alias in node.names)
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (a ``from X import Y`` names module ``X.Y`` when
    there is one, else ``X``); none for a C extension."""
    if path.suffix == ".c":
        return set()
    targets = {f"{base}.{item}" if item and f"{base}.{item}" in modules else base
               for base, item in _imports(path, name)}
    return {t for t in targets if t in modules and t != name}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
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


def package_of(name: str, modules: dict[str, Path]) -> str:
    """The package a module belongs to (a package's ``__init__`` belongs to the package)."""
    return name if modules[name].name == "__init__.py" else name.rpartition(".")[0]


def test_the_graph_sees_the_project():
    graph = import_graph()
    assert {ROOT, "psmatch.core.pipeline", "psmatch.service.metrics"} <= set(graph)
    assert "psmatch.core.registry" in graph["psmatch.core.pipeline"]
    assert "psmatch.core._kernels" in graph["psmatch.core.columns"]
    assert not graph["psmatch.core._kernels"]
    assert layer_of("psmatch.language.parser") == "language"
    assert layer_of("psmatch.pstree.psthash") == layer_of(ROOT) == "library"
    assert layer_of("psmatch.adapters.state") == "adapters"


def test_every_layer_imports_only_itself_and_below():
    graph = import_graph()
    offending = {
        f"{name} -> {target}"
        for name, targets in graph.items() if name != ENTRY
        for target in targets
        if target != ENTRY and layer_of(target) != layer_of(name)
        and layer_of(target) not in BELOW[layer_of(name)]
    }
    assert sorted(offending) == []


def test_only_the_cli_starts_development_servers():
    graph = import_graph()
    offending = sorted(
        f"{name} -> {target}" for name, targets in graph.items()
        for target in targets
        if layer_of(target) == "devservers" and layer_of(name) == "service"
        and not (name == DEVSERVER_USERS or name.startswith(DEVSERVER_USERS + "."))
    )
    assert offending == []


def test_no_module_imports_private_names_of_another():
    modules = project_modules()
    offending = []
    for name, path in modules.items():
        if path.suffix == ".c":
            continue
        for base, item in _imports(path, name):
            if not base.startswith(ROOT):
                continue
            target = f"{base}.{item}" if item and f"{base}.{item}" in modules else base
            private_module = any(p.startswith("_") and not p.startswith("__")
                                 for p in target.split("."))
            if private_module and layer_of(target) != layer_of(name):
                offending.append(f"{name} imports the private module {target}")
            if item and item.startswith("_") and f"{base}.{item}" not in modules:
                offending.append(f"{name} imports {base}.{item}")
    assert offending == []


def test_no_import_cycles_between_modules():
    graph = import_graph()
    ties = [sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)
            for component in cycles(graph)]
    assert ties == [], f"import cycles (each module's imports inside its cycle): {ties}"


def test_no_import_cycles_between_packages():
    """Packages import each other in no cycle: ``psmatch.service`` using
    ``psmatch.adapters`` while an adapter uses the service would be one design, split."""
    modules = project_modules()
    graph: dict[str, set[str]] = {}
    for name, targets in import_graph().items():
        source = package_of(name, modules)
        graph.setdefault(source, set())
        for target in targets:
            package = package_of(target, modules)
            graph.setdefault(package, set())
            # a package may hold the modules below it (its __init__ imports them)
            if package != source and not package.startswith(source + ".") \
                    and not source.startswith(package + "."):
                graph[source].add(package)
    assert cycles(graph) == []


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycles_are_found(graph: dict[str, set[str]], expected: list[list[str]]):
    assert cycles(graph) == expected
