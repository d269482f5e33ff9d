"""`podgpu serve` with only its core dependencies installed (scripts/core-versions runs this on
the lowest versions pyproject.toml allows and on requirements.lock's): /metrics over plain HTTP,
and over TLS with a client certificate and basic auth, read by Python's own HTTP client; and
1,000 reconnecting pipelining non-readers beside a scraper that keeps being answered."""

from __future__ import annotations

import base64
import contextlib
import gzip
import socket
import ssl
from pathlib import Path

import bcrypt

from tests.conftest import ServeProcess, http_get, wait_for
from tests.tlsutil import Pki


def _get(port: int, path: str, ctx: ssl.SSLContext | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET over TLS to localhost (the certificate's name) when `ctx`, else plain HTTP."""
    base = f"https://localhost:{port}" if ctx else f"http://127.0.0.1:{port}"
    return http_get(base + path, headers, timeout=10, context=ctx)


def test_metrics_over_plain_http_identity_and_gzip(serve: type[ServeProcess]) -> None:
    p = serve("--simulate", "2")
    p.wait_ready()
    status, headers, body = _get(p.port, "/metrics", headers={"Accept-Encoding": "identity"})
    assert status == 200 and b"DCGM_FI_DEV_GPU_UTIL{" in body
    assert "Content-Encoding" not in headers and headers["Server"] == "podgpu"
    status, headers, gz = _get(p.port, "/metrics", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert b"DCGM_FI_DEV_GPU_UTIL{" in gzip.decompress(gz)


def test_metrics_over_mutual_tls_with_basic_auth(serve: type[ServeProcess], tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki", "c")
    server = pki.leaf("server", server=True)
    client = pki.leaf("scraper", server=False)
    config = tmp_path / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {server.cert}\n  key_file: {server.key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki.ca}\n"
        f"basic_auth_users:\n  prom: '{bcrypt.hashpw(b'pw', bcrypt.gensalt(4)).decode()}'\n")
    p = serve("--simulate", "1", "--web-config-file", str(config))
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(str(client.cert), str(client.key))
    auth = {"Authorization": "Basic " + base64.b64encode(b"prom:pw").decode()}
    def scraped() -> bytes:
        try:
            status, _, body = _get(p.port, "/metrics", ctx, auth)
        except OSError:
            return b""
        return body if status == 200 else b""

    body = wait_for(scraped, timeout=20, what="/metrics over mutual TLS", interval=0.1)
    assert b"DCGM_FI_DEV_GPU_UTIL{" in body
    assert _get(p.port, "/metrics", ctx)[0] == 401
    assert _get(p.port, "/health", ctx)[0] == 200


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_reconnecting_pipelining_non_readers_stay_bounded_while_scrapes_are_served(
        serve: type[ServeProcess]) -> None:
    p = serve("--simulate", "8", "--http-request-timeout", "2")
    p.wait_ready()
    for _ in range(5):
        assert p.get("/metrics")[0] == 200
    before = _rss_kib(p.proc.pid)
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n" * 40
    socks: list[socket.socket] = []
    peak = before
    served = 0
    for _round in range(3):  # each round: 1,000 connect, pipeline, never read; then reconnect
        for s in socks:
            s.close()
        socks = []
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", p.port), timeout=5)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            with contextlib.suppress(OSError):
                s.sendall(request)
            socks.append(s)
        assert p.get("/metrics")[0] == 200
        served += 1
        peak = max(peak, _rss_kib(p.proc.pid))
    for s in socks:
        s.close()
    assert served == 3
    assert (peak - before) / 1024 <= 40, f"+{(peak - before) / 1024:.1f} MiB"
