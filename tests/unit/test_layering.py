"""The layering is checked, not claimed. The import-linter contract in
pyproject.toml (run by scripts/check) forbids upward imports; this test forbids circles between
podgpu's top-level parts (a package or a module directly under podgpu), which a layers contract
cannot see inside one layer. Imports inside functions count: grimp reads every import statement."""

from __future__ import annotations

import grimp


def _part(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_circles_between_top_level_parts() -> None:
    graph = grimp.build_graph("podgpu", cache_dir=None)
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            a, b = _part(module), _part(imported)
            if a != b and b != "podgpu":
                edges.setdefault(a, set()).add(b)
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its smallest part
                visit(nxt, [*path, nxt])

    for start in sorted(edges):
        visit(start, [start])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)
