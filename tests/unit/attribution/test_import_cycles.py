"""No two modules of podgpu.attribution import each other, directly or through others (the pod
store and the pod watch did, through a TYPE_CHECKING import, which grimp reads too)."""

from __future__ import annotations

import grimp


def test_no_module_of_attribution_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("podgpu", cache_dir=None)
    modules = sorted(m for m in graph.modules if m.startswith("podgpu.attribution."))
    cycles = [(a, b) for a in modules for b in sorted(graph.find_modules_directly_imported_by(a))
              if b.startswith("podgpu.attribution.") and graph.chain_exists(importer=b,
                                                                            imported=a)]
    assert cycles == []
