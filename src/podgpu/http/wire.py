"""What http.conn reads from a request head beyond h11's checks, and the answer's head it
writes (h11 parses requests only: its writer cost ~40 us a scrape, as much as the whole answer
did before)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from http import HTTPStatus

from podgpu.http.app import Request, Response, error
from podgpu.http.ratelog import short

log = logging.getLogger("podgpu.http.guard")

_VERSIONS = (b"1.0", b"1.1")
_UNSAFE = frozenset("\r\n\0")
"""Characters never written into a header (a value from the web config cannot split the head)."""


Fields = Sequence[tuple[bytes, bytes]]
"""A request's header fields as h11 gives them: (lower-case name, value)."""


def refusal(version: bytes, fields: Fields, max_headers: int) -> str:
    """Why a request head h11 accepted is still answered 400 and closed, or ""."""
    if version not in _VERSIONS:
        return f"HTTP version {short(version, 16)}"
    if len(fields) > max_headers:
        return f"{len(fields)} headers"
    names = {name for name, _ in fields}
    if b"content-length" in names and b"transfer-encoding" in names:
        return "Content-Length with Transfer-Encoding"  # RFC 9112 section 6.1: close after it
    return ""


def announces_body(fields: Fields) -> bool:
    """Transfer-Encoding, or a Content-Length other than 0 (h11 checked its syntax)."""
    return any(name == b"transfer-encoding" or (name == b"content-length" and int(value) != 0)
               for name, value in fields)


def keep_alive(version: bytes, fields: Fields) -> bool:
    """HTTP/1.1 without a `close` token in any Connection header."""
    if version != b"1.1":
        return False
    return not any(name == b"connection" and b"close" in value.lower() for name, value in fields)


def response_head(resp: Response, *, close: bool) -> bytes:
    """The status line and headers of `resp`, with its Content-Length."""
    lines = [f"HTTP/1.1 {resp.status} {reason(resp.status)}\r\n"]
    lines.extend(f"{name}: {value}\r\n" for name, value in resp.headers
                 if _UNSAFE.isdisjoint(name + value))
    lines.append(f"Content-Length: {len(resp.body)}\r\n")
    if close:
        lines.append("Connection: close\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1", errors="replace")


def reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


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
