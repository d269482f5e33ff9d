"""bench/fleet.py end to end on a tiny fleet (the 50-node, 5-minute run is a benchmark, not CI):
the script starts real podgpu nodes and a real Prometheus with the rules, and reports the
numbers bench/RESULTS.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.integration.prometheus_peer import ensure_installed


def test_tiny_fleet_reports_every_number(tmp_path: Path) -> None:
    ensure_installed()
    out = tmp_path / "fleet.json"
    r = subprocess.run([sys.executable, "-m", "bench.fleet", "--nodes", "2",
                        "--gpus", "2", "--duration", "6", "--warmup", "4", "--rules-interval", "1s",
                        "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["up"]["targets_up_now"] == 2
    assert res["up"]["failed_scrapes"] == 0 and res["up"]["scrapes"] >= 2 * 5
    assert res["up"]["min_up_ratio_per_target"] == 1.0
    assert 0 < res["scrape_duration_ms"]["p50_per_target"]["median"] <= res["scrape_duration_ms"]["p99_per_target"]["max"]
    # two simulated GPUs, their pods and podgpu's self-metrics: a few dozen samples per scrape
    assert 40 < res["samples_per_scrape_per_target"] < 400
    assert res["samples_ingested_per_s"] > 0 and res["head_series"] > 2 * 40
    assert res["prometheus"]["rss_bytes_end"] > 0 and res["prometheus"]["cpu_cores"] > 0
    assert res["podgpu_per_node"]["cpu_cores_total"] > 0 and res["podgpu_per_node"]["rss_bytes_median"] > 0
    assert res["rule_group_eval_ms"] > 0  # the shipped rules were loaded and evaluated
