"""bench/ is kept runnable: every bench is `python -m bench.NAME` from the repository root, so no
script edits the import path, and every bench a document tells the reader to run is in the tree.
(tests/integration/test_bench_smoke.py imports each one.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
# `python -m bench.NAME` and `bench/NAME.py`; bench.archive's one-offs left the tree at a commit the
# documents name on the same line or, in RESULTS.md, in its opening note.
NAMED = re.compile(r"-m bench\.([a-z_]+)\b|\bbench/([a-z_]+)\.py\b")
ARCHIVE_NOTE = "git show 2fed943:bench/archive/NAME.py"


def edits_of_sys_path(source: str) -> list[int]:
    """The lines of `source` that touch `sys.path`."""
    return sorted({node.lineno for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.Attribute) and node.attr == "path"
                   and isinstance(node.value, ast.Name) and node.value.id == "sys"})


def test_the_check_sees_each_way_of_editing_the_path() -> None:
    assert edits_of_sys_path("import sys\nsys.path.insert(0, 'x')\n") == [2]
    assert edits_of_sys_path("import sys\n\nsys.path[:0] = ['x']\n") == [3]
    assert edits_of_sys_path("import os\nos.path.join('a')\n") == []


def test_no_bench_edits_the_import_path() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(BENCH.rglob("*.py"))
             for line in edits_of_sys_path(path.read_text(encoding="utf-8"))]
    assert not found, found


def test_every_bench_a_document_names_is_in_the_tree() -> None:
    docs = [ROOT / "README.md", BENCH / "RESULTS.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted(BENCH.glob("*.py"))]
    results = (BENCH / "RESULTS.md").read_text(encoding="utf-8")
    assert ARCHIVE_NOTE in results  # where the archived one-offs are
    missing, seen = [], set()
    for doc in docs:
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in NAMED.finditer(line):
                name = m.group(1) or m.group(2)
                seen.add(name)
                if name == "archive" or (BENCH / f"{name}.py").is_file():
                    continue
                missing.append(f"{doc.relative_to(ROOT)}:{lineno}: bench {name}")
    assert {"bench_core", "load", "archive"} <= seen  # the pattern reads the documents
    assert not missing, missing
    archived = [f"{doc.relative_to(ROOT)}:{n}" for doc in docs if doc.name != "RESULTS.md"
                for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
                if "bench/archive/" in line and "2fed943" not in line]
    assert not archived, archived
