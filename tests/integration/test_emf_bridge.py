"""`podgpu emf` end to end: the seed's dcgm-exporter sample (A10G) served over real HTTP on
loopback, scraped by the bridge as a real process, sent to a real CloudWatch Logs emulator (moto
in server mode), read back and extracted with the spec-written validator (tests/emf_validator.py).

The expected extraction is computed here from the seed text and the seed's declaration with the
agent's rules as its documentation states them, with a small parser of its own, not
podgpu's: a declaration that matches, the selected names, the one dimension set, the values as
exposed. `Namespace` is the exporter pod's (a target label, as the agent's service-endpoints job
sets it); `pod` stays the workload's (no target label of that job clashes with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.emf_validator import extract
from tests.integration.test_cloudwatch_moto import CREDS, free_port, moto_url, read_events

__all__ = ["moto_url"]

ROOT = Path(__file__).resolve().parents[2]
SEED_CONFIG = ROOT / "tests" / "fixtures" / "seed" / "cwagent-config.json"
SEED_TEXT = (ROOT / "tests" / "fixtures" / "seed" / "dcgm-exporter-metrics-a10g.txt").read_text()
GROUP = "/aws/containerinsights/bridge-e2e/prometheus"
LINE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\} (?P<value>\S+)$')

pytestmark = pytest.mark.integration


class Exporter:
    """A real HTTP server on loopback serving an exposition, stoppable mid-test: a fixed text, or
    `body(k)` for its k-th scrape (counted in `scrapes`)."""

    def __init__(self, body: str | Callable[[int], str]) -> None:
        self.scrapes = 0
        fixed, render = (body.encode(), None) if isinstance(body, str) else (b"", body)
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                exporter.scrapes += 1
                data = fixed if render is None else render(exporter.scrapes).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.instance = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def parse_seed(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"', m["labels"]))
            out.append((m["name"], labels, float(m["value"])))
    return out


def expected_extraction(text: str, job: str, instance: str, cluster: str
                        ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(metric, dimensions) -> value, by the seed declaration and the agent's rules."""
    decl = json.loads(SEED_CONFIG.read_text())["logs"]["metrics_collected"]["prometheus"][
        "emf_processor"]["metric_declaration"][0]
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    out = {}
    for name, labels, value in parse_seed(text):
        labels = {**labels, "job": job, "instance": instance, "Service": "nvidia-dcgm-exporter",
                  "ClusterName": cluster, "Namespace": "gpu-operator",
                  "prom_metric_type": types[name]}
        joined = ";".join(labels.get(s, "") for s in decl["source_labels"])
        if not re.search(decl["label_matcher"], joined):
            continue
        if not any(re.search(sel, name) for sel in decl["metric_selectors"]):
            continue
        if types[name] != "gauge":
            continue  # counters: the first scrape only seeds; none is selected by the seed
        for dset in decl["dimensions"]:
            if all(d in labels for d in dset):
                out[(name, tuple(sorted((d, labels[d]) for d in dset)))] = value
    return out


@pytest.fixture
def exporters() -> Iterator[tuple[Exporter, Exporter]]:
    a = Exporter(SEED_TEXT)
    # a second node's exporter: another GPU, another workload pod
    b = Exporter(SEED_TEXT.replace("gpu-burn-c68d8c774-ltg9s", "gpu-burn-c68d8c774-x7k2p")
                 .replace("GPU-ff76466b", "GPU-0a0a0a0a"))
    yield a, b
    a.stop()
    with contextlib.suppress(OSError):
        b.stop()


def events(url: str, stream: str) -> list[dict[str, Any]]:
    try:
        return read_events(url, GROUP, stream)
    except Exception:  # the group does not exist before the first send
        return []


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_bridge_sends_the_seed_extraction_and_survives_a_target_going_away(
        moto_url: str, exporters: tuple[Exporter, Exporter]) -> None:
    a, b = exporters
    port = free_port()
    cmd = [sys.executable, "-m", "podgpu", "emf", "--scrape", a.url, "--scrape", b.url,
           "--scrape-interval", "0.5", "--emf-interval", "1",
           "--cloudwatch-config", str(SEED_CONFIG), "--cluster-name", "bridge-e2e",
           "--target-label", "Service=nvidia-dcgm-exporter",
           "--target-label", "Namespace=gpu-operator", "--job", "dcgm",
           "--emf-endpoint-url", moto_url, "--aws-region", "us-east-1",
           "--emf-log-stream", "node-1", "-a", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, env={**os.environ, **CREDS, "PYTHONPATH": str(ROOT / "src")},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len({e["timestamp"] for e in events(moto_url, "node-1")}) >= 2,
                 timeout=30, what="two flushes", interval=0.2)
        b.stop()
        stopped_at = time.time() * 1000
        wait_for(lambda: sum(e["timestamp"] > stopped_at + 1000
                             for e in events(moto_url, "node-1")) >= 2,
                 timeout=30, what="two flushes after B stopped", interval=0.2)
        status, health = get(f"http://127.0.0.1:{port}/health")
        _, metrics = get(f"http://127.0.0.1:{port}/metrics")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err

    got: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, tuple[float, ...]]]] = {}
    for e in events(moto_url, "node-1"):
        assert "_aws" in json.loads(e["message"])  # nothing unmatched is sent
        for x in extract(e["message"]):
            assert x.namespace == "ContainerInsights/Prometheus"
            got.setdefault((x.name, x.dimensions), []).append((x.timestamp_ms, x.values))

    want_a = expected_extraction(SEED_TEXT, "dcgm", a.instance, "bridge-e2e")
    want_b = expected_extraction(SEED_TEXT.replace("gpu-burn-c68d8c774-ltg9s",
                                                   "gpu-burn-c68d8c774-x7k2p"),
                                 "dcgm", b.instance, "bridge-e2e")
    assert len(want_a) == 14  # every selector of the seed has a gauge in the A10G sample
    assert set(got) == set(want_a) | set(want_b)
    for key, value in {**want_a, **want_b}.items():
        for _, values in got[key]:
            assert values and all(v == pytest.approx(value) for v in values)
    # A kept arriving after B went away; B's pod stopped
    last_a = max(t for k in want_a for t, _ in got[k])
    last_b = max(t for k in want_b for t, _ in got[k])
    assert last_a > stopped_at + 1000 > last_b
    assert status == 200
    body = json.loads(health)
    assert body["targets"][a.url] == "ok" and body["targets"][b.url].startswith("failing:")
    errors = re.search(rf'podgpu_emf_scrapes_total\{{target="{re.escape(b.url)}",result="error"\}} (\d+)',
                       metrics)
    assert errors and int(errors[1]) >= 1
