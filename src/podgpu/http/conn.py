"""One HTTP/1.1 connection: h11 (sans-IO parsing) under a plain `asyncio.BufferedProtocol`, TLS
through `ssl.MemoryBIO`/`SSLObject`, and the guard (http.guard) told of every step.

Only public interfaces of asyncio, ssl and h11 are used; the listener's bounds come from how
they are driven:
- the connection is counted at accept, before any TLS byte (the listener is a plain TCP server;
  TLS is this module's), so the cap and the request deadline cover silent and stalled handshakes;
- every connection of a listener reads into one shared buffer of READ_SIZE bytes (the protocol's
  `get_buffer`), copied out at once; reading pauses while an answer is pending, so a client that
  pipelines requests and never reads its answers holds at most one read of them in podgpu;
- no TLS state exists until the client's first TLS record is complete (at most 16 KiB + 5 bytes
  held as it arrives): a connection stalled partway through its ClientHello costs its bytes,
  not OpenSSL's handshake buffers (measured: bench/RESULTS.md "listener on h11");
- an answer goes to the kernel in steps sized to the room its send buffer has (the whole body at
  once for a client that reads), the next step only once the transport's buffer is empty
  (write-buffer high-water mark 0), so a client that does not read holds at most one step in
  podgpu's memory; the body itself is the published `bytes`, shared by every connection;
- a malformed request gets a short 400 naming nothing of the request, one rate-limited log line,
  and the connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import gc
import logging
import socket
import ssl
import struct
import termios
from http import HTTPStatus
from typing import Any

import h11

from podgpu.http.app import App, Request, Response, decode_path, error
from podgpu.http.guard import Cancellable, ConnectionGuard, Limits, limit_send_buffer
from podgpu.http.head import parse_head
from podgpu.http.ratelog import short

log = logging.getLogger("podgpu.http.guard")

READ_SIZE = 1024
"""Bytes read from a socket at once, into the listener's one shared buffer: what a client that
pipelines requests and does not read its answers can leave in podgpu's memory (a scraper's
request head is ~300 bytes)."""
MIN_STEP = 1024
"""Bytes written when the socket's send buffer has no room: what a client that does not read
keeps in podgpu's memory."""
MAX_RECORD = 16384 + 2048
"""The largest TLS record (TLSCiphertext: 2^14 plus expansion)."""
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST, drops the queue
_VERSIONS = (b"1.0", b"1.1")


class Listener:
    """The protocol factory of one listening socket: what its connections share, and giving
    memory back after a wave of connections closed (`MemoryReturn`)."""

    def __init__(self, app: App, guard: ConnectionGuard, *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.guard = guard
        self.limits: Limits = guard.limits
        self.ssl_context = ssl_context
        self.buffer = memoryview(bytearray(READ_SIZE))
        self.memory = MemoryReturn()

    def __call__(self) -> Connection:
        self.memory.opened(self.guard.open_connections + 1)
        return Connection(self)


class MemoryReturn:
    """Hands the C allocator's free memory back to the system after many connections closed.

    Why: what thousands of connections allocated (buffers, parser state) is freed when they
    close, but glibc's malloc keeps freed memory inside its heap, so RSS stayed at the attack's
    peak (measured: +17 MiB of 2,000 pipelining clients still held 5 s after they left).
    `malloc_trim(0)` (glibc; absent elsewhere, then nothing is done) returns it, after a garbage
    collection (closed connections' parser state can sit in reference cycles until one); what
    CPython's small-object allocator keeps in partly used arenas stays (measured in
    bench/RESULTS.md "listener on h11"). It runs at most
    once per TRIM_SECONDS, once at least TRIM_AFTER connections closed and the open ones are
    down to half their peak since the last trim, so a steady load never pays for it."""

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


class _Tls:
    __slots__ = ("incoming", "obj", "outgoing", "shaken")

    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self.shaken = False


class Connection(asyncio.BufferedProtocol):
    """One accepted connection (plain or TLS)."""

    __slots__ = ("_body", "_close_after", "_closing", "_eof", "_h11", "_head", "_hello", "_idle",
                 "_keep", "_listener", "_paused_reading", "_paused_writing", "_peercert", "_pending",
                 "_remote", "_sent", "_sndbuf", "_sock", "_task", "_tls", "_transport", "peer", "timer")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._sock: Any = None
        self._sndbuf = 0
        self._h11: h11.Connection | None = None
        self._tls: _Tls | None = None
        self._hello = b""
        self._peercert: Any = None
        self._pending: h11.Request | None = None  # a request whose body is still arriving
        self._body: memoryview | None = None      # the answer being written
        self._head = b""
        self._sent = 0
        self._task: asyncio.Task[None] | None = None
        self._idle = False
        self._closing = False
        self._eof = False
        self._keep = True
        self._close_after = False
        self._paused_reading = False
        self._paused_writing = False
        self._remote = ""
        self.peer = "?"
        self.timer: Cancellable | None = None

    # --- asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        transport.set_write_buffer_limits(high=0, low=0)  # pause on anything queued
        self._sock = transport.get_extra_info("socket")
        limit_send_buffer(self._sock)
        self._sndbuf = send_buffer(self._sock)  # fixed from here on: one syscall less an answer
        peer = transport.get_extra_info("peername")
        self._remote = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer or "")
        self.peer = short(self._remote, 64)
        self._listener.guard.opened(self)  # may close it at once (the cap)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._listener.buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        data = bytes(self._listener.buffer[:nbytes])
        if self._listener.ssl_context is None:
            self._http(data)
        else:
            self._tls_received(data)

    def eof_received(self) -> bool | None:
        if self._body is not None or self._task is not None:
            self._eof = True
            return True  # answer what was asked, then close (a client that half-closed)
        return None

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closing = True
        guard = self._listener.guard
        guard.lost(self)
        with contextlib.suppress(RuntimeError):  # no running loop: a unit test's fake
            self._listener.memory.closed_one(guard.open_connections)
        if self._task is not None:
            self._task.cancel()
        self._body = None
        self._h11 = None
        self._tls = None
        self._transport = None

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        self._pump()

    # --- what the guard asks

    def queued(self) -> bool:
        return self._h11 is not None and bool(self._h11.trailing_data[0])

    def abort(self) -> None:
        """Close with a reset: a plain close would queue the FIN behind the answer a
        non-reading client never takes, so the kernel would keep that data and the client
        would never see the connection end."""
        self._closing = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close politely: TLS's close_notify first (the peer's is not awaited), then FIN
        after what is queued."""
        self._closing = True
        tls = self._tls
        if tls is not None and tls.shaken:
            with contextlib.suppress(ssl.SSLError, OSError, ValueError):
                tls.obj.unwrap()
            self._flush_tls()
        if self._transport is not None:
            self._transport.close()

    # --- TLS

    def _tls_received(self, data: bytes) -> None:
        tls = self._tls
        if tls is None:
            # No TLS state until the first record is whole (see the module docstring).
            hello = self._hello + data
            if hello[:1] != b"\x16":  # not a TLS handshake record: nothing to answer
                self._bad("not a TLS handshake", answer=False)
                return
            if len(hello) < 5 or len(hello) < 5 + int.from_bytes(hello[3:5], "big"):
                if len(hello) > MAX_RECORD + 5:
                    self._bad("TLS record too long", answer=False)
                    return
                self._hello = hello
                return
            self._hello = b""
            assert self._listener.ssl_context is not None
            tls = self._tls = _Tls(self._listener.ssl_context)
            data = hello
        tls.incoming.write(data)
        if not tls.shaken:
            try:
                tls.obj.do_handshake()
            except ssl.SSLWantReadError:
                self._flush_tls()
                return
            except (ssl.SSLError, OSError) as exc:
                self._flush_tls()
                self._listener.guard.rate_log(
                    "tls", logging.INFO, "TLS handshake with %s failed: %s", self.peer,
                    short(getattr(exc, "reason", None) or exc))
                self.abort()
                return
            tls.shaken = True
            self._peercert = tls.obj.getpeercert()
        plain = []
        while True:
            try:
                chunk = tls.obj.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                plain.append(b"")
                break
            except (ssl.SSLError, OSError):
                self.abort()
                return
            if not chunk:
                plain.append(b"")
                break
            plain.append(chunk)
        self._flush_tls()
        for chunk in plain:
            self._http(chunk)

    def _flush_tls(self) -> None:
        tls, t = self._tls, self._transport
        if tls is not None and t is not None:
            out = tls.outgoing.read()
            if out:
                t.write(out)

    # --- HTTP

    def _http(self, data: bytes) -> None:
        if self._closing:
            return
        if self._idle and data:
            self._idle = False
            self._listener.guard.started(self)
        if self._h11 is None:
            # The fast path: a read that is exactly one plain GET/HEAD head (http.head); any
            # other bytes go to h11, which validates them as before.
            limits = self._listener.limits
            head = parse_head(data, limits.max_head_size, limits.max_headers)
            if head is not None:
                self._dispatch(head.method, head.target, head.headers, head.keep_alive)
                return
            self._h11 = self._parser()
        self._h11.receive_data(data)
        self._next()

    def _parser(self) -> h11.Connection:
        return h11.Connection(h11.SERVER,
                              max_incomplete_event_size=self._listener.limits.max_head_size)

    def _next(self) -> None:
        """Handle what h11 has parsed, until it needs more bytes or an answer is pending."""
        conn = self._h11
        while conn is not None and not self._closing and self._body is None \
                and self._task is None:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad(str(exc))
                return
            if event is h11.NEED_DATA:
                self._resume_reading()
                return
            if event is h11.PAUSED:  # a request is whole: answered before more is read
                self._pause_reading()
                return
            if isinstance(event, h11.Request):
                if event.http_version not in _VERSIONS:
                    self._bad(f"HTTP version {short(event.http_version, 16)}")
                    return
                if len(event.headers) > self._listener.limits.max_headers:
                    self._bad(f"{len(event.headers)} headers")
                    return
                self._pending = event
            elif isinstance(event, h11.EndOfMessage):
                request, self._pending = self._pending, None
                if request is not None:  # what follows is `_answered`'s
                    headers: dict[str, str] = {}
                    for name, value in request.headers.raw_items():
                        headers[name.decode("latin-1").lower()] = value.decode("latin-1")
                    keep = request.http_version == b"1.1" and "close" not in headers.get(
                        "connection", "").lower()
                    self._dispatch(request.method.decode("latin-1"), request.target, headers,
                                   keep)
                    return
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return
            # h11.Data: a request body nobody reads (every route is a GET): dropped as it comes

    def _dispatch(self, method: str, target: bytes, headers: dict[str, str], keep: bool) -> None:
        path = decode_path(target)
        if path is None:
            self._bad("request target")
            return
        self._keep = keep
        request = Request(method=method, path=path, headers=headers, remote=self._remote,
                          peercert=self._peercert)
        app = self._listener.app
        if app.middleware is None:
            try:
                resp = app.dispatch(request)
            except Exception:  # a bug of ours: the traceback, and a 500 for the client
                log.exception("answering %s %s failed", request.method, short(request.path))
                resp = error(500)
            self._respond(request, resp)
        else:
            self._task = asyncio.get_running_loop().create_task(self._guarded(app, request))
        if self._body is not None or self._task is not None:
            self._pause_reading()  # nothing more is read until this answer is in the kernel

    async def _guarded(self, app: App, request: Request) -> None:
        assert app.middleware is not None
        try:
            resp = await app.middleware(request, app.dispatch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("answering %s %s failed", request.method, short(request.path))
            resp = error(500)
        self._task = None
        if not self._closing:
            self._respond(request, resp)

    def _respond(self, request: Request, resp: Response, *, close: bool = False) -> None:
        """Write `resp`. h11 parses requests only: the answer's head is written here (h11's
        writer cost ~40 us a scrape, as much as the whole answer did before). `_h11` is None
        for a request of the fast path (http.head)."""
        if self._closing or self._transport is None:
            return
        conn = self._h11
        resp = self._listener.app.finish(resp)
        body = resp.body
        close = (close or self._eof or not self._keep
                 or (conn is not None and conn.their_state is not h11.DONE))
        lines = [f"HTTP/1.1 {resp.status} {_reason(resp.status)}\r\n"]
        lines.extend(f"{name}: {value}\r\n" for name, value in resp.headers
                     if _SAFE.isdisjoint(name + value))
        lines.append(f"Content-Length: {len(body)}\r\n")
        if close:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        self._close_after = close
        self._head = "".join(lines).encode("latin-1", errors="replace")
        self._body = memoryview(body if request.method != "HEAD" else b"")
        self._sent = 0
        self._pump()

    def _pump(self) -> None:
        """Write the pending answer, one step per empty transport buffer."""
        t = self._transport
        while self._body is not None and t is not None and not self._paused_writing:
            body, sent = self._body, self._sent
            if sent >= len(body) and not self._head:
                self._answered()
                return
            room = send_room(self._sock, self._sndbuf) if self._sock is not None else 0
            rest = len(body) - sent
            step = rest if rest + len(self._head) + 1024 <= room else max(MIN_STEP, room - 2048)
            piece = body[sent:sent + step]
            self._sent = sent + len(piece)
            head, self._head = self._head, b""
            if self._tls is not None:
                self._tls.obj.write(head)
                if piece:
                    self._tls.obj.write(piece)
                self._flush_tls()
            else:  # one write (one segment) for head and body; no join on Python 3.12+
                t.writelines([head, piece])

    def _answered(self) -> None:
        """The answer is in the kernel: the next request (a fresh parser fed what is left of
        this one's bytes; none when nothing is left, so the next read may take the fast
        path), or close."""
        self._body = None
        if self._closing:
            return
        if self._close_after:
            self._listener.guard.lost(self)
            self.close()
            return
        conn = self._h11
        self._h11 = None
        if conn is not None:
            leftover, eof = conn.trailing_data
            if leftover or eof:
                conn = self._h11 = self._parser()
                if leftover:
                    conn.receive_data(bytes(leftover))
                if eof:
                    conn.receive_data(b"")
        guard = self._listener.guard
        guard.completed(self)
        self._idle = guard.state(self) == "idle"
        if self._h11 is None:
            self._resume_reading()
        else:
            self._next()

    def _bad(self, why: str, *, answer: bool = True) -> None:
        """A malformed request: one rate-limited line, a 400 that echoes nothing, then close."""
        self._listener.guard.rate_log("bad-request", logging.INFO, "bad request from %s: %s",
                                      self.peer, short(why))
        if answer and not self._closing:
            self._pause_reading()
            self._respond(Request(method="GET", path="", headers={}), error(400), close=True)
            if self._body is not None:
                return  # closes once written
        self.abort()

    def _pause_reading(self) -> None:
        if not self._paused_reading and self._transport is not None:
            self._paused_reading = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._paused_reading and self._transport is not None:
            self._paused_reading = False
            self._transport.resume_reading()


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


_SAFE = frozenset("\r\n\0")
"""Characters never written into a header (a value from the web config cannot split the head)."""


def send_buffer(sock: Any) -> int:
    """The socket's send buffer size (SO_SNDBUF), or 0 if unknown."""
    try:
        return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
    except (OSError, AttributeError, ValueError):
        return 0


def send_room(sock: Any, size: int = 0) -> int:
    """Bytes the kernel surely takes now: the send buffer less what is queued and not yet
    acknowledged (SIOCOUTQ), less an eighth for the kernel's own per-packet overhead, which it
    counts against the buffer too. 0 if unknown. The send buffer is fixed per connection
    (guard.SEND_BUFFER), so `size` (its `send_buffer`, read once) stays meaningful; 0 reads it
    now. A misestimate costs a copy of the part the kernel refused, at most one step."""
    try:
        size = size or int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (OSError, AttributeError, ValueError, struct.error):
        return 0
    return max(0, size - int(queued) - size // 8)
