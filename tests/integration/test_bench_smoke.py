"""The core benchmark runs end to end, and podgpu and the baseline expose the same DCGM series.

Not a timed test: it runs `bench/bench_core.py --quick` on a 2-GPU simulated node and checks the
shape of its JSON and that both exposers (podgpu's renderer and prometheus_client) carry the same
(metric family, gpu) pairs, which is what makes their timings comparable. No timing assertions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "bench_core.py"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "core.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--gpus", "2", "--scrapes", "50", "--concurrency", "4",
         "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_json_has_expected_keys(result: dict) -> None:
    assert {"meta", "targets", "median", "runs", "interval_sweep", "series_check"} <= set(result)
    assert set(result["targets"]) == {
        "seq_p99_ms", "seq_scrapes_per_s_ratio", "conc_scrapes_per_s_ratio", "rss_mb",
        "first_valid_s",
    }
    for t in result["targets"].values():
        assert {"value", "op", "target", "met"} <= set(t)
    for kind in ("podgpu", "baseline"):
        m = result["median"][kind]
        assert {"first_valid_s", "seq", "conc", "rss_mb", "server_cpu_ms_per_scrape_seq"} <= set(m)
        for mode in ("seq", "conc"):
            assert {"p50_ms", "p99_ms", "scrapes_per_s", "scrapes"} <= set(m[mode])
    assert {"cycles", "cpu_ms_per_cycle_sched", "cpu_ms_per_cycle_stat", "collect_backend_ms"} \
        <= set(result["median"]["podgpu"]["idle"])
    assert {"seq_scrapes_per_s", "conc_scrapes_per_s"} <= set(result["median"]["ratios"])
    assert [p["interval_ms"] for p in result["interval_sweep"]["median"]] == [100, 1000]
    run = result["runs"][0]
    assert run["podgpu"]["exit_code"] == 0  # SIGTERM stops podgpu cleanly
    assert run["podgpu"]["seq_connections"] == 1  # podgpu keeps the connection alive


def test_podgpu_and_baseline_expose_the_same_dcgm_series(result: dict) -> None:
    check = result["series_check"]
    podgpu = {tuple(p) for p in check["podgpu"]}
    baseline = {tuple(p) for p in check["baseline"]}
    assert ("DCGM_FI_DEV_GPU_UTIL", "0") in podgpu
    assert ("DCGM_FI_DEV_GPU_UTIL", "1") in podgpu
    assert {gpu for _, gpu in podgpu} == {"0", "1"}
    assert podgpu == baseline, (sorted(podgpu - baseline), sorted(baseline - podgpu))
    assert check["equal"] is True
