"""Fuzzing the HTTP request line and headers against the real `podgpu serve`.

Every request, however malformed, gets a short, well-formed answer or a closed connection within
the socket timeout: never a 500, never a hang, never an echo of what was sent; and the server
keeps answering /metrics afterwards. A slow stand-in for a hostile peer: raw sockets, bytes as
hypothesis makes them.
"""

from __future__ import annotations

import logging
import re
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import InProcessAgent
from tests.harness import read_all

STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")


class _Tracebacks(logging.Handler):
    """Every log record that carries an exception (what a process would print as a traceback)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.seen.append(self.format(record))


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessAgent]:
    """The agent in this process (tests/conftest.py InProcessAgent), its listener the real one."""
    tracebacks = _Tracebacks()
    logging.getLogger().addHandler(tracebacks)
    try:
        p = InProcessAgent("--simulate", "1", "--http-request-timeout", "2")
        p.wait_ready()
        yield p
        assert p.stop() == 0
    finally:
        logging.getLogger().removeHandler(tracebacks)
    assert not tracebacks.seen, "\n".join(tracebacks.seen)[-4000:]


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)  # the request ends here: a complete or a truncated one
        except OSError:
            return b""  # the server closed first (e.g. it had answered 400 already)
        return read_all(s)[0]


token = st.sampled_from([b"GET", b"POST", b"HEAD", b"OPTIONS", b"PRI", b"get", b"G\x00T", b""]) \
    | st.binary(max_size=8)
target = st.sampled_from([b"/metrics", b"/health", b"/", b"*", b"//", b"/%00", b"/metrics?x=1",
                          b"http://a/metrics", b"/\xff", b"/" + b"a" * 9000]) | st.binary(max_size=20)
version = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/9.9", b"HTTP/2.0", b"HTTP/1.1 x",
                           b"http/1.1", b""]) | st.binary(max_size=10)
header_name = st.sampled_from([b"Host", b"Accept-Encoding", b"Content-Length", b"Transfer-Encoding",
                               b"Connection", b"Upgrade", b"Expect", b"X", b"", b"Bad Name"]) \
    | st.binary(max_size=12)
header_value = st.sampled_from([b"gzip", b"chunked", b"-1", b"99999999999999999999", b"0",
                                b"close", b"websocket", b"100-continue", b"\x00", b"a" * 9000]) \
    | st.binary(max_size=20)
line_end = st.sampled_from([b"\r\n", b"\n", b"\r", b""])
request = st.builds(
    lambda m, t, v, hs, e, body: m + b" " + t + b" " + v + e
    + b"".join(n + b": " + val + e for n, val in hs) + e + body,
    token, target, version, st.lists(st.tuples(header_name, header_value), max_size=6),
    line_end, st.binary(max_size=40))


@settings(max_examples=250, suppress_health_check=list(HealthCheck))
@given(data=request | st.binary(max_size=300))
@example(data=b"GET /metrics HTTP/9.9\r\n\r\n")
@example(data=b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")
@example(data=b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
@example(data=b"GET /metrics HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
@example(data=b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
def test_any_request_gets_a_short_well_formed_answer(server: InProcessAgent, data: bytes) -> None:
    answer = exchange(server.port, data)
    if answer:
        m = STATUS.match(answer)
        assert m is not None, answer[:200]
        status = int(m[1])
        assert status != 500 and status < 600, answer[:300]
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"\r\nServer: podgpu\r\n" in head + b"\r\n"
        if status >= 400:
            assert len(body) < 200, body[:200]
            # no echo: whatever the client sent that is longer than a status phrase is absent
            for piece in re.split(rb"[\r\n ]+", data):
                if len(piece) >= 24:
                    assert piece not in answer
    assert server.get("/metrics")[0] == 200  # and the server still serves
