"""One capped reader for the body of every outbound peer's answer.

The body is read as it arrives and never past the cap: an endless answer costs the cap, not
memory until the process is killed. gzip is inflated in steps and never past the cap either (a
4.7 MB gzip bomb costs the cap, not 8.6 GB); the compressed bytes and an announced length
(Content-Length, a gRPC length prefix) are held to the cap too. Past the cap the caller closes
the connection with the rest unread: draining it would cost the time the cap saves.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from podgpu.peers.deadline import Deadline

CHUNK = 64 * 1024
"""Bytes asked of one read."""


class OverCap(ValueError):
    """An answer over its byte cap. `size` is the announced size when there was one."""

    def __init__(self, message: str, *, limit: int, size: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.size = size


class Undecodable(ValueError):
    """A gzip answer that does not inflate."""


def check_announced(size: int, limit: int) -> None:
    """OverCap when an answer announces more than `limit` bytes, before one byte is read."""
    if size > limit:
        raise OverCap(f"answer of {size} bytes is over the {limit}-byte limit", limit=limit,
                      size=size)


def read_capped(read: Callable[[int], bytes], limit: int, *, length: str | None = None,
                gzip: bool = False, deadline: Deadline | None = None,
                chunk: int = CHUNK) -> bytes:
    """The whole body, at most `limit` bytes (after inflating, with `gzip`), from `read(n)`,
    which returns up to n bytes and b"" at the end (`read1` of http.client and urllib3).

    `length` is the announced Content-Length, checked first. Raises OverCap past the cap,
    Undecodable for broken gzip and TimeoutError (with `deadline.message`) once `deadline` has
    passed, between reads and at the end (its shutdown can look like the clean end of a short
    answer). What `read` raises goes through."""
    if length is not None and length.strip().isdigit():
        check_announced(int(length), limit)
    gunzip = _Gunzip(limit) if gzip else None
    body = bytearray()
    raw = 0
    while True:
        if deadline is not None and deadline.expired:
            raise TimeoutError(deadline.message)
        data = read(min(chunk, limit + 1 - raw))
        if not data:
            break
        raw += len(data)
        if raw > limit:
            raise OverCap(f"answer over the {limit}-byte limit", limit=limit)
        if gunzip is None:
            body += data
        else:
            gunzip.inflate(data, body)
    if deadline is not None and deadline.expired:
        raise TimeoutError(deadline.message)
    if gunzip is not None and not gunzip.ended:
        raise Undecodable("undecodable gzip answer: truncated")
    return bytes(body)


class _Gunzip:
    """gzip inflated into a body in steps, never past `limit` bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._zlib = zlib.decompressobj(wbits=31)

    @property
    def ended(self) -> bool:
        return self._zlib.eof

    def inflate(self, data: bytes, body: bytearray) -> None:
        limit = self._limit
        try:
            while data and not self._zlib.eof:
                body += self._zlib.decompress(data, limit - len(body) + 1)
                if len(body) > limit:
                    raise OverCap(f"answer over the {limit}-byte limit after gzip "
                                  "decompression", limit=limit)
                data = self._zlib.unconsumed_tail
        except zlib.error as exc:
            raise Undecodable(f"undecodable gzip answer: {exc}") from None
