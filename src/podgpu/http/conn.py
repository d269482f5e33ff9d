"""One HTTP/1.1 connection: h11 (the one request parser) under a plain `asyncio.BufferedProtocol`,
TLS through http.tlslayer, moved through the states of http.states, and told to the guard
(deadlines, the cap) and the memory budget (http.budget). Only public interfaces of asyncio, ssl
and h11 are used; the bounds come from how they are driven:
- counted at accept, before any TLS byte, so the cap and the deadline cover stalled handshakes;
- reads go into the listener's one shared buffer, copied out at once; reading pauses while an
  answer is pending, so requests are answered one at a time, whole and in order (TLS and plain),
  and a client that pipelines and never reads holds at most one read of them;
- a request is answered at its head (h11's `Request`): a fresh parser per request, dropped
  after it with what it holds beyond the head going to the next one; a read that is exactly a
  head a fresh parser read whole before (http.wire.Seen: a scraper's every request) is answered
  by what h11 read in it then;
- an answer goes to the kernel in steps (http.sockio), the next once the transport's buffer is
  empty (high-water mark 0); the unsent body is a memoryview of the one published `bytes`;
- every route takes no body: a request that announces one is answered once its head is read
  (`Expect: 100-continue` gets its final status at once, RFC 9110 section 10.1.1), then closed;
  Content-Length with Transfer-Encoding is a 400 and a close (RFC 9112 section 6.1);
- a malformed request gets a short 400 naming nothing of it and one rate-limited log line;
- a last answer is followed by our FIN and a bounded drop of what the peer still sends until it
  closes (LINGER), so no reset eats the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import h11

from podgpu.http.app import App, Request, Response, error
from podgpu.http.ratelog import short
from podgpu.http.sockio import (
    Outgoing,
    limit_send_buffer,
    reset_on_close,
    send_buffer,
    write_plain,
)
from podgpu.http.states import Event, Machine, State
from podgpu.http.tlsgate import Refused
from podgpu.http.wire import Head, answer_of, examine, failed, response_head

if TYPE_CHECKING:
    from podgpu.http.listener import Listener

DISCARD_LIMIT = 256 * 1024
"""Bytes a lingering connection may still send before it is reset (Go's net/http discards at
most 256 KiB of an unread body, src/net/http/server.go `maxPostHandlerReadBytes`)."""
_E, _S = Event, State


class Connection(asyncio.BufferedProtocol):
    """One accepted connection (plain or TLS)."""

    __slots__ = ("_close_after", "_discarded", "_eof", "_fed", "_h11", "_listener", "_looping",
                 "_out", "_paused_writing", "_pump_soon", "_remote",
                 "_sndbuf", "_sock", "_task", "_tls", "_transport", "machine", "peer")

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        ctx = listener.ssl_context
        self.machine = Machine(_S.HELLO if ctx is not None else _S.IDLE)
        self._transport: asyncio.Transport | None = None
        self._sock: Any = None
        self._sndbuf = 0
        self._h11: h11.Connection | None = None
        if ctx is not None:  # loaded on the first TLS connection: a plain start never needs it
            from podgpu.http.tlslayer import TlsLayer
        self._tls = TlsLayer(ctx) if ctx is not None else None
        self._fed: bytes | None = None  # all a fresh parser was fed: one read, from IDLE
        self._out: Outgoing | None = None  # the answer being written
        self._task: asyncio.Task[None] | None = None
        self._eof = self._close_after = self._paused_writing = False
        self._pump_soon = self._looping = False
        self._discarded = 0
        self._remote, self.peer = "", "?"

    @property
    def state(self) -> State:
        return self.machine.state

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
        return self._listener.discard if self.state is _S.LINGER else self._listener.buffer

    def buffer_updated(self, nbytes: int) -> None:
        state = self.state
        if state is _S.LINGER:
            self._discarded += nbytes
            if self._discarded > DISCARD_LIMIT:
                self.abort()
        if state in (_S.LINGER, _S.CLOSED):
            return
        data = bytes(self._listener.buffer[:nbytes])
        if self._tls is None:
            self._http(data)
        else:
            self._tls_received(data)
        self._charge()

    def eof_received(self) -> bool | None:
        """The peer shut its side: close once what it asked is answered."""
        self._peer_eof()
        if self.state is _S.ANSWER:
            return True  # the transport stays open for the answer
        self.close()
        return None

    def _peer_eof(self) -> None:
        """The peer sent all it will (TCP FIN or TLS close_notify): what it sent whole is
        answered; else close. In other states `_eof` alone tells: an answer under way closes the
        connection once written."""
        self._eof = True
        if self.state not in (_S.IDLE, _S.HEAD):
            return
        if self._h11 is None:
            return self.close()
        self._fed = None
        self._h11.receive_data(b"")
        self._next()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.state is not _S.CLOSED:
            self.machine.fire(_E.CLOSE)
        guard = self._listener.guard
        guard.lost(self)
        self._listener.budget.release(self)
        with contextlib.suppress(RuntimeError):  # no running loop: a unit test's fake
            self._listener.memory.closed_one(guard.open_connections)
        if self._task is not None:
            self._task.cancel()
        self._out = self._h11 = self._tls = self._transport = None

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        """The next step in the loop's next turn: called from inside the transport's write
        handler, which closes the socket itself after a close() made here (asyncio then
        logged an AttributeError for the second close)."""
        self._paused_writing = False
        if not self._pump_soon and self._transport is not None:
            self._pump_soon = True
            self._listener.call_soon(self._pump)

    # --- what the guard and the budget ask

    def queued(self) -> bool:
        return self.state is _S.HEAD  # a pipelined request's bytes are waiting

    def abort(self) -> None:
        """Close with a reset (a FIN would wait behind an answer a non-reader never takes)."""
        if self.state is _S.CLOSED:
            return
        self.machine.fire(_E.CLOSE)
        self._listener.budget.release(self)
        reset_on_close(self._sock)
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        """Close politely: TLS's close_notify, then FIN after what is queued."""
        if self.state is _S.CLOSED:
            return
        self._close_notify()
        self.machine.fire(_E.CLOSE)
        if self._transport is not None:
            self._transport.close()

    def _charge(self) -> None:
        """Tell the budget what this connection holds now (http.budget says what counts)."""
        if self.state is _S.CLOSED:
            return
        held = 0
        if self._tls is not None and (self.state is not _S.IDLE or
                                      self._listener.guard.state(self) != "idle"):
            held = self._tls.held()  # a scraper between requests holds nothing
        if self._h11 is not None:
            held += len(self._h11.trailing_data[0])
        if self._transport is not None:
            held += self._transport.get_write_buffer_size()
        self._listener.budget.charge(self, held)

    # --- TLS

    def _tls_received(self, data: bytes) -> None:
        tls = self._tls
        assert tls is not None
        try:
            got = tls.receive(data)
        except Refused as exc:
            self._send_tls(tls.outgoing())  # OpenSSL's alert, if it made one
            self._listener.guard.rate_log("tls", logging.INFO, "TLS with %s refused: %s",
                                          self.peer, exc)
            self.abort()
            return
        if got.hello_whole:
            self.machine.fire(_E.HELLO_WHOLE)
        if got.shaken:
            self.machine.fire(_E.SHAKEN)
        self._send_tls(tls.outgoing())
        if got.plain:
            self._http(got.plain)
        if got.eof:
            self._peer_eof()

    def _send_tls(self, out: bytes) -> None:
        if out and self._transport is not None:
            self._transport.write(out)

    def _close_notify(self) -> None:
        if self._tls is not None and self.state is not _S.CLOSED:
            self._send_tls(self._tls.close_notify())

    # --- HTTP

    def _http(self, data: bytes) -> None:
        conn = self._h11
        if self.state is _S.IDLE:
            self.machine.fire(_E.BYTES)
            self._listener.guard.started(self)
            head = self._listener.heads.get(data) if conn is None else None
            if head is not None:  # a fresh parser read these very bytes whole before
                self._dispatch(head)
                return
        if conn is None:
            conn = self._h11 = self._listener.parser()
            self._fed = data
        else:
            self._fed = None
        conn.receive_data(data)
        if self.state is _S.HEAD:
            self._next()

    def _next(self) -> None:
        """Handle what h11 has parsed, one request at a time, until it needs more bytes or an
        answer waits for the peer. A loop, not a recursion: an answer written at once lets the
        next pipelined request be read here."""
        if self._looping:
            return  # the loop below goes on with the parser `_answered` set up
        self._looping = True
        try:
            while self._h11 is not None and self.state in (_S.HEAD, _S.IDLE):
                if not self._event(self._h11):
                    self._resume_reading()
                    return
        finally:
            self._looping = False

    def _event(self, conn: h11.Connection) -> bool:
        """Handle one event of h11's; False when it needs more bytes."""
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            self._bad(str(exc))
            return True
        if event is h11.NEED_DATA:
            return False
        if event is h11.PAUSED:  # not reached: every request is answered before the next
            self._bad("protocol switch")
        elif isinstance(event, h11.Request):
            head = examine(event, self._listener.limits.max_headers)
            if isinstance(head, str):
                self._bad(head)
                return True
            fed, self._fed = self._fed, None
            if fed is not None and conn.trailing_data == (b"", False):
                self._listener.heads.add(fed, head)  # one read, this head and nothing more
            # Answered at once: without a body, h11's EndOfMessage is next and takes no byte
            # (RFC 9112 section 6.3); with one, the body is never read and the connection
            # closes after the answer.
            self._dispatch(head)
        elif isinstance(event, h11.ConnectionClosed):
            self.close()
        return True  # EndOfMessage (not reached: the parser is dropped after its Request)

    def _dispatch(self, head: Head) -> None:
        self.machine.fire(_E.REQUEST)
        self._close_after = head.body or not head.keep
        request = Request(method=head.method, path=head.path, headers=head.headers,
                          remote=self._remote,
                          peercert=self._tls.peercert if self._tls is not None else None)
        app = self._listener.app
        if app.middleware is None:
            self._respond(request.method, answer_of(app.dispatch, request))
        else:
            self._task = asyncio.get_running_loop().create_task(self._guarded(app, request))
        if self.state is _S.ANSWER:
            self._pause_reading()  # nothing more is read until this answer is in the kernel

    async def _guarded(self, app: App, request: Request) -> None:
        assert app.middleware is not None
        try:
            resp = await app.middleware(request, app.dispatch)
        except Exception:  # a bug of ours: the traceback, and a 500 for the client
            resp = failed(request)
        self._task = None
        self._respond(request.method, resp)

    def _respond(self, method: str, resp: Response) -> None:
        if self.state is not _S.ANSWER or self._transport is None:
            return
        resp = self._listener.app.finish(resp)
        self._close_after = close = self._close_after or self._eof
        self._out = Outgoing(response_head(resp, close=close),
                             resp.body if method != "HEAD" else b"")
        self._pump()

    def _pump(self) -> None:
        """Write the pending answer, one step per empty transport buffer."""
        self._pump_soon = False
        t, out = self._transport, self._out
        # a transport that failed a write (the peer reset) is closing before connection_lost
        # comes: what is still pending, pipelined answers included, is not written to it
        while out is not None and t is not None and not t.is_closing() and \
                not self._paused_writing:
            if out.done:
                self._answered()
                break  # to the charge below: an answer done in a later turn holds nothing
            head, piece = out.step(self._sock, self._sndbuf)
            if self._tls is not None:
                t.write(self._tls.encrypt(head, piece))
            else:
                write_plain(t, head, piece)
        self._charge()

    def _answered(self) -> None:
        """The answer is in the kernel: linger and close, or the next request (a fresh parser
        fed what is left of this one's bytes)."""
        self._out = None
        guard = self._listener.guard
        if self._close_after:
            self.machine.fire(_E.LAST)
            guard.closing(self)
            self._close_notify()
            self._h11 = self._tls = self._fed = None  # what the peer still sends is dropped
            t = self._transport
            if self._eof or t is None:
                self.close()
                return
            try:
                t.write_eof()  # FIN after the answer; the peer's bytes are read and dropped
            except OSError:  # the peer is already gone (ENOTCONN): nothing to linger for
                self.close()
                return
            self._resume_reading()
            return
        conn = self._h11
        self._h11 = self._fed = None
        leftover = b""
        if conn is not None:
            unread, closed = conn.trailing_data  # h11 copies its buffer on each access
            leftover = bytes(unread)
            if leftover or closed:
                self._h11 = self._listener.parser()
                if leftover:
                    self._h11.receive_data(leftover)
        self.machine.fire(_E.PIPELINED if leftover else _E.ANSWERED)
        guard.completed(self)
        if self._eof and self._h11 is None:
            self.close()
        elif self._h11 is None:
            self._resume_reading()
        else:
            if self._eof:
                self._h11.receive_data(b"")
            self._next()  # nothing when called from within `_next`'s loop: it goes on

    def _bad(self, why: str) -> None:
        """A malformed request: one rate-limited line, a 400 that echoes nothing, then close."""
        self._listener.guard.rate_log("bad-request", logging.INFO, "bad request from %s: %s",
                                      self.peer, short(why))
        self.machine.fire(_E.REQUEST)
        self._pause_reading()
        self._close_after = True
        self._respond("GET", error(400))

    def _pause_reading(self) -> None:
        if self._transport is not None:
            self._transport.pause_reading()  # idempotent, as resume_reading

    def _resume_reading(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()
