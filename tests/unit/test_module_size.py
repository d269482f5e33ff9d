"""No module in src/podgpu is over 400 lines (docs/design.md: small modules, each read whole).

Counted as `wc -l` counts: newline characters."""

from __future__ import annotations

from pathlib import Path

import podgpu

MAX_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    root = Path(podgpu.__file__).parent
    modules = sorted(root.rglob("*.py"))
    assert len(modules) > 50  # the package's own tree, not an installed stub
    over = {str(p.relative_to(root)): n for p in modules
            if (n := p.read_bytes().count(b"\n")) > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines: {over}"
