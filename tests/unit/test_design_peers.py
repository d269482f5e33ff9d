"""docs/design.md's table of peers is true: the library each peer is reached through is imported by
the modules the table names and by no other module of src/podgpu (a plain import, or
`importlib.import_module` of a literal name, which is how podgpu imports a heavy library late)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "podgpu"
ROW = re.compile(r"^\|([^|]+)\|([^|]+)\|([^|]+)\|\s*$")


def imported_names(source: str) -> set[str]:
    """Every module name `source` imports, by statement or by a literal import_module call."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names


@functools.cache
def imports_by_module() -> dict[str, set[str]]:
    """Each module of src/podgpu (its path below it) and what it imports: parsed once."""
    return {str(path.relative_to(SRC)): imported_names(path.read_text(encoding="utf-8"))
            for path in SRC.rglob("*.py")}


def importers(library: str) -> set[str]:
    """The modules of src/podgpu (paths below it) that import `library` or one of its modules."""
    return {module for module, names in imports_by_module().items()
            if any(n == library or n.startswith(library + ".") for n in names)}


def peer_rows(design: str) -> list[tuple[str, set[str], set[str]]]:
    """(peer, modules, libraries imported) of each row of the "## Peers" table."""
    section = design.split("\n## Peers\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = ROW.match(line)
        if m and not set(m.group(1).strip()) <= set("-") and m.group(1).strip() != "peer":
            rows.append((m.group(1).strip(), set(re.findall(r"`([\w/.]+\.py)`", m.group(2))),
                         set(re.findall(r"`([\w.]+)`", m.group(3)))))
    return rows


def test_the_scan_sees_each_way_of_importing() -> None:
    source = ("import http.client\nfrom botocore.auth import SigV4Auth\n"
              "def f():\n    return importlib.import_module('h2.events')\n")
    assert imported_names(source) == {"http.client", "botocore.auth", "h2.events"}
    assert imported_names("from . import sibling\nimport_module(name)\n") == set()


def test_each_peer_library_is_imported_by_the_modules_the_design_names() -> None:
    rows = peer_rows((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    assert len(rows) >= 5, rows
    wrong = {}
    for peer, modules, libraries in rows:
        assert modules and libraries, peer
        for library in libraries:
            found = importers(library)
            if found != modules:
                wrong[f"{peer} ({library})"] = sorted(found)
    assert not wrong, f"docs/design.md's Peers table says otherwise: {wrong}"
