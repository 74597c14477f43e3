"""No import cycle between the core's packages, nor between any two of its modules, counting
imports inside functions and under ``TYPE_CHECKING`` too: grimp (import-linter's own graph
library) reads every import statement.

A package is ``minisgl_core.<name>`` (a subpackage or a top-level module); the root
``minisgl_core/__init__.py`` is a node of its own, so a core module importing the root's
re-exports (which reach ``offline``) would show up as a cycle as well.
"""

from __future__ import annotations

from collections.abc import Callable

import grimp
import pytest

ROOT = "minisgl_core"


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_cycles(graph: grimp.ImportGraph,
                   node_of: Callable[[str], str | None] = package_of) -> list[list[str]]:
    """The strongly connected sets of nodes (packages, or what ``node_of`` maps a module to;
    None: left out) (Tarjan), each sorted; none when layered."""
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = node_of(module), node_of(imported)
            if a is not None and b is not None and a != b:
                edges.setdefault(a, set()).add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def describe(graph: grimp.ImportGraph, cycle: list[str],
             node_of: Callable[[str], str | None] = package_of) -> str:
    """One import per edge inside ``cycle``: where to look to break it."""
    lines = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            a, b = node_of(module), node_of(imported)
            if a != b and a in cycle and b in cycle:
                detail = graph.get_import_details(importer=module, imported=imported)
                where = detail[0]["line_number"] if detail else "?"
                lines.append(f"  {module}:{where} imports {imported}")
    return " <-> ".join(cycle) + "\n" + "\n".join(lines)


def test_the_core_packages_import_each_other_without_a_cycle() -> None:
    graph = grimp.build_graph(ROOT, cache_dir=None)
    assert len({package_of(m) for m in graph.modules}) > 10  # the whole core was read
    cycles = package_cycles(graph)
    assert not cycles, "import cycles between packages:\n" + "\n".join(
        describe(graph, c) for c in cycles)


def test_the_core_modules_import_each_other_without_a_cycle() -> None:
    graph = grimp.build_graph(ROOT, cache_dir=None)
    assert len(graph.modules) > 150  # every module was read
    cycles = package_cycles(graph, lambda m: m)
    assert not cycles, "import cycles between modules:\n" + "\n".join(
        describe(graph, c, lambda m: m) for c in cycles)


@pytest.mark.parametrize("imports, expected", [
    ([("minisgl_core.a.x", "minisgl_core.b.y"), ("minisgl_core.b.y", "minisgl_core.c")], []),
    ([("minisgl_core.a.x", "minisgl_core.b.y"), ("minisgl_core.b.z", "minisgl_core.a.w")],
     [["minisgl_core.a", "minisgl_core.b"]]),
    ([("minisgl_core", "minisgl_core.a"), ("minisgl_core.a", "minisgl_core.b"),
      ("minisgl_core.b", "minisgl_core.c"), ("minisgl_core.c.q", "minisgl_core")],
     [["minisgl_core", "minisgl_core.a", "minisgl_core.b", "minisgl_core.c"]]),
])
def test_a_cycle_through_any_modules_of_two_packages_is_found(
        imports: list[tuple[str, str]], expected: list[list[str]]) -> None:
    graph = grimp.ImportGraph()
    for importer, imported in imports:
        graph.add_import(importer=importer, imported=imported)
    assert package_cycles(graph) == expected
