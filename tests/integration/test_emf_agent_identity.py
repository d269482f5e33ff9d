"""With real processes:

- `podgpu serve` on a simulated node with the seed's config, stdout destination and
  POD_NAMESPACE=gpu-operator: every event's dimensions are the restated agent's (the oracle,
  tests/unit/sinks/cloudwatch/agent_oracle.py, fed podgpu's own /metrics as the agent's
  service-endpoints job would scrape it): Namespace gpu-operator, the workload's pod, no Unit;
- `podgpu emf` scraping thousands of unmatched, changing, unlabelled gauges with
  --emf-keep-unmatched: every event at most 256 KiB, delivery continues, every sample counted;
- a `serve` whose port is taken sends nothing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import http_get, wait_for
from tests.integration.aws_fakes import free_port, podgpu_env
from tests.integration.test_emf_bridge import Exporter
from tests.unit.sinks.cloudwatch import agent_oracle as oracle

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
MAX_EVENT = 256 * 1024 - 26


class Lines:
    """A process's stdout lines and stderr, each read on its own thread (the only readers)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.err: list[str] = []
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout, proc.stderr
        self._threads = [
            threading.Thread(target=lambda: self.lines.extend(iter(out.readline, "")), daemon=True),
            threading.Thread(target=lambda: self.err.extend(iter(err.readline, "")), daemon=True)]
        for t in self._threads:
            t.start()

    def alive(self) -> None:
        assert self.proc.poll() is None, "".join(self.err)

    def wait_windows(self, n: int, stamp: Callable[[dict[str, Any]], Any], *, timeout: float,
                     what: str, each: Callable[[], None] | None = None) -> None:
        """Until the lines carry `n` distinct windows (`stamp` of each event); `each` runs at
        every poll while waiting."""
        def enough() -> bool:
            self.alive()
            if len({stamp(json.loads(x)) for x in list(self.lines)}) >= n:
                return True
            if each is not None:
                each()
            return False

        wait_for(enough, timeout, what, interval=0.2)

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        for t in self._threads:
            t.join(10)
        return "".join(self.err)


def identities(docs: list[dict[str, Any]]) -> set[oracle.Identity]:
    out = set()
    for doc in docs:
        for d in doc.get("_aws", {}).get("CloudWatchMetrics", []):
            for m in d["Metrics"]:
                assert "Unit" not in m, m  # the agent path's metrics carry no unit
                for ds in d["Dimensions"]:
                    out.add((d["Namespace"], m["Name"], tuple((k, doc[k]) for k in ds)))
    return out


def test_seed_config_stdout_every_event_is_the_agents() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podgpu", "serve", "--simulate", "4", "-a", f"127.0.0.1:{port}",
         "-c", "200", "--cloudwatch-config", str(SEED), "--emf-destination", "stdout",
         "--emf-interval", "1", "--cluster-name", "e2e",
         "--emf-label", "Service=nvidia-dcgm-exporter"],
        env=podgpu_env(POD_NAMESPACE="gpu-operator"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    out = Lines(proc)
    texts: list[str] = []
    try:
        def scrape_metrics() -> None:
            try:
                status, _, body = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
            except OSError:
                return
            if status == 200:
                texts.append(body.decode())

        out.wait_windows(3, lambda d: d["_aws"]["Timestamp"], timeout=30, what="3 EMF windows",
                         each=scrape_metrics)
    finally:
        out.stop()
    docs = [json.loads(x) for x in out.lines]
    assert docs and texts
    job = oracle.load_job(oracle.SERVICE_ENDPOINTS_JOB)
    target = oracle.target_labels(job, {
        "__address__": f"127.0.0.1:{port}", "__meta_kubernetes_namespace": "gpu-operator",
        "__meta_kubernetes_service_name": "nvidia-dcgm-exporter",
        "__meta_kubernetes_service_annotation_prometheus_io_scrape": "true"})
    assert target is not None
    scrapes = [oracle.scrape(t, job, target, "e2e") for t in texts]
    theirs = set(oracle.extract(oracle.agent_config(SEED.read_text()), oracle.deltas(scrapes)))
    mine = identities(docs)
    assert mine == theirs
    for _, _, dims in mine:
        d = dict(dims)
        assert (d["Namespace"], d["job"], d["pod"]) == (
            "gpu-operator", "kubernetes-service-endpoints", "train-0")


def test_a_serve_whose_port_is_taken_sends_nothing() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run(
            [sys.executable, "-m", "podgpu", "serve", "--simulate", "2", "-a",
             f"127.0.0.1:{port}", "--cloudwatch-config", str(SEED), "--emf-destination",
             "stdout", "--emf-interval", "1", "--emf-keep-unmatched=true"],
            env=podgpu_env(POD_NAMESPACE="gpu-operator"), capture_output=True, text=True,
            timeout=60)
    assert res.returncode != 0
    assert "already in use" in res.stderr
    assert res.stdout == ""  # no event of the open interval was flushed


def burst(n: int) -> Exporter:
    """An exporter of `n` unlabelled gauges whose values change on every scrape."""
    return Exporter(lambda k: "".join(f"# TYPE burst_gauge_{i:04d} gauge\nburst_gauge_{i:04d} "
                                      f"{(i * 7919 + k * 104729) % 100003 / 7}\n"
                                      for i in range(n)))


def test_burst_of_unmatched_changing_series_is_split_and_delivery_continues(
        tmp_path: Path) -> None:
    n = 3000
    exporter = burst(n)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podgpu", "emf", "--scrape", exporter.url, "--scrape-interval",
         "0.2", "--emf-interval", "2", "--cloudwatch-config", str(SEED), "--emf-destination",
         "stdout", "--emf-keep-unmatched=true", "-a", f"127.0.0.1:{port}"],
        env=podgpu_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = Lines(proc)
    try:
        out.wait_windows(3, lambda d: d["Timestamp"], timeout=60, what="3 delivered windows")
        metrics = http_get(f"http://127.0.0.1:{port}/metrics")[2].decode()
    finally:
        err = out.stop()
    lines = list(out.lines)
    assert all(len(x.encode()) <= MAX_EVENT for x in lines)
    assert max(len(x.encode()) for x in lines) > MAX_EVENT // 2  # they really were split
    by_window: dict[int, dict[str, int]] = {}
    for x in lines:
        doc = json.loads(x)  # whole JSON, never cut
        counts = by_window.setdefault(doc["Timestamp"], {})
        for k, v in doc.items():
            if k.startswith("burst_gauge_"):
                assert k not in counts, f"{k} twice in one interval"
                counts[k] = v["Count"] if isinstance(v, dict) else 1
    windows = sorted(by_window)
    for ts in windows[:-1]:  # every closed interval: every series, the same number of samples
        counts = by_window[ts]
        assert len(counts) == n and len(set(counts.values())) == 1, ts
    sent = next(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith('podgpu_emf_events_total{result="sent"}'))
    assert sent <= len(lines)  # what /metrics counted as sent had reached stdout by then
    assert 'podgpu_emf_events_total{result="too_large"} 0' in metrics
    assert "Traceback" not in err


def test_sample_interval_gives_one_sample_per_interval_like_a_scrape() -> None:
    """--emf-sample-interval 2 at a 0.2 s collection and a 2 s EMF interval: every value the
    events carry is a single sample (a plain number, no Values/Counts distribution), as the
    agent path scraping every 2 s has it; the flag's default keeps every sample (~10)."""
    def run(*extra: str) -> list[dict[str, Any]]:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "podgpu", "serve", "--simulate", "1", "-a",
             f"127.0.0.1:{port}", "-c", "200", "--cloudwatch-config", str(SEED),
             "--emf-destination", "stdout", "--emf-interval", "2", "--cluster-name", "e2e",
             "--emf-label", "Service=nvidia-dcgm-exporter", *extra],
            env=podgpu_env(POD_NAMESPACE="gpu-operator"), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        out = Lines(proc)
        try:
            out.wait_windows(4, lambda d: d["_aws"]["Timestamp"], timeout=30,
                             what="4 EMF windows")
        finally:
            out.stop()
        docs = [json.loads(x) for x in out.lines]
        stamps = sorted({d["_aws"]["Timestamp"] for d in docs})
        # whole intervals only: not the first (started late) nor the last (cut by SIGTERM)
        return [d for d in docs if stamps[0] < d["_aws"]["Timestamp"] < stamps[-1]]

    one = [d["DCGM_FI_DEV_GPU_UTIL"] for d in run("--emf-sample-interval", "2")
           if "DCGM_FI_DEV_GPU_UTIL" in d]
    every = [d["DCGM_FI_DEV_GPU_UTIL"] for d in run() if "DCGM_FI_DEV_GPU_UTIL" in d]
    assert one and all(isinstance(v, int | float) for v in one), one
    assert every and all(isinstance(v, dict) and v["Count"] > 1 for v in every), every
