"""A strict parser for the one request head a scraper sends: the listener's fast path.

podgpu serves GET and HEAD on a few routes, and a scraper sends one small head per request and
waits for the answer, so almost every read holds exactly one whole head. `parse_head` accepts
only a strict subset of what h11 accepts, and answers None for everything else, which then goes
to h11 exactly as before (h11 stays the validator, and the one that refuses with a 400). The
subset, each line matched whole:

- the read is one head: it ends with the first CRLF CRLF in it, and is at most `max_size` bytes;
- the request line is `GET` or `HEAD`, one space, a target of visible ASCII, one space, and
  `HTTP/1.1` or `HTTP/1.0`;
- each header line is a token, `:`, optional spaces or tabs, a value of visible ASCII words
  separated by spaces or tabs, optional spaces or tabs: no obs-fold, no bare CR or LF, no NUL,
  no byte above 0x7e, no space before the colon;
- at most `max_headers` header lines; exactly one Host for HTTP/1.1, at most one for HTTP/1.0
  (RFC 9112 section 3.2);
- none of Content-Length, Transfer-Encoding, Expect, Upgrade (a body or a protocol switch:
  h11's business).

Proved against h11 by tests/unit/http/test_head_fast_path.py (hypothesis): every head accepted
here is accepted by h11 with the same method, target, version, headers and keep-alive.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_REQUEST_LINE = re.compile(rb"(GET|HEAD) ([\x21-\x7e]+) HTTP/1\.([01])")
_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?)[ \t]*")
_TO_H11 = frozenset({"content-length", "transfer-encoding", "expect", "upgrade"})
END = b"\r\n\r\n"


class Head(NamedTuple):
    method: str
    target: bytes
    headers: dict[str, str]
    """Lower-case names, the last value of a repeated name."""
    keep_alive: bool
    """HTTP/1.1, no `close` token in any Connection header (h11's rule) and no `close` in the
    last one (the listener's own, kept as it was)."""


def parse_head(data: bytes, max_size: int, max_headers: int) -> Head | None:
    """`data` parsed as exactly one request head of the subset above, or None (h11's turn)."""
    if len(data) > max_size or data.find(END) != len(data) - 4:
        return None
    lines = data[:-4].split(b"\r\n")
    first = _REQUEST_LINE.fullmatch(lines[0])
    if first is None or len(lines) - 1 > max_headers:
        return None
    headers: dict[str, str] = {}
    hosts = 0
    close = False
    for line in lines[1:]:
        field = _FIELD.fullmatch(line)
        if field is None:
            return None
        name = field[1].decode("ascii").lower()
        value = field[2].decode("ascii")
        if name == "host":
            hosts += 1
        elif name == "connection":
            close = close or "close" in (t.strip().lower() for t in value.split(","))
        elif name in _TO_H11:
            return None
        headers[name] = value
    http11 = first[3] == b"1"
    if hosts > 1 or (http11 and hosts == 0):
        return None
    keep = http11 and not close and "close" not in headers.get("connection", "").lower()
    return Head(first[1].decode("ascii"), first[2], headers, keep)
