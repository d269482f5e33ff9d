"""The README picture's pipeline: bench/scrape_log.py records a real podgpu,
and bench/scrape_picture.py turns a scrape log into a real Prometheus TSDB (promtool), asks that
Prometheus for per-pod utilization with query_range, and draws the PNG."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deploy.gen import simnode

from tests.conftest import ROOT, InProcessAgent
from tests.integration.prometheus_peer import ensure_installed

SHARES = {"train-0": 1.0, "infer-a": 0.6, "infer-b": 0.4, "notebook-0": 0.0}


def test_scrape_log_records_a_real_podgpu(tmp_path: Path) -> None:
    p = InProcessAgent("--simulate", "2")  # in this process; scrape_log.py is the real client
    try:
        p.wait_ready()
        log = tmp_path / "log.jsonl"
        r = subprocess.run([sys.executable, "-m", "bench.scrape_log",
                            p.url + "/metrics", "2", str(log)], cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
    finally:
        p.stop()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert 2 <= len(lines) <= 4
    assert all(b["t"] - a["t"] == pytest.approx(1.0, abs=0.5) for a, b in zip(lines, lines[1:], strict=False))
    assert all("DCGM_FI_DEV_GPU_UTIL{" in x["body"] for x in lines)


def test_picture_from_a_log_is_drawn_from_query_range(tmp_path: Path) -> None:
    """A 60 s log of the simulated node (rendered by podgpu's own pipeline, timestamped like a
    1 s scrape) gives, through the TSDB and query_range, each pod its share of its GPU at every
    step, and a PNG."""
    ensure_installed()
    base = time.time() - 120
    log = tmp_path / "log.jsonl"
    with log.open("w") as f:
        for t, body in simnode.expositions(simnode.Node(), [float(i) for i in range(60)]):
            assert body is not None
            f.write(json.dumps({"t": base + t, "body": body.decode()}) + "\n")
        f.write(json.dumps({"t": base + 60, "error": "connection refused"}) + "\n")
    png, out = tmp_path / "p.png", tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "bench.scrape_picture", str(log), str(png),
                        "--title", "test", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads(out.read_text())
    device = {s["metric"]["gpu"]: dict(s["values"]) for s in res["gpus"]}
    pods = {s["metric"]["pod"]: dict(s["values"]) for s in res["pods"]}
    assert set(pods) == set(SHARES)
    gpu_of = {"train-0": "0", "infer-a": "1", "infer-b": "1", "notebook-0": "2"}
    busy = idle = 0
    for pod, values in pods.items():
        assert len(values) >= 55  # one point per second of the log
        for ts, v in values.items():
            d = float(device[gpu_of[pod]][ts])
            assert float(v) == pytest.approx(d * SHARES[pod]), (pod, ts)
            busy += d == 1.0
            idle += d == 0.0
    assert busy and idle  # the burn's square wave is in the picture


def test_a_bad_log_line_names_the_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"t": 1, "body": ""}\nnot json\n')
    r = subprocess.run([sys.executable, "-m", "bench.scrape_picture", str(log),
                        str(tmp_path / "x.png")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert f"{log}:2: not a scrape-log line" in r.stderr


def test_the_h200_log_gives_the_pod_its_exclusive_gpus_square_wave(tmp_path: Path) -> None:
    """The README picture's data: the real H200 run's scrape log through the same pipeline. The
    pod holds GPU 0 alone, so its line is the device's at every step, and the burn shows."""
    ensure_installed()
    log = ROOT / "bench" / "results" / "h200-scrape-log-2026-12-03.jsonl.gz"
    out = tmp_path / "h200.json"
    r = subprocess.run([sys.executable, "-m", "bench.scrape_picture", str(log),
                        str(tmp_path / "h200.png"), "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(out.read_text())
    (pod,) = res["pods"]
    assert pod["metric"] == {"namespace": "default", "pod": "gpu-burn-6c9d8f7b5-x2x7q"}
    (dev,) = res["gpus"]
    assert pod["values"] == dev["values"]
    values = [float(v) for _, v in pod["values"]]
    assert values.count(1.0) >= 60 and values.count(0.0) >= 60  # ~20 s on / 20 s off for 140 s
