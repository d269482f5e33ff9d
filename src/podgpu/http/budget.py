"""One memory budget for every byte the listener holds on behalf of its peers, and giving memory
back to the system after a wave of connections closed.

What a connection holds for its peer (http.conn charges it after every read and write):
a ClientHello arriving (tlsgate: podgpu's own copy), the handshake bytes OpenSSL was fed before
the handshake completed, request bytes the parser holds, and the part of an answer the
transport could not hand to the kernel (a copy: asyncio's write buffer, or TLS ciphertext). The
unsent rest of an answer is a memoryview of the one published body, shared by every connection,
and costs nothing per connection.

Over `limit` in total, the connections whose incomplete work is oldest (held longest without
a break) are closed (with a reset) until the total is under three quarters of it. A scraper
holds nothing between requests and something for a moment while one is answered, so the
connections closed are the ones whose work does not complete (stalled handshakes, pipeliners
that do not read, slow readers), never a scraper that completes its requests, however much
its moment holds (a TLS handshake's state is the largest single charge).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
from typing import Any, Protocol

from podgpu.http.ratelog import RateLimitedLog

DEFAULT_MEMORY_BUDGET = 16 * 1024 * 1024
"""Bytes held for all peers together (docs/limits.md; measured in bench/RESULTS.md "Listener
memory budget": the per-connection objects of 2,000 connections come on top, ~10 MiB)."""


class Holder(Protocol):
    """What the budget needs of a connection."""

    peer: str

    def abort(self) -> None: ...


class MemoryBudget:
    """Bytes held per connection and in total; sheds the oldest holders when over `limit`."""

    def __init__(self, limit: int = DEFAULT_MEMORY_BUDGET, *,
                 rate_log: RateLimitedLog | None = None) -> None:
        self.limit = limit
        self.total = 0
        self.evicted = 0
        self._held: dict[Holder, int] = {}  # in the order their holding began
        self._rate_log = rate_log

    def held(self, conn: Holder) -> int:
        return self._held.get(conn, 0)

    def charge(self, conn: Holder, nbytes: int) -> None:
        """`conn` now holds `nbytes` (replacing what it was charged before); 0 ends its turn
        (a later holding counts as new work)."""
        old = self._held.get(conn, 0)
        if nbytes > 0:
            self._held[conn] = nbytes  # a holder keeps its place: its work is not new
        elif old:
            del self._held[conn]
        self.total += nbytes - old
        if self.total > self.limit:
            self._shed()

    def release(self, conn: Holder) -> None:
        self.total -= self._held.pop(conn, 0)

    def _shed(self) -> None:
        goal = self.limit * 3 // 4
        for conn in list(self._held):  # oldest work first
            if self.total <= goal:
                break
            self.release(conn)
            self.evicted += 1
            if self._rate_log is not None:
                self._rate_log("budget", logging.WARNING,
                               "memory budget of %d MiB for peers reached: closing the "
                               "connections holding incomplete work longest (from %s)",
                               self.limit >> 20, conn.peer)
            conn.abort()


class MemoryReturn:
    """Hands the C allocator's free memory back to the system after many connections closed.

    Why: what thousands of connections allocated (buffers, parser state) is freed when they
    close, but glibc's malloc keeps freed memory inside its heap, so RSS stayed at the attack's
    peak (measured: +17 MiB of 2,000 pipelining clients still held 5 s after they left).
    `malloc_trim(0)` (glibc; absent elsewhere, then nothing is done) returns it, after a garbage
    collection (closed connections' parser state can sit in reference cycles until one); what
    CPython's small-object allocator keeps in partly used arenas stays (measured in
    bench/RESULTS.md "listener on h11"). It runs at most once per TRIM_SECONDS, once at least
    TRIM_AFTER connections closed and the open ones are down to half their peak since the last
    trim, so a steady load never pays for it."""

    TRIM_AFTER = 256
    TRIM_SECONDS = 1.0

    def __init__(self) -> None:
        self.peak = 0
        self.closed = 0
        self.trims = 0
        self.pending = False

    def opened(self, open_now: int) -> None:
        self.peak = max(self.peak, open_now)

    def closed_one(self, open_now: int) -> None:
        self.closed += 1
        if (not self.pending and _MALLOC_TRIM is not None and self.closed >= self.TRIM_AFTER
                and open_now <= self.peak // 2):
            self._schedule()

    def _schedule(self) -> None:
        self.pending = True
        self.closed = 0
        asyncio.get_running_loop().call_later(self.TRIM_SECONDS, self._trim)

    def _trim(self) -> None:
        """Trim; again a second later while connections keep closing (a wave takes a while)."""
        self.trims += 1
        gc.collect()  # parser state of closed connections held in reference cycles, first
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)
        if self.closed:
            self._schedule()
        else:
            self.pending = False
            self.peak = 0


def _malloc_trim() -> Any:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


_MALLOC_TRIM = _malloc_trim()
