"""`podgpu serve --simulate` end to end: the agent in this process on a port the OS picks (the
parts are the real ones; tests/conftest.py InProcessAgent), and as a real process where the
process is what is tested (exit status and stderr on bad input)."""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podgpu.fields import load_default
from tests.conftest import InProcessAgent, wait_for

EXPECTED_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                   "DCGM_FI_DRIVER_VERSION"}


def parse(body: bytes) -> dict[str, list]:  # type: ignore[type-arg]
    return {f.name: f.samples for f in text_string_to_metric_families(body.decode())}


def test_serves_every_default_field_per_gpu_with_the_exact_label_set(
        agent: type[InProcessAgent], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    p = agent("--simulate", "4", "-c", "1000")
    p.wait_ready()
    status, headers, body = p.get("/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = parse(body)
    for row in load_default().metrics:
        samples = fams[row.name]
        assert sorted(s.labels["gpu"] for s in samples) == ["0", "1", "2", "3"], row.name
        for s in samples:
            # the built-in simulated scenario: GPU 0 held by one container (pod labels), GPU 1
            # time-sliced by two (none, no arbitrary winner), GPUs 2-3 unallocated
            pods = {"container", "namespace", "pod"} if s.labels["gpu"] == "0" else set()
            if row.name == "DCGM_FI_DEV_XID_ERRORS":  # dcgm-exporter's XID description
                pods |= {"err_code", "err_msg"}
            assert set(s.labels) == EXPECTED_LABELS | pods, (row.name, s.labels)
            assert s.labels["Hostname"] == "test-node"
    assert {s.labels["pod"] for s in fams["podgpu_gpu_allocation"]} == {
        "train-0", "infer-a", "infer-b"}
    status, _, hbody = p.get("/health")
    assert status == 200 and json.loads(hbody)["status"] == "ok"
    status, headers, gz = p.get("/metrics", {"Accept-Encoding": "gzip"})
    assert headers.get("Content-Encoding") == "gzip"
    assert parse(gzip.decompress(gz)).keys() == fams.keys()
    status, headers, page = p.get("/")
    assert status == 200 and b'href="./metrics"' in page and b'href="./health"' in page
    assert p.get("/nope")[0] == 404
    assert p.stop() == 0
    assert "SIMULATED GPU node: 4 x NVIDIA H100 80GB HBM3" in caplog.text


def test_busy_gpus_follow_the_square_wave_across_scrapes(agent: type[InProcessAgent]) -> None:
    """The 20 s / 20 s pattern compressed to 2 s / 2 s. Phases are measured on podgpu's own clock
    (each snapshot's `podgpu_last_collect_timestamp_seconds`), not on the test's, so a loaded
    machine that scrapes late only widens the bracket around each edge."""
    p = agent("--simulate", "4", "-c", "200", "--simulate-burn", "2,2", "--simulate-scenario", "none")
    p.wait_ready()
    seen: dict[float, dict[str, float]] = {}  # snapshot time -> {gpu: utilisation}

    def edges(gpu: str) -> list[tuple[float, float]]:
        """(last snapshot before, first snapshot after) each change of `gpu`'s value."""
        stamps = sorted(seen)
        return [(a, b) for a, b in zip(stamps, stamps[1:], strict=False)
                if seen[a][gpu] != seen[b][gpu]]

    def four_edges_each() -> bool:
        fams = parse(p.get("/metrics")[2])
        (stamp,) = (s.value for s in fams["podgpu_last_collect_timestamp_seconds"])
        seen[stamp] = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_GPU_UTIL"]}
        return all(len(edges(gpu)) >= 4 for gpu in ("0", "1"))

    wait_for(four_edges_each, timeout=60, what="four busy/idle edges on GPUs 0 and 1",
             interval=0.05)
    slack = 0.5  # a collect cycle's read and its end stamp are apart by the cycle's own work
    for gpu in ("0", "1"):
        assert {v[gpu] for v in seen.values()} == {0.0, 100.0}
        found = edges(gpu)
        for (a0, b0), (a1, b1) in zip(found, found[1:], strict=False):
            # the phase between two edges lasted between a1 - b0 and b1 - a0 seconds: 2 s in it
            assert a1 - b0 - slack <= 2.0 <= b1 - a0 + slack, (gpu, found)
    assert {v["2"] for v in seen.values()} == {0.0} and {v["3"] for v in seen.values()} == {0.0}


def test_concurrent_scrapes_all_succeed(agent: type[InProcessAgent]) -> None:
    p = agent("--simulate", "8")
    p.wait_ready()
    results: list[int] = []

    def worker() -> None:
        for _ in range(25):
            status, _, body = p.get("/metrics")
            results.append(status if b"DCGM_FI_DEV_GPU_UTIL" in body else -1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 200


def test_bad_metric_list_exits_2_naming_file_line_and_reason(tmp_path: Path) -> None:
    bad = tmp_path / "custom.csv"
    bad.write_text("# mine\nDCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_DEV_SM_CLOK, gauge, typo\n")
    res = subprocess.run([sys.executable, "-m", "podgpu", "-f", str(bad), "--simulate", "1",
                          "-a", "127.0.0.1:0"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2
    assert f"{bad}:3: unknown DCGM field 'DCGM_FI_DEV_SM_CLOK'" in res.stderr
    assert "DCGM_FI_DEV_SM_CLOCK" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_flags_and_env_exit_2(tmp_path: Path) -> None:
    for argv, env, needle in (
        (["serve", "--simulate", "4xFOO"], {}, "unknown model 'FOO'"),
        # before: `-c 10` was exit 2; it now starts at 100 ms with a warning (test_options.py)
        (["serve", "--simulate", "1", "-c", "10ms"], {}, "expected milliseconds"),
        (["serve", "--simulate", "1", "--web-config-file", "w.yml"], {},
         "w.yml: cannot read the web config"),
        (["serve", "--simulate", "1"], {"DCGM_EXPORTER_INTERVAL": "x"}, "DCGM_EXPORTER_INTERVAL"),
    ):
        res = subprocess.run([sys.executable, "-m", "podgpu", *argv], capture_output=True,
                             text=True, timeout=30, env={"PATH": "/usr/bin:/bin", **env})
        assert res.returncode == 2, (argv, res.stderr)
        assert needle in res.stderr


def test_fields_command_lists_the_catalog() -> None:
    res = subprocess.run([sys.executable, "-m", "podgpu", "fields"], capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["FIELD", "ID", "TYPE"]
    util = next(ln for ln in lines if ln.startswith("DCGM_FI_DEV_GPU_UTIL "))
    assert "203" in util and "nvmlDeviceGetUtilizationRates" in util
    csv = subprocess.run([sys.executable, "-m", "podgpu", "fields", "--format", "csv"],
                         capture_output=True, text=True, timeout=30).stdout
    from podgpu.fields import parse_metric_list

    assert len(parse_metric_list(csv).metrics) > 50  # the generated list is itself valid


def test_the_listener_counts_are_exported_from_the_next_cycle(agent: type[InProcessAgent]) -> None:
    """The connection guard's counters were kept but never exported."""
    p = agent("--simulate", "1", "-c", "200")
    p.wait_ready()
    def scraped() -> str:
        body = p.get("/metrics")[2].decode()
        return body if "podgpu_http_connections_closed_total" in body else ""

    body = wait_for(scraped, what="the guard's counts")
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    closed = {s.labels["reason"]: s.value for s in fams["podgpu_http_connections_closed"].samples}
    assert closed == {"evicted": 0.0, "refused": 0.0, "timed_out": 0.0, "memory": 0.0}
    assert fams["podgpu_http_held_bytes"].samples[0].value >= 0
    assert fams["podgpu_http_open_connections"].samples[0].value >= 0
