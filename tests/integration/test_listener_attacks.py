"""Short form of bench/listener_attacks.py against the real `podgpu serve`:
silent TCP connects to the TLS port and pipelining clients that never read, beside scrapers.
Before the fix, 300 silent TLS connects took +96 MiB and no pipelining non-reader was ever closed
(bench/RESULTS.md "Listener attacks"). Counts and bounds, not times: each attacking connection
must be closed within the request deadline + 5 s, measured by the attacker."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.conftest import ServeProcess, http_get, wait_for
from tests.harness import unverified_tls
from tests.support.listener_attacks import run_attack, tls_config


def test_silent_tls_connects_are_counted_timed_and_cheap() -> None:
    res = run_attack("tls-silent", conns=300, duration=8.0, scrapers_n=5, request_timeout=2.0,
                     gpus=2, max_rss_growth_mib=20.0, settle=0)
    assert res.failed == 0, res.failures
    assert res.scrapes >= 5 * 5  # the scrapers ran
    assert res.attack_closed_by_server >= 300  # every first wave was closed by the deadline
    assert res.attack_lifetime_s_max <= 2.0 + 5.0, res
    assert res.rss_mib_growth <= 20.0, res  # before: +96 MiB for 300
    assert res.log_lines <= 10 and res.exit_status == 0, res.log_tail


def test_pipelining_clients_that_never_read_are_closed() -> None:
    res = run_attack("pipeline", conns=400, duration=8.0, scrapers_n=5, request_timeout=2.0,
                     gpus=2, max_rss_growth_mib=20.0, settle=0)
    assert res.failed == 0, res.failures
    assert res.attack_closed_by_server >= 400, res  # before: none closed
    assert res.attack_lifetime_s_max <= 2.0 + 5.0, res
    assert res.rss_mib_growth <= 20.0, res
    assert res.log_lines <= 10 and res.exit_status == 0, res.log_tail


def test_tls_connections_count_against_the_cap_before_their_handshake(tmp_path: Path) -> None:
    config = tls_config(tmp_path)
    p = ServeProcess("--simulate", "1", "--web-config-file", str(config),
                     "--http-max-connections", "64", "--http-request-timeout", "30")
    try:
        p.wait_log("listening on", timeout=30)
        base = len(list(Path(f"/proc/{p.proc.pid}/fd").iterdir()))
        silent = [socket.create_connection(("127.0.0.1", p.port)) for _ in range(400)]
        ctx = unverified_tls()

        def evicted() -> float:
            body = http_get(f"https://127.0.0.1:{p.port}/metrics", context=ctx)[2].decode()
            return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
                       if line.startswith('podgpu_http_connections_closed_total{reason="evicted"}'))

        # every silent connect has been accepted: all but the cap's worth were evicted
        wait_for(lambda: evicted() >= 400 - 64, timeout=30, what="the silent connects evicted",
                 interval=0.2)
        fds = len(list(Path(f"/proc/{p.proc.pid}/fd").iterdir()))
        assert fds <= base + 64 + 8, fds  # not one descriptor per silent connect
        for _ in range(5):  # a scraper still gets in: the oldest silent ones make room
            with socket.create_connection(("127.0.0.1", p.port), timeout=5) as raw, \
                    ctx.wrap_socket(raw) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                assert s.recv(64).startswith(b"HTTP/1.1 200 ")
        for conn in silent:
            conn.close()
    finally:
        _, err = p.stop()
    assert err.count("connection cap 64 reached") == 1, err
    assert "Traceback" not in err


def _read_answers(s: socket.socket, n: int) -> list[bytes]:
    """`n` HTTP answers (status line + body by Content-Length) read off `s`."""
    data = b""
    answers: list[bytes] = []
    while len(answers) < n:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"closed after {len(answers)} answers"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(data) < length:
            chunk = s.recv(65536)
            assert chunk
            data += chunk
        answers.append(head.split(b"\r\n")[0] + b" " + data[:length])
        data = data[length:]
    return answers


def test_a_pipelining_client_that_reads_gets_every_answer_in_order(serve) -> None:  # type: ignore[no-untyped-def]
    p = serve("--simulate", "2", "--http-request-timeout", "5")
    p.wait_ready()
    body = p.get("/metrics")[2]
    with socket.socket() as s:
        # a small receive buffer and a pause before reading: the answers stall in the kernel,
        # so /metrics goes out through the stepped writer, not in one write
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(10)
        s.connect(("127.0.0.1", p.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 6
                  + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(1.0)
        answers = _read_answers(s, 7)
    assert [a.split(b" ", 2)[1] for a in answers] == [b"200"] * 7
    for a in answers[:6]:  # the chunked writer sends whole bodies (values change, lines not)
        got = a.split(b" ", 3)[3]
        assert got.endswith(b"\n") and got.count(b"\n") == body.count(b"\n")
    assert b'"status"' in answers[6]


def test_the_memory_budget_holds_under_each_shape_and_all_at_once() -> None:
    """Short form of bench/listener_shapes.py (2,000 connections, 64 GPUs there): reconnecting
    clients that stall inside a ~128 KiB ClientHello (+435 MiB for 2,000 before the gate), and
    every shape at once over TLS (+419 MiB for 2,000 before the budget), beside a scraper."""
    from tests.support.listener_shapes import run_shape

    for shape in ("hello-big", "mix"):
        res = run_shape(shape, conns=300, duration=6.0, tls=True, gpus=8,
                        max_rss_growth_mib=20.0, settle=0)
        assert res.failed == 0 and res.scrapes >= 5, res.failures
        assert res.attack_closed_by_server >= 300, res  # the budget or the gate closed them
        assert res.rss_mib_growth <= 20.0, res
        assert res.exit_status == 0 and not any("Traceback" in line for line in res.log_tail)
