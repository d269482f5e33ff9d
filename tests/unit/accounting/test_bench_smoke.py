"""`python -m bench.bench_accounting` runs end to end on a short run (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_bench_accounting_runs(tmp_path: Path) -> None:
    out = tmp_path / "acct.json"
    proc = subprocess.run([sys.executable, "-m", "bench.bench_accounting",
                           "--cycles", "60", "--passes", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["pods_median"] == 100 and doc["gpus"] == 8 and doc["cycles"] >= 59
    assert {"advance_cpu_ms", "render_ms", "observe_plus_render_ms"} <= set(doc)
