"""Connection limits for the HTTP listener: a request deadline, a connection cap that evicts the
oldest connection that never completed a request, quiet handling of malformed requests, and a
rate-limited log for the event loop's accept errors (issue 13).

Why: aiohttp 3.x has no deadline on reading a request head, keeps an idle connection for an hour
by default, logs a traceback per malformed request and echoes the bad request line in the 400
body. Tried against podgpu, 1,000 connections that stopped partway through their headers stayed
open; at the file-descriptor limit every scrape failed and asyncio logged "socket.accept() out of
system resource" thousands of times a second.

The guard is the listener's protocol factory: each connection gets a `GuardedHandler` (aiohttp's
`RequestHandler` with three hooks) that reports to one `ConnectionGuard`:

- a connection is counted from the moment it is accepted, TLS ones included (http.tlsconn tells
  the guard before the handshake), and must complete each request (TLS handshake, head read,
  response written) within `request_timeout` of connecting or of its first byte after the
  previous response; requests pipelined behind it share that deadline (all answered and the
  connection idle in time). Otherwise it is closed with a reset. This covers slowloris heads,
  slow bodies, silent TLS connects and clients that do not read the answer (issue 19: pipelined
  requests used to run without a deadline).
- idle keep-alive connections are closed by aiohttp after `keepalive_timeout`.
- at `max_connections`, the oldest connection that has not yet completed a request is closed to
  make room (a well-behaved scraper sends its request at once, so it is never the oldest); when
  every connection has completed one, the one idle longest goes; then the one whose current
  request has waited longest; failing that, the newcomer.
- the cap stays below the process's file-descriptor limit, so accept() does not run out of
  descriptors in the first place.
- per-connection buffers are small and fixed: at most `READ_SIZE` bytes are read from a socket
  at once, at most `MAX_PIPELINED` requests are parsed ahead, and writing pauses as soon as the
  socket's buffer holds anything (a client that does not read holds at most one chunk of an
  answer in podgpu's memory: server.py writes /metrics in `WRITE_CHUNK` pieces), and the kernel
  queues at most `SEND_BUFFER` per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import struct
from collections import OrderedDict
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http import HttpRequestParser
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from podgpu.http.ratelog import LOG_EVERY_SECONDS, RateLimitedLog, quiet_accept_errors, short

__all__ = ["ACCEPT_BACKLOG", "ACCEPT_IN_FLIGHT", "ACCEPT_PER_TURN", "FD_RESERVE",
           "LOG_EVERY_SECONDS", "SERVER_NAME", "WRITE_CHUNK", "ConnectionGuard", "GuardedHandler",
           "Limits", "RateLimitedLog", "effective_cap", "limit_send_buffer", "quiet_accept_errors",
           "short"]

log = logging.getLogger(__name__)

DEFAULT_MAX_CONNECTIONS = 2048
"""Concurrent connections; ~6 KiB of memory each when idle (bench/RESULTS.md "HTTP load")."""
DEFAULT_REQUEST_TIMEOUT = 15.0
"""Seconds to read a request head and write the response. /metrics is a memory copy, so only a
slow or hostile client takes this long."""
DEFAULT_KEEPALIVE_TIMEOUT = 75.0
"""Idle seconds before a keep-alive connection is closed: longer than a 60 s scrape interval, so
Prometheus keeps reusing its connection."""
FD_RESERVE = 128
"""Descriptors kept free below RLIMIT_NOFILE for files, the kubelet socket, NVML and logs."""
ACCEPT_BACKLOG = 128
"""The kernel's listen backlog: connections completed by the kernel and waiting for accept()."""
ACCEPT_PER_TURN = 32
"""Connections asyncio accepts per event-loop turn (its `backlog` argument sets both this and the
listen backlog; server.py raises the kernel's back to ACCEPT_BACKLOG). A connection accepted in
one turn gets its protocol in the next, is counted (and makes room) in the one after, and the
connection closed for it releases its descriptor one turn later still: up to three turns of
accepts hold descriptors beyond the cap. At 128 per turn a loaded 2-core box saw cap + 263."""
ACCEPT_IN_FLIGHT = 3 * ACCEPT_PER_TURN
"""Descriptors beyond the cap that accepts in flight can hold; the cap keeps them free too."""
MAX_LINE_SIZE = 8190
MAX_FIELD_SIZE = 8190
MAX_HEADERS = 64
MAX_PIPELINED = 2
"""Requests parsed ahead of the one being answered (aiohttp's default is 32). 2, not 1: with 1,
aiohttp pauses and resumes reading the socket on every request."""
READ_SIZE = 1024
"""Bytes read from a plain socket at once (asyncio's default is 256 KiB), bounding what one read
can add to the parser's buffer."""
WRITE_CHUNK = 4 * 1024
SEND_BUFFER = 128 * 1024
"""The kernel's send buffer per connection (SO_SNDBUF; Linux doubles it for its overhead). Over
loopback its autotuning starts near 2.5 MiB, so each client that pipelines and never reads had
podgpu write megabytes before it stalled; a 1 MB answer still goes out at 100+ MB/s in-cluster."""
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, drops the queue
"""Pieces /metrics is written in; with writing paused on any queued byte, the most of an answer
a non-reading client keeps in memory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The listener's limits; the defaults are documented in docs/limits.md."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT
    max_line_size: int = MAX_LINE_SIZE
    max_field_size: int = MAX_FIELD_SIZE
    max_headers: int = MAX_HEADERS

    def handler_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for aiohttp's RequestHandler (and AppRunner)."""
        return {"keepalive_timeout": self.keepalive_timeout, "max_line_size": self.max_line_size,
                "max_field_size": self.max_field_size, "max_headers": self.max_headers}


def effective_cap(requested: int, nofile_soft: int | None = None) -> int:
    """`requested`, lowered to stay FD_RESERVE + ACCEPT_IN_FLIGHT below the soft RLIMIT_NOFILE
    (at least 16)."""
    if nofile_soft is None:
        nofile_soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile_soft == resource.RLIM_INFINITY or nofile_soft <= 0:
        return requested
    return max(16, min(requested, nofile_soft - FD_RESERVE - ACCEPT_IN_FLIGHT))


class ConnectionGuard:
    """The listener's protocol factory and the book-keeping of every open connection."""

    def __init__(self, manager: web.Server, limits: Limits | None = None, *,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        limits = limits or Limits()
        self._manager = manager
        self.limits = limits
        self.cap = effective_cap(limits.max_connections)
        self._loop = loop or asyncio.get_running_loop()
        self._kwargs = limits.handler_kwargs()
        self._fresh: OrderedDict[GuardedHandler, None] = OrderedDict()  # no request done yet
        self._idle: OrderedDict[GuardedHandler, None] = OrderedDict()   # between requests
        self._busy: OrderedDict[GuardedHandler, None] = OrderedDict()   # a later request
        self._open: set[GuardedHandler] = set()
        self.rate_log = RateLimitedLog(log)
        self.evicted = 0
        self.timed_out = 0
        self.refused = 0

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def __call__(self) -> GuardedHandler:
        return GuardedHandler(self._manager, guard=self, loop=self._loop, **self._kwargs)

    # --- events from GuardedHandler

    def opened(self, conn: GuardedHandler) -> None:
        self._open.add(conn)
        self._fresh[conn] = None
        conn.arm(self.limits.request_timeout)
        if len(self._open) > self.cap:
            self._make_room(conn)

    def started(self, conn: GuardedHandler) -> None:
        """First bytes of a new request on a connection that had completed one."""
        if conn in self._idle:
            del self._idle[conn]
            self._busy[conn] = None
            conn.arm(self.limits.request_timeout)

    def completed(self, conn: GuardedHandler) -> None:
        """A response was handed to the transport. Pipelined requests already waiting, or an
        answer still queued in podgpu, run on the same deadline: a connection must answer all
        it was sent and go idle within `request_timeout` of its first unanswered byte."""
        if conn not in self._open:
            return
        self._fresh.pop(conn, None)
        self._idle.pop(conn, None)
        self._busy.pop(conn, None)
        if conn.queued() or conn.write_pending():
            self._busy[conn] = None
            conn.draining = not conn.queued()
        else:
            self._idle[conn] = None
            conn.disarm()

    def lost(self, conn: GuardedHandler) -> None:
        self._open.discard(conn)
        self._fresh.pop(conn, None)
        self._idle.pop(conn, None)
        self._busy.pop(conn, None)
        conn.disarm()

    def expired(self, conn: GuardedHandler) -> None:
        if conn.draining and not conn.write_pending() and not conn.queued():
            self._busy.pop(conn, None)  # the last answer went out in time: plain keep-alive
            self._idle[conn] = None
            conn.disarm()
            return
        self.timed_out += 1
        self.rate_log("timeout", logging.WARNING,
                      "closed a connection from %s that did not complete a request within %g s",
                      conn.peer, self.limits.request_timeout)
        self._drop(conn)

    def _make_room(self, newcomer: GuardedHandler) -> None:
        victim = next((c for c in self._fresh if c is not newcomer), None)
        if victim is None:
            victim = next(iter(self._idle), None)
        if victim is None:
            victim = next(iter(self._busy), None)
        if victim is None:
            victim = newcomer
            self.refused += 1
        else:
            self.evicted += 1
        self.rate_log("cap", logging.WARNING,
                      "connection cap %d reached: closing the oldest connection that has not "
                      "completed a request (from %s)", self.cap, victim.peer)
        self._drop(victim)

    def _drop(self, conn: GuardedHandler) -> None:
        self.lost(conn)
        conn.abort()


class GuardedHandler(web.RequestHandler):
    """aiohttp's per-connection protocol, reporting to the guard; errors answered without echo
    or traceback, and without naming the server software."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard,
                 loop: asyncio.AbstractEventLoop, **kwargs: Any) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        # aiohttp parses up to 32 pipelined requests ahead of the one being answered (~1.5 KiB
        # each); a scraper never pipelines, so podgpu keeps MAX_PIPELINED (issue 19).
        self._parser = HttpRequestParser(
            self, loop, self._read_bufsize, max_line_size=self.max_line_size,
            max_field_size=self.max_field_size, max_headers=self.max_headers,
            payload_exception=RequestPayloadError, max_msg_queue_size=MAX_PIPELINED)
        self._max_msg_queue_size = MAX_PIPELINED
        self._msg_queue_resume_size = MAX_PIPELINED // 2
        self._guard = guard
        self._deadline: asyncio.TimerHandle | None = None
        self._between = False
        self._raw: asyncio.BaseTransport | None = None  # the TCP transport under TLS
        self._counted = False
        self.draining = False
        self.peer = "?"

    # --- the guard's timer

    def arm(self, seconds: float) -> None:
        self.disarm()
        self._between = False
        self._deadline = self._loop.call_later(seconds, self._guard.expired, self)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._between = True
        self.draining = False

    def abort(self) -> None:
        """Close with a reset: a plain close would queue the FIN behind the answer a
        non-reading client never takes, so the kernel would keep that data and the client
        would never see the connection end."""
        transport = self._raw or self.transport
        if isinstance(transport, asyncio.Transport):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            transport.abort()

    def queued(self) -> bool:
        """A pipelined request is parsed and waiting (aiohttp's queue of them)."""
        return bool(self._messages)

    def write_pending(self) -> bool:
        """Part of an answer is still in podgpu's memory (the client is not reading it)."""
        t = self.transport
        return isinstance(t, asyncio.WriteTransport) and t.get_write_buffer_size() > 0

    # --- protocol hooks

    def tcp_opened(self, raw: asyncio.BaseTransport) -> None:
        """The TCP connection under TLS, before its handshake (http.tlsconn)."""
        self._raw = raw
        self._count(raw)

    def tcp_lost(self) -> None:
        self._guard.lost(self)

    def _count(self, transport: asyncio.BaseTransport) -> None:
        if self._counted:
            return
        self._counted = True
        peer = transport.get_extra_info("peername")
        self.peer = short(peer[0] if isinstance(peer, tuple) and peer else peer, 64)
        self._guard.opened(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._raw is None and hasattr(transport, "max_size"):
            transport.max_size = READ_SIZE
        if isinstance(transport, asyncio.WriteTransport):
            transport.set_write_buffer_limits(high=0 if self._raw is None else WRITE_CHUNK, low=0)
        if self._raw is None:
            limit_send_buffer(transport)
        super().connection_made(transport)
        self._count(transport)

    def data_received(self, data: bytes) -> None:
        if self._between and data:
            self._guard.started(self)
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.lost(self)
        super().connection_lost(exc)

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        out = await super().finish_response(request, resp, start_time)
        self._guard.completed(self)
        return out

    # --- malformed requests: one rate-limited line, a body that echoes nothing

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, ConnectionError):  # the client left mid-answer: nothing to report
            return
        if not isinstance(exc, HttpProcessingError):  # a bug of ours: keep the traceback
            super().log_exception(*args, **kw)
            return
        self._guard.rate_log("bad-request", logging.INFO, "bad request from %s: %s: %s",
                             self.peer, type(exc).__name__, short(exc.message))

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Error"
        resp = super().handle_error(request, status, exc, f"{status} {phrase}\n")
        resp.headers["Server"] = SERVER_NAME
        return resp


SERVER_NAME = "podgpu"
"""The Server header: the product only, never library or Python versions."""


def limit_send_buffer(transport: asyncio.BaseTransport) -> None:
    """Set SEND_BUFFER on the transport's socket (best effort)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
