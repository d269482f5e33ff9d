"""The protocol factory of a listening socket (http.server hands it to `create_server`): what
its connections (http.conn) share."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

import h11

from podgpu.http.app import App
from podgpu.http.budget import MemoryReturn
from podgpu.http.conn import Connection
from podgpu.http.guard import ConnectionGuard, Limits
from podgpu.http.wire import Seen

READ_SIZE = 1024
"""Bytes read from a socket at once, into the listener's one shared buffer: what a client that
pipelines requests and does not read its answers can leave in podgpu's memory (a scraper's
request head is ~300 bytes)."""
DISCARD_SIZE = 64 * 1024
"""Bytes read at once from a lingering connection (dropped: a shared buffer)."""


class Listener:
    """The protocol factory of one listening socket: what its connections share."""

    def __init__(self, app: App, guard: ConnectionGuard, *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.guard = guard
        self.limits: Limits = guard.limits
        self.ssl_context = ssl_context
        self.buffer = memoryview(bytearray(READ_SIZE))
        self.discard = memoryview(bytearray(DISCARD_SIZE))
        self.memory = MemoryReturn()
        self.call_soon: Callable[[Callable[[], None]], object] = _call_soon
        """Runs a function in the event loop's next turn (a unit test's fake loop replaces it)."""
        self.budget = guard.budget
        self.heads = Seen()
        """Request heads h11 read whole, by their bytes (http.wire.Seen)."""

    def parser(self) -> h11.Connection:
        """A fresh request parser (one per request: h11 parses requests only)."""
        return h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head_size)

    def __call__(self) -> Connection:
        self.memory.opened(self.guard.open_connections + 1)
        return Connection(self)


def _call_soon(fn: Callable[[], None]) -> object:
    return asyncio.get_running_loop().call_soon(fn)
