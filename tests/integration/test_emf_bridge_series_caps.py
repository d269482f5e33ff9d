"""`podgpu emf` against targets at and past the series caps: one 3.9 MB sample of 330 k labels
(before: counted as one sample, pinned a core, and the process was still alive 60 s after
SIGTERM) and the worst legal answer (4 MiB of 128-label samples). The bad target is named in
/health, the legal one scraped, and SIGTERM ends the process within Kubernetes' default grace
period (30 s, terminationGracePeriodSeconds) with exit 0. Targets: tests/hostile_peers.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from podgpu.bridge.scrape import DEFAULT_MAX_BODY_BYTES, MAX_LABELS, MAX_SERIES_BYTES
from tests.conftest import free_port, http_get, wait_for
from tests.hostile_peers import HostilePeers

pytestmark = pytest.mark.integration
SEED_CONFIG = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "seed" / "cwagent-config.json"
GRACE_SECONDS = 30


def labels(n: int) -> bytes:
    return b",".join(b'l%d="v"' % i for i in range(n))


def heavy_body() -> bytes:
    parts, size, i = [b"# TYPE m gauge\n"], 15, 0
    while True:
        line = b'm{i="%d",' % i + labels(MAX_LABELS - 1) + b"} 1\n"
        if size + len(line) > DEFAULT_MAX_BODY_BYTES:
            return b"".join(parts)
        parts.append(line)
        size += len(line)
        i += 1


def test_bridge_names_the_huge_sample_and_stops_within_the_grace_period() -> None:
    peers = HostilePeers()
    text = "text/plain; version=0.0.4"
    peers.set_body("/onehuge", b"# TYPE m gauge\nm{" + labels(330_000)[:3_900_000] + b'x="y"} 1\n',
                   ctype=text)
    peers.set_body("/heavy", heavy_body(), ctype=text)
    port = free_port()
    cmd = [sys.executable, "-m", "podgpu", "emf", "--scrape", peers.url("/onehuge"),
           "--scrape", peers.url("/heavy"), "--scrape-interval", "5", "--scrape-timeout", "5",
           "--emf-interval", "5", "--cloudwatch-config", str(SEED_CONFIG), "--cluster-name",
           "caps", "--emf-destination", "stdout", "-a", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NODE_NAME": "caps-node"})
    health: dict[str, object] = {}
    try:
        wait_for(lambda: proc.poll() is not None or peers.hits.get("/heavy", 0) >= 2,
                 timeout=60, what="two scrapes of /heavy", interval=0.2)

        def health_answered() -> bool:
            nonlocal health
            try:
                status, _, body = http_get(f"http://127.0.0.1:{port}/health")
            except OSError:
                return False
            health = json.loads(body) if status == 200 else {}
            return status == 200

        wait_for(health_answered, timeout=10, what="the bridge's /health", interval=0.2)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(GRACE_SECONDS)
        stderr = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        peers.close()
    assert rc == 0, stderr
    assert "Traceback" not in stderr
    assert f"a line over the limit of {MAX_SERIES_BYTES} bytes per series" in json.dumps(health)
