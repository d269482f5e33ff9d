"""The listener's fast path (http.head.parse_head) against h11, the parser it bypasses.

The properties, on near-valid heads hypothesis builds and mutates:
- everything the fast path accepts, h11 accepts too, with the same method, target, version and
  headers, and the same keep-alive decision as the listener's h11 path makes;
- the fast path refuses (answers None: h11's turn, which refuses with the fixed 400) every head
  h11 refuses, and every head with a body, a protocol switch, obs-fold, bare CR or LF, NUL, a
  bad header name, a second Host, or past the size or header-count caps;
- a plain scraper's head (what Prometheus sends) takes the fast path, so it is used at all.
"""

from __future__ import annotations

from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podgpu.http.head import parse_head

MAX_SIZE = 1024
MAX_HEADERS = 8
FUZZ = settings(max_examples=600,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def by_h11(data: bytes, max_size: int = MAX_SIZE, max_headers: int = MAX_HEADERS) -> Any:
    """What the listener's h11 path makes of `data` sent in one piece: (method, target,
    headers, keep-alive) for a request it dispatches, None for one it refuses (400) or that is
    not whole in `data`. Restates conn.Connection._next's checks."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_size)
    conn.receive_data(data)
    request = None
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Request):
                if event.http_version not in (b"1.0", b"1.1") or len(event.headers) > max_headers:
                    return None
                request = event
            elif isinstance(event, h11.EndOfMessage):
                break
            elif event is h11.NEED_DATA or event is h11.PAUSED:
                return None
    except h11.RemoteProtocolError:
        return None
    assert request is not None
    headers = {n.decode("latin-1").lower(): v.decode("latin-1")
               for n, v in request.headers.raw_items()}
    keep = (request.http_version == b"1.1" and "close" not in headers.get("connection", "").lower()
            and conn.their_state is h11.DONE)
    return request.method.decode("latin-1"), request.target, headers, keep


def by_fast(data: bytes, max_size: int = MAX_SIZE, max_headers: int = MAX_HEADERS) -> Any:
    head = parse_head(data, max_size, max_headers)
    return None if head is None else (head.method, head.target, head.headers, head.keep_alive)


# --- near-valid heads

TOKEN = "-!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
ODD = " \t\r\n\0:\x7f\x80\xff\"(),/;<=>?@[\\]{}"
names = st.sampled_from(["Host", "host", "HOST", "Accept", "Accept-Encoding", "User-Agent",
                         "Connection", "Content-Length", "Transfer-Encoding", "Expect",
                         "Upgrade", "X-Prometheus-Scrape-Timeout-Seconds", "Authorization"]) \
    | st.text(TOKEN + ODD, min_size=0, max_size=12)
values = st.sampled_from(["", "podgpu:9400", "close", "keep-alive", "Close, foo", "closed",
                          "keep-alive, close", "0", "5", "chunked", "100-continue", "gzip",
                          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "Basic dTpw", "h2c",
                          " padded\t", "a\tb  c"]) \
    | st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=16)
colons = st.sampled_from([":", ": ", ":\t", " :", ":  "])
endings = st.sampled_from(["\r\n"] * 12 + ["\n", "\r", "\r\n ", "\r\n\t"])
methods = st.sampled_from(["GET", "GET", "HEAD", "get", "POST", "OPTIONS", "GET ", "G\0T", ""])
targets = st.sampled_from(["/metrics", "/", "/metrics?x=1", "/%7e", "*", "http://h/metrics",
                           "/a b", "/\x7f", "/\x80", ""]) \
    | st.text(st.characters(min_codepoint=0, max_codepoint=255), max_size=12)
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.2",
                            "http/1.1", "HTTP/1.1 ", "HTTP/11"])


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    line = f"{draw(methods)} {draw(targets)} {draw(versions)}"
    lines = [line + draw(endings)]
    for _ in range(draw(st.integers(0, MAX_HEADERS + 2))):
        lines.append(draw(names) + draw(colons) + draw(values) + draw(endings))
    text = "".join(lines) + draw(st.sampled_from(["\r\n"] * 8 + ["\n", "", "\r\n\r\n",
                                                               "\r\nGET / HTTP/1.1\r\n\r\n"]))
    data = text.encode("latin-1")
    if draw(st.booleans()):  # one byte changed anywhere
        at = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    return data


@st.composite
def scraper_heads(draw: st.DrawFn) -> bytes:
    """What a well-behaved scraper sends: the fast path's grammar exactly."""
    word = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=10)
    value = st.lists(word, max_size=3).map(" ".join)
    name = st.text(TOKEN, min_size=1, max_size=10).filter(
        lambda n: n.lower() not in {"host", "content-length", "transfer-encoding", "expect",
                                    "upgrade"})
    version = draw(st.sampled_from(["1.1", "1.0"]))
    fields = draw(st.lists(st.tuples(name, value), max_size=MAX_HEADERS - 1))
    if version == "1.1" or draw(st.booleans()):
        fields.insert(draw(st.integers(0, len(fields))), ("Host", draw(value)))
    text = f"{draw(st.sampled_from(['GET', 'HEAD']))} /{draw(value).replace(' ', '')} " \
        f"HTTP/{version}\r\n" + "".join(f"{n}:{draw(st.sampled_from(['', ' ', chr(9)]))}{v}\r\n"
                                        for n, v in fields) + "\r\n"
    return text.encode("ascii")


@FUZZ
@given(heads())
@example(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n")
@example(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n")
@example(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n")
@example(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close-ish, x\r\n\r\n")
def test_what_the_fast_path_accepts_h11_accepts_the_same(data: bytes) -> None:
    fast = by_fast(data)
    if fast is not None:
        assert by_h11(data) == fast
    if by_h11(data) is None:
        assert fast is None


@FUZZ
@given(scraper_heads())
def test_a_scrapers_head_takes_the_fast_path_and_means_what_h11_reads(data: bytes) -> None:
    fast = by_fast(data)
    assert fast is not None, data
    assert by_h11(data) == fast


@pytest.mark.parametrize("data", [
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",      # a body's framing
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",          # obs-fold
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n",              # bare CR
    b"GET /metrics HTTP/1.1\r\nHost: x\nX-A: a\r\n\r\n",                   # bare LF
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n",              # NUL
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX A: a\r\n\r\n",                 # bad name
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A : a\r\n\r\n",                # space before colon
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9\r\n\r\n",       # not ASCII
    b"GET /metrics HTTP/1.1\r\n\r\n",                                       # no Host
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",                # two
    b"GET /metrics HTTP/1.0\r\nHost: x\r\nhost: y\r\n\r\n",
    b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n",                          # h11 decides (405)
    b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n",
    b"GET /metrics  HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n",                               # not whole
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n",         # pipelined
    b"\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-A: a\r\n" * MAX_HEADERS + b"\r\n",  # 9 > 8
    b"GET /m" + b"x" * MAX_SIZE + b" HTTP/1.1\r\nHost: x\r\n\r\n",        # over the size cap
])
def test_the_rest_goes_to_h11(data: bytes) -> None:
    assert parse_head(data, MAX_SIZE, MAX_HEADERS) is None


def test_a_scrapers_head() -> None:
    head = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: 10.0.0.7:9400\r\nUser-Agent: "
                      b"Prometheus/2.53.0\r\nAccept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
                      b"\r\nAccept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10"
                      b"\r\n\r\n", MAX_SIZE, MAX_HEADERS)
    assert head is not None
    assert (head.method, head.target, head.keep_alive) == ("GET", b"/metrics?x=1", True)
    assert head.headers["accept-encoding"] == "gzip"
    assert head.headers["host"] == "10.0.0.7:9400"
    closing = parse_head(b"HEAD / HTTP/1.0\r\n\r\n", MAX_SIZE, MAX_HEADERS)
    assert closing is not None and not closing.keep_alive
    # h11 closes on a `close` token in any Connection header, not only the last one
    twice = parse_head(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       b"Connection: keep-alive\r\n\r\n", MAX_SIZE, MAX_HEADERS)
    assert twice is not None and not twice.keep_alive
