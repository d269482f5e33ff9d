"""`--src DIR` of the benches that measure another podgpu tree (an older commit's `git archive`)
in the same run: the bench runs again as `python -m bench.NAME` with the same arguments and DIR
first on the import path (PYTHONPATH), so nothing edits `sys.path`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "PODGPU_BENCH_SRC"


def run_from(src: Path | None, module: str) -> None:
    """Return when `src` is None or is what `podgpu` is imported from; else replace this process
    with `python -m MODULE` (same arguments) importing podgpu from `src`."""
    if src is None:
        return
    src = src.resolve()
    if os.environ.get(MARK) != str(src):
        env = {**os.environ, MARK: str(src), "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
        os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], env)
    import podgpu

    if not Path(podgpu.__file__).resolve().is_relative_to(src):
        raise SystemExit(f"--src {src}: podgpu was imported from {podgpu.__file__} instead")
