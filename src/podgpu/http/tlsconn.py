"""TLS for the listener with the guard in front of the handshake (issue 19 item 1).

Why not `loop.create_server(ssl=...)`: asyncio then hands a connection to its protocol only after
the handshake, so the guard could neither count nor time a connection that never finishes one,
and asyncio's `SSLProtocol` allocates a 256 KiB read buffer per connection at accept. Measured
before this module: 1,000 silent TCP connects to the TLS port took +301 MiB (300 took +96 MiB)
and none counted against the connection cap.

Here the listener is a plain TCP server whose protocol factory wraps each `GuardedHandler` in
`GuardedTLSProtocol`, asyncio's own TLS state machine with three changes:
- the guard is told of the TCP connection at accept (`GuardedHandler.tcp_opened`), so the cap
  counts it and the request deadline covers the handshake, and aborting it closes the socket;
- the handshake starts when the client's first bytes arrive, so a silent connection costs no
  OpenSSL handshake buffers (measured: ~42 KiB per connection once started, ~10 KiB before);
- every connection of one listener shares one read buffer (`SharedReadBuffer`): asyncio fills it
  and copies it into the connection's TLS input in the same call on the event loop thread, so
  nothing is ever left in it between calls;
- the raw socket's write buffer pauses the TLS layer as soon as anything is queued, so a client
  that does not read holds at most one encrypted chunk in podgpu's memory.

`asyncio.sslproto.SSLProtocol` is not public API; its constructor and `get_buffer` /
`buffer_updated` contract are the same in Python 3.11-3.13 (tests/unit/http/test_tlsconn.py
exercises them on the interpreter that runs the tests).
"""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from typing import TYPE_CHECKING, Any

from podgpu.http.guard import limit_send_buffer

if TYPE_CHECKING:
    from podgpu.http.guard import GuardedHandler

READ_SIZE = 16 * 1024 + 256
"""Bytes read from the socket at once: one TLS record (16 KiB of data plus its header and MAC)."""
SHUTDOWN_SECONDS = 5.0
"""How long a closing connection may take for its TLS close_notify (asyncio's default is 30 s)."""


class SharedReadBuffer:
    """One receive buffer for every TLS connection of a listener (see the module docstring)."""

    def __init__(self, size: int = READ_SIZE) -> None:
        self.data = bytearray(size)
        self.view = memoryview(self.data)


class GuardedTLSProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol, reporting the TCP connection to the guard before the handshake."""

    max_size = READ_SIZE

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: GuardedHandler,
                 context: ssl.SSLContext, buffer: SharedReadBuffer, *,
                 handshake_timeout: float) -> None:
        # typeshed describes the pre-3.11 signature (no shutdown timeout, a required waiter)
        super().__init__(loop, handler, context, None,  # type: ignore[arg-type]
                         server_side=True,
                         ssl_handshake_timeout=handshake_timeout,  # type: ignore[arg-type]
                         ssl_shutdown_timeout=min(SHUTDOWN_SECONDS, handshake_timeout),
                         )  # type: ignore[call-arg]
        self._ssl_buffer = buffer.data  # drop the per-connection buffer asyncio allocated
        self._ssl_buffer_view = buffer.view
        self._handler = handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.set_write_buffer_limits(high=0, low=0)  # pause on anything queued
        limit_send_buffer(transport)
        self._silent: asyncio.BaseTransport | None = transport
        self._handler.tcp_opened(transport)  # may close it at once (the cap)

    def buffer_updated(self, nbytes: int) -> None:
        if self._silent is not None:
            # The handshake starts with the client's first bytes, not at accept: OpenSSL
            # allocates ~33 KiB of buffers on the first handshake step, which a silent
            # connection then never costs.
            transport, self._silent = self._silent, None
            super().connection_made(transport)
        super().buffer_updated(nbytes)  # type: ignore[misc]  # (typeshed: pre-3.11 class)

    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self._silent is not None:
            return None  # closed without a byte: let the transport close
        return super().eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._silent = None
        self._handler.tcp_lost()
        super().connection_lost(exc)

    def get_buffer(self, n: int) -> Any:
        return self._ssl_buffer_view


def tls_factory(make_handler: Any, context: ssl.SSLContext, *,
                handshake_timeout: float) -> Any:
    """A protocol factory for `loop.create_server` (without `ssl=`) serving TLS with `context`."""
    buffer = SharedReadBuffer()
    loop = asyncio.get_running_loop()

    def factory() -> GuardedTLSProtocol:
        return GuardedTLSProtocol(loop, make_handler(), context, buffer,
                                  handshake_timeout=handshake_timeout)

    return factory
