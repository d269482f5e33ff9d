"""What http.conn reads from a request head beyond h11's checks, the heads h11 read whole that
it remembers, and the answer's head it writes (h11 parses requests only: its writer cost ~40 us
a scrape, as much as the whole answer did before)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import h11

from podgpu.http.app import Request, Response, decode_path, error, phrase
from podgpu.http.ratelog import short

log = logging.getLogger("podgpu.http.guard")

_VERSIONS = (b"1.0", b"1.1")
_UNSAFE = frozenset("\r\n\0")
"""Characters never written into a header (a value from the web config cannot split the head)."""


class Head(NamedTuple):
    """What http.conn answers a request head by, read from h11's `Request` event."""

    method: str
    path: str
    """Percent-decoded, without the query (app.decode_path)."""
    headers: Mapping[str, str]
    """Lower-case names, last value wins (a read-only mapping: a remembered head is shared)."""
    keep: bool
    """HTTP/1.1 without a `close` token in any Connection header."""
    body: bool
    """Transfer-Encoding, or a Content-Length other than 0 (h11 checked its syntax): answered
    at once, then closed; the body is never read."""


def examine(event: h11.Request, max_headers: int) -> Head | str:
    """The head of a request h11 accepted, or why it is still answered 400 and closed, in one
    pass over its fields."""
    version = event.http_version
    if version not in _VERSIONS:
        return f"HTTP version {short(version, 16)}"
    raw = event.headers.raw_items()
    if len(raw) > max_headers:
        return f"{len(raw)} headers"
    headers: dict[str, str] = {}
    length = nonzero = chunked = close = False
    for rawname, value in raw:
        name = rawname.lower()
        headers[name.decode("latin-1")] = value.decode("latin-1")
        if name == b"content-length":
            length = True
            nonzero = nonzero or int(value) != 0
        elif name == b"transfer-encoding":
            chunked = True
        elif name == b"connection" and b"close" in value.lower():
            close = True
    if length and chunked:
        return "Content-Length with Transfer-Encoding"  # RFC 9112 section 6.1: close after it
    path = decode_path(event.target)
    if path is None:
        return "request target"
    return Head(event.method.decode("latin-1"), path, MappingProxyType(headers),
                keep=version == b"1.1" and not close, body=nonzero or chunked)


class Seen:
    """Request heads h11 read, each whole in one read of a connection with nothing before or
    after it, and what it read in them, by their exact bytes: a scraper sends the same head on
    every scrape, and a fresh h11 parser reads the same bytes the same way, so each distinct
    head is parsed once. Only heads without a body are kept, MAX_HEADS of at most MAX_BYTES
    each (one plain read's size: a longer plain head never arrives whole in one read), the
    oldest forgotten first: at most ~0.3 MiB with what h11 read in them (bench/RESULTS.md "The
    scrape path with h11 alone, fast again")."""

    MAX_HEADS = 32
    MAX_BYTES = 1024

    __slots__ = ("_heads",)

    def __init__(self) -> None:
        self._heads: dict[bytes, Head] = {}

    def get(self, data: bytes) -> Head | None:
        return self._heads.get(data)

    def add(self, data: bytes, head: Head) -> None:
        if len(data) > self.MAX_BYTES or head.body:
            return
        if len(self._heads) >= self.MAX_HEADS:
            del self._heads[next(iter(self._heads))]
        self._heads[data] = head


MAX_RESPONSE_HEADS = 64
_HEADS: dict[tuple[object, ...], bytes] = {}


def response_head(resp: Response, *, close: bool) -> bytes:
    """The status line and headers of `resp`, with its Content-Length (the head of the same
    answer is made once: at most MAX_RESPONSE_HEADS are kept, the oldest forgotten first)."""
    key = (resp.status, len(resp.body), close, *resp.headers)
    head = _HEADS.get(key)
    if head is None:
        if len(_HEADS) >= MAX_RESPONSE_HEADS:
            del _HEADS[next(iter(_HEADS))]
        head = _HEADS[key] = _head(resp, close=close)
    return head


def _head(resp: Response, *, close: bool) -> bytes:
    lines = [f"HTTP/1.1 {resp.status} {phrase(resp.status, 'Status')}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in resp.headers
                 if _UNSAFE.isdisjoint(name + value))
    lines.append(f"Content-Length: {len(resp.body)}\r\n")
    if close:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1", errors="replace")


def answer_of(handler: Callable[[Request], Response], request: Request) -> Response:
    """The handler's answer; a 500 and the traceback for a bug of ours."""
    try:
        return handler(request)
    except Exception:
        return failed(request)


def failed(request: Request) -> Response:
    """Called from an `except` block: the traceback logged, a 500 for the client."""
    log.exception("answering %s %s failed", request.method, short(request.path))
    return error(500)
