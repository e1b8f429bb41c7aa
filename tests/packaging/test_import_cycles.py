"""No import cycle inside any package of the project, and no submodule that imports its own
package's ``__init__``.

Every import counts, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``): a cycle hidden behind a deferred import is still two modules that cannot be
read, tested or moved one without the other. Shared names (e.g. ``WireErrorCode``) go into a
module both sides import; what one side needs of the other's classes is a ``Protocol`` the
needing side defines (``devices/verbs/soft/_hca.py``'s ``_QueuePair``, ``devices``'s
``DataPlane``). A submodule that imports its own package's ``__init__`` depends on everything the
package re-exports, itself included, the moment ``__init__`` names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "tent_credit",
    "tent_sched",
    "spec/tent_spec",
    "models/tent_models",
    "transport/tent_transport",
    "benchmarks/tent_mutants",
)


def _module_name(package_dir: Path, path: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (``pkg`` stands for ``__init__``)."""
    package = package_dir.name
    modules = {_module_name(package_dir, p): p for p in package_dir.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                # `from . import x` names a submodule when one exists, else a name of `base`
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for imported in targets:
                target = imported
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # a name inside a module
                if target and target.split(".")[0] == package and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_package_has_no_import_cycle(package: str) -> None:
    graph = import_graph(ROOT / package)
    assert len(graph) > 3  # the package was really read
    assert cycles(graph) == []


def own_package_imports(package_dir: Path, graph: dict[str, set[str]]) -> list[str]:
    """Plain modules (not ``__init__``) that import the package they are in."""
    packages = {_module_name(package_dir, p) for p in package_dir.rglob("__init__.py")}
    return sorted(
        name
        for name, imported in graph.items()
        if name not in packages and name.rpartition(".")[0] in imported
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_its_own_package(package: str) -> None:
    package_dir = ROOT / package
    assert own_package_imports(package_dir, import_graph(package_dir)) == []


def test_the_detector_finds_a_cycle_behind_a_deferred_import(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text("from .errors import E\nA = 1\n")
    (package / "errors.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nE = 1\n"
    )
    (package / "c.py").write_text("def f():\n    from pkg import a\n")
    graph = import_graph(package)
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.errors"]]


def test_the_detector_finds_a_module_importing_its_own_package(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("X = 1\n")
    (package / "sub" / "a.py").write_text("from . import X\n")
    (package / "sub" / "b.py").write_text("from pkg.sub import a\n")  # a sibling: fine
    (package / "c.py").write_text("from pkg import sub\n")  # a subpackage: fine
    graph = import_graph(package)
    assert own_package_imports(package, graph) == ["pkg.sub.a"]
