"""HTTP/1.1 on the wire against the real `podgpu serve`, from real clients: Python's ssl
(OpenSSL) with a small receive window, `openssl s_client` splitting records at odd sizes, and raw
sockets whose bytes are exactly what each test says.

Each test is a defect found by trying the listener as an attacker would: pipelined HTTPS answers
spliced into each other (the second head inside the first body, the last two never answered),
Content-Length with Transfer-Encoding answered and the smuggled request after it too, a body
read to its end before the answer, `Expect: 100-continue` never answered, a 400 eaten by a
reset, asyncio ERROR lines on ordinary closes, and a ClientHello buffered up to 128 KiB."""

from __future__ import annotations

import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Serve, read_all, unverified_tls
from tests.support.listener_attacks import tls_config

GET = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nAccept-Encoding: identity\r\n\r\n"
LAST = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"


def answers(raw: bytes) -> list[tuple[bytes, dict[bytes, bytes], bytes]]:
    """Each answer in `raw` as a client reads it: the status line, the headers, a body of
    Content-Length bytes. Fails on bytes that are not a whole answer."""
    out = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"not an answer head: {raw[:120]!r}"
        status, *lines = head.split(b"\r\n")
        assert status.startswith(b"HTTP/1.1 "), f"not a status line: {status[:120]!r}"
        headers = {n.lower(): v for n, _, v in (x.partition(b": ") for x in lines)}
        length = int(headers[b"content-length"])
        assert len(rest) >= length, f"answer cut: {len(rest)} of {length} bytes"
        out.append((status, headers, rest[:length]))
        raw = rest[length:]
    return out


@pytest.fixture(scope="module")
def tls_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """64 simulated GPUs (a ~380 KB /metrics), one collection only, over TLS."""
    config = tls_config(Path(tmp_path_factory.mktemp("tls")))
    agent = Serve(["--simulate", "64xH100", "-c", "3600000", "--web-config-file", str(config)],
                  tls=True)
    agent.wait_ready()
    yield agent
    rc, err = agent.stop()
    assert rc == 0 and "ERROR" not in err and "Traceback" not in err, err[-2000:]


@pytest.fixture(scope="module")
def agent() -> Iterator[Serve]:
    agent = Serve(["--simulate", "64xH100", "-c", "3600000"])
    agent.wait_ready()
    yield agent
    rc, err = agent.stop()
    # ordinary closes (Connection: close, HTTP/1.0, half-closed, 400s) log no asyncio ERROR
    assert rc == 0 and "ERROR" not in err and "Traceback" not in err, err[-2000:]


def small_window(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    return s


@pytest.mark.parametrize("run", range(5))
def test_pipelined_https_answers_come_back_whole_and_in_order_to_a_small_window(
        tls_agent: Serve, run: int) -> None:
    with unverified_tls().wrap_socket(small_window(tls_agent.port)) as s:
        for request in (GET, GET, GET, LAST):  # one TLS record each, sent before any read
            s.sendall(request)
        raw, _ = read_all(s)
    got = answers(raw)
    assert [a[0] for a in got] == [b"HTTP/1.1 200 OK"] * 4
    bodies = {a[2] for a in got}
    assert len(bodies) == 1 and len(got[0][2]) > 300_000  # one collection: the same body
    assert got[0][2].startswith(b"# HELP") and b"HTTP/1.1" not in got[0][2]


def test_openssl_s_client_with_odd_record_splits_gets_every_pipelined_answer(
        tls_agent: Serve) -> None:
    pad = b"X-Pad: " + b"p" * 301 + b"\r\n"  # heads of ~380 bytes: records cut them anywhere
    requests = (GET[:-2] + pad + b"\r\n") * 3 + LAST[:-2] + pad + b"\r\n"
    out = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{tls_agent.port}", "-quiet",
         "-ign_eof", "-max_send_frag", "512"],  # the smallest record s_client will send
        input=requests, capture_output=True, timeout=60, check=False)
    got = answers(out.stdout)
    assert [a[0] for a in got] == [b"HTTP/1.1 200 OK"] * 4
    assert len({a[2] for a in got}) == 1


def test_content_length_with_transfer_encoding_gets_one_400_and_a_close(agent: Serve) -> None:
    smuggled = b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\n\r\n"
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        s.sendall(b"POST /metrics HTTP/1.1\r\nHost: podgpu\r\nContent-Length: 5\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled)
        raw, reset = read_all(s)
    got = answers(raw)
    assert [a[0] for a in got] == [b"HTTP/1.1 400 Bad Request"]  # the smuggled GET: none
    assert got[0][1][b"connection"] == b"close" and not reset


def test_expect_100_continue_gets_its_final_status_before_any_body_byte(agent: Serve) -> None:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        s.sendall(b"POST /health HTTP/1.1\r\nHost: podgpu\r\nContent-Length: 100000000000\r\n"
                  b"Expect: 100-continue\r\n\r\n")
        head = s.recv(65536)  # no body byte sent: the answer comes from the head alone
    status, headers, _ = answers(head)[0]
    assert status == b"HTTP/1.1 405 Method Not Allowed" and headers[b"connection"] == b"close"


def test_a_large_body_is_not_read_to_its_end(agent: Serve) -> None:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        s.sendall(b"POST /health HTTP/1.1\r\nHost: podgpu\r\nContent-Length: 100000000000\r\n\r\n")
        status = answers(s.recv(65536))[0][0]
        sent, refused = 0, False
        try:
            for _ in range(4096):  # up to 256 MiB: far past the bounded discard
                sent += s.send(b"x" * 65536)
        except OSError:  # reset (or a full window that never drains): the body was dropped
            refused = True
    assert status == b"HTTP/1.1 405 Method Not Allowed"
    assert refused and sent < 64 << 20, sent


def test_a_400_is_delivered_before_the_close_even_with_unread_bytes(agent: Serve) -> None:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: podgpu\r\nBad Header\r\n\r\n" + b"y" * 30000)
        raw, reset = read_all(s)
    assert answers(raw)[0][0] == b"HTTP/1.1 400 Bad Request" and not reset


@pytest.mark.parametrize("request_bytes", [
    LAST,
    b"GET /metrics HTTP/1.0\r\nAccept-Encoding: identity\r\n\r\n",
    GET,  # then half-closed
])
def test_ordinary_closes_of_large_answers_to_a_small_window(agent: Serve,
                                                             request_bytes: bytes) -> None:
    with small_window(agent.port) as s:
        s.sendall(request_bytes)
        s.shutdown(socket.SHUT_WR)
        raw, reset = read_all(s)
    got = answers(raw)
    assert got[0][0] == b"HTTP/1.1 200 OK" and len(got[0][2]) > 300_000 and not reset
    # the module's fixture checks the agent logged no ERROR for any of these closes


def test_a_clienthello_over_16_kib_is_refused_from_its_length_field(tls_agent: Serve) -> None:
    with socket.create_connection(("127.0.0.1", tls_agent.port), timeout=10) as s:
        # a handshake record of 16 KiB whose ClientHello says 128 KiB, then nothing more
        s.sendall(b"\x16\x03\x01\x40\x00\x01" + (128 * 1024).to_bytes(3, "big") + b"\x03\x03")
        raw, _ = read_all(s)  # closed at once: no wait for the rest, no deadline
    assert raw == b""
    with unverified_tls().wrap_socket(socket.create_connection(("127.0.0.1", tls_agent.port),
                                                               timeout=10)) as s:
        s.sendall(LAST)  # an ordinary ClientHello still gets through
        assert answers(read_all(s)[0])[0][0] == b"HTTP/1.1 200 OK"


def test_tls_1_2_and_1_3_clients_both_complete(tls_agent: Serve) -> None:
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        ctx = unverified_tls()
        ctx.minimum_version = ctx.maximum_version = version
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", tls_agent.port),
                                                      timeout=10)) as s:
            s.sendall(LAST)
            assert answers(read_all(s)[0])[0][0] == b"HTTP/1.1 200 OK"
