"""`podgpu emf` serves /metrics and /health through podgpu.http like `serve`:
its --web-config-file gives TLS and basic auth, its listener the same connection limits. Before,
the bridge ran the standard library's ThreadingHTTPServer: plain HTTP only, no authentication,
a thread per connection. Real process, real TLS clients (Python's ssl), a real exporter to
scrape; certificates generated per test."""

from __future__ import annotations

import base64
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest

from tests.conftest import ROOT, free_port, wait_for
from tests.integration.test_emf_bridge import SEED_CONFIG, SEED_TEXT, Exporter
from tests.tlsutil import Pki

pytestmark = pytest.mark.integration
PASSWORD = "bridge-secret"


def _get(url: str, ctx: ssl.SSLContext | None, auth: str | None) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:  # not listening yet
        return 0, b""


def test_emf_serves_over_tls_with_basic_auth_and_the_same_limits(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki", "bridge")
    pki.leaf("server", server=True)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n  cert_file: pki/server.crt\n  key_file: pki/server.key\n"
                      f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    exporter = Exporter(SEED_TEXT)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "podgpu", "emf", "--scrape", exporter.url, "--scrape-interval", "1",
         "--cloudwatch-config", str(SEED_CONFIG), "--cluster-name", "c", "--emf-destination",
         "stdout", "-a", f"127.0.0.1:{port}", "--web-config-file", str(config),
         "--http-max-connections", "16", "--http-request-timeout", "5"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    base = f"https://localhost:{port}"
    try:
        wait_for(lambda: _get(base + "/health", ctx, None)[0] == 200, timeout=30, what="/health")
        status, body = _get(base + "/metrics", ctx, f"prometheus:{PASSWORD}")
        assert status == 200 and b"podgpu_emf_scrapes_total{" in body
        assert _get(base + "/metrics", ctx, None)[0] == 401
        assert _get(base + "/metrics", ctx, "prometheus:wrong")[0] == 401
        assert _get(base + "/health", ctx, None)[0] == 200  # exempt from auth, as serve's
        # the guard's and auth's counts are exported, in the bytes rendered at the next tick
        # (1 s): /metrics is published per tick, as serve's per collection
        seen: list[str] = []

        def counted() -> bool:
            seen[:] = [_get(base + "/metrics", ctx, f"prometheus:{PASSWORD}")[1].decode()]
            return 'podgpu_http_requests_denied_total{reason="unauthorized"} 2' in seen[0]

        wait_for(counted, timeout=10, what="the 401s in /metrics")
        text = seen[0]
        assert "podgpu_http_auth_failures_total 1" in text
        assert 'podgpu_http_connections_closed_total{reason="evicted"} 0' in text
        assert _get(f"http://127.0.0.1:{port}/metrics", None, None)[0] == 0  # plain HTTP: no answer
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        exporter.stop()
    assert proc.returncode == 0, err
    assert "listening on https://127.0.0.1:" in err and "at most 16 connections, 5 s" in err, err
