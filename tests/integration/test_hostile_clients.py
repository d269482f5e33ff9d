"""What a hostile or broken client does to `podgpu serve`, against the real process.

Each test reproduces one defect found by hand (half-open connections never closed, a traceback
and an echo per malformed request, version disclosure, no Vary, tracebacks on listen errors).
Clients are raw sockets, so the bytes on the wire are exactly what the test says.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.conftest import ServeProcess
from tests.harness import read_all


def half_open(port: int, n: int) -> list[socket.socket]:
    """`n` connections that send part of a request head and then nothing (slowloris)."""
    out = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        out.append(s)
    return out


def closed_by_peer(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        return read_all(s)[0]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_connections_that_stop_partway_through_their_headers_are_closed(serve: type[ServeProcess]) -> None:
    p = serve("--simulate", "2", "--http-request-timeout", "1")
    p.wait_ready()
    slow = half_open(p.port, 50)
    silent = [socket.create_connection(("127.0.0.1", p.port)) for _ in range(10)]  # send nothing
    assert p.get("/metrics")[0] == 200  # answered while they hang
    assert all(closed_by_peer(s, 5.0) for s in slow + silent)
    # a keep-alive connection that completed a request is not cut by the request deadline
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as ka:
        ka.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ka.recv(65536).startswith(b"HTTP/1.1 ")
        # the request deadline has passed for ka once a connection opened after its answer has
        # been closed by it: an event, not a sleep
        with socket.create_connection(("127.0.0.1", p.port)) as later:
            assert closed_by_peer(later, 10.0)
        ka.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ka.recv(65536).startswith(b"HTTP/1.1 ")
    _, err = p.stop()
    assert err.count("did not complete a request") == 1, err  # rate-limited: one line


def test_at_the_connection_cap_half_open_connections_make_room_for_scrapes(serve: type[ServeProcess]) -> None:
    p = serve("--simulate", "2", "--http-max-connections", "64")
    p.wait_ready()
    base = open_fds(p.proc.pid)
    slow = half_open(p.port, 600)  # ten times the cap, never finishing a request
    statuses = [p.get("/metrics")[0] for _ in range(20)]
    assert statuses == [200] * 20
    assert open_fds(p.proc.pid) <= base + 64 + 2
    evicted = sum(closed_by_peer(s, 0.01) for s in slow[:500])
    assert evicted >= 500 - 64  # the oldest went first
    for s in slow:
        s.close()
    _, err = p.stop()
    assert err.count("connection cap 64 reached") == 1, err
    assert "Traceback" not in err


def test_malformed_requests_get_a_short_400_no_echo_no_traceback(serve: type[ServeProcess]) -> None:
    p = serve("--simulate", "1")
    p.wait_ready()
    long_line = b"GET /" + b"A" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    for request in (b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n", long_line,
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
                    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                    b"GET /metrics HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n"):
        answer = raw(p.port, request)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0], answer[:200]
        assert body == b"400 Bad Request\n"
        assert b"AAAA" not in answer and b"9.9" not in answer
    for _ in range(50):
        raw(p.port, b"GET /metrics HTTP/9.9\r\n\r\n")
    _, err = p.stop()
    assert "Traceback" not in err
    assert err.count("bad request from") <= 1, err  # one line, then held back for a minute
    assert "A" * 200 not in err  # the log does not carry the 100 KB line either


def test_no_version_disclosure_and_vary_on_metrics(serve: type[ServeProcess]) -> None:
    p = serve("--simulate", "1")
    p.wait_ready()
    answers = [p.get("/metrics"), p.get("/health"), p.get("/"), p.get("/nope")]
    req = urllib.request.Request(p.url + "/metrics", method="POST", data=b"x")
    try:
        urllib.request.urlopen(req, timeout=5)
    except urllib.error.HTTPError as e:
        answers.append((e.code, dict(e.headers), b""))
    bad = raw(p.port, b"GET / HTTP/9.9\r\n\r\n").decode("latin-1")
    assert [a[0] for a in answers] == [200, 200, 200, 404, 405]
    for _status, headers, _ in answers:
        assert headers["Server"] == "podgpu"
    assert "\r\nServer: podgpu\r\n" in bad
    assert "aiohttp" not in bad and "Python" not in bad
    assert answers[0][1]["Vary"] == "Accept-Encoding"
    gz = p.get("/metrics", {"Accept-Encoding": "gzip"})
    assert gz[1]["Content-Encoding"] == "gzip" and gz[1]["Vary"] == "Accept-Encoding"


def run_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podgpu", "serve", "--simulate", "1", *args],
                          capture_output=True, text=True, timeout=60)


def test_listen_failures_are_one_line_with_the_documented_exit_status() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_serve("-a", f"127.0.0.1:{port}")
    assert res.returncode == 1  # runtime failure
    assert res.stderr.strip().splitlines()[-1] == (
        f"podgpu: --address 127.0.0.1:{port}: port {port} is already in use (another exporter?)")
    for address, needle in (("nonexistent.invalid:9400", "cannot resolve host 'nonexistent.invalid'"),
                            ("192.0.2.1:9400", "192.0.2.1 is not an address of this machine")):
        res = run_serve("-a", address)
        assert res.returncode == 2, (address, res.stderr)  # bad input
        assert "Traceback" not in res.stderr
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith(f"podgpu: --address {address}: ") and needle in last, last



def test_a_tls_handshake_that_never_finishes_is_closed_by_the_request_deadline(
        serve: type[ServeProcess], tmp_path: Path) -> None:
    # asyncio's own TLS handshake timeout is 60 s, and the guard only sees a connection after
    # its handshake: without passing the deadline on, these would hold descriptors for a minute.
    from tests.tlsutil import Pki

    pki = Pki(tmp_path / "pki", "t")
    leaf = pki.leaf("server", server=True)
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {leaf.cert}\n  key_file: {leaf.key}\n")
    p = serve("--simulate", "1", "--web-config-file", str(config), "--http-request-timeout", "1")
    p.wait_log("listening on", timeout=30)  # ready: the TLS port accepts
    silent = [socket.create_connection(("127.0.0.1", p.port)) for _ in range(5)]
    partial = socket.create_connection(("127.0.0.1", p.port))
    partial.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, then nothing
    assert all(closed_by_peer(s, 10.0) for s in [*silent, partial])
