"""The core benchmark runs end to end, podgpu and the baseline expose the same DCGM series, every
benchmark imports as `python -m bench.NAME` runs it, and the harness they share does what it says.

Not a timed test: it runs `python -m bench.bench_core --quick` on a 2-GPU simulated node and checks the
shape of its JSON and that both exposers (podgpu's renderer and prometheus_client) carry the same
(metric family, gpu) pairs, which is what makes their timings comparable. No timing assertions.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from typing import Any

import pytest

from tests.harness import ROOT, Serve, free_port, pct, proc_sample, rss_fds, scrape

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "core.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_core", "--gpus", "2", "--scrapes", "50", "--concurrency", "4",
         "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_json_has_expected_keys(result: dict[str, Any]) -> None:
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


def test_podgpu_and_baseline_expose_the_same_dcgm_series(result: dict[str, Any]) -> None:
    check = result["series_check"]
    podgpu = {tuple(p) for p in check["podgpu"]}
    baseline = {tuple(p) for p in check["baseline"]}
    assert ("DCGM_FI_DEV_GPU_UTIL", "0") in podgpu
    assert ("DCGM_FI_DEV_GPU_UTIL", "1") in podgpu
    assert {gpu for _, gpu in podgpu} == {"0", "1"}
    assert podgpu == baseline, (sorted(podgpu - baseline), sorted(baseline - podgpu))
    assert check["equal"] is True


def test_every_benchmark_imports_as_a_module_from_the_root() -> None:
    names = sorted(f"bench.{p.stem}" for p in (ROOT / "bench").glob("*.py"))
    assert "bench.load" in names and "bench.bench_core" in names
    code = "import importlib, sys\nfor n in sys.argv[1:]: importlib.import_module(n)\n"
    proc = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_harness_serves_scrapes_reads_and_stops() -> None:
    with Serve(["--simulate", "2xH100"]) as agent:
        status, body = scrape(agent.url + "/metrics")
        assert status == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in body
        status, zipped = scrape(agent.url + "/metrics", gzip=True)
        assert status == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in gzip.decompress(zipped)
        assert scrape(agent.url + "/no-such-path")[0] == 404
        sample = proc_sample(agent.pid)
        assert sample["rss_kib"] > 0 and sample["threads"] >= 1 and sample["fds"] >= 3
        rss_mib, fds = rss_fds(agent.pid)
        assert rss_mib == sample["rss_kib"] / 1024 and fds >= 3
    assert agent.exit_status == 0 and not agent.running()


def test_harness_reports_an_agent_that_never_gets_ready() -> None:
    agent = Serve(["--simulate", "2xH100", "--no-such-flag"])
    with pytest.raises(RuntimeError, match="no-such-flag"):
        agent.wait_ready(timeout=60)
    assert agent.exit_status == 2


def test_free_port_is_bindable_and_pct_is_nearest_rank() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
    assert pct([], 0.99) == 0.0
    assert pct([float(v) for v in range(1, 101)], 0.5) == 51.0
    assert pct([3.0, 1.0, 2.0], 0.99) == 3.0
