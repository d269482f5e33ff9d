"""aiohttp server: serves the published bytes, the health verdict and the landing page.

A scrape costs a memory copy: no handler touches the backend, the kubelet or the renderer.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import logging
import signal
import socket
import ssl
import struct
import termios
import threading
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from aiohttp import web

from podgpu import __version__
from podgpu.errors import ConfigError, ListenError
from podgpu.http.guard import (
    ACCEPT_BACKLOG,
    ACCEPT_PER_TURN,
    SERVER_NAME,
    WRITE_CHUNK,
    ConnectionGuard,
    Limits,
    quiet_accept_errors,
)
from podgpu.http.health import health
from podgpu.http.live import add_live_routes, page_response
from podgpu.http.publish import Publisher
from podgpu.http.tlsconn import tls_factory
from podgpu.sinks.prometheus import CONTENT_TYPE

log = logging.getLogger(__name__)
_NOSNIFF = {"X-Content-Type-Options": "nosniff"}


def make_app(publisher: Publisher, *, interval: float, backend: str,
             sinks: Mapping[str, Callable[[], dict[str, Any]]] | None = None) -> web.Application:
    """`sinks`: name -> status callable for /health's body (e.g. the EMF destination); a
    failing sink is reported there but never turns /health into 503."""
    landing = (
        resources.files("podgpu.http").joinpath("landing.html").read_text(encoding="utf-8")
        .replace("{backend}", backend).replace("{version}", __version__).encode()
    )

    async def metrics(request: web.Request) -> web.StreamResponse:
        pub = publisher.current
        if pub is None:
            return web.Response(status=503, text="no collection has completed yet\n",
                                headers=_NOSNIFF)
        headers = {"Content-Type": CONTENT_TYPE, "Vary": "Accept-Encoding", **_NOSNIFF}
        body = pub.body
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            headers["Content-Encoding"] = "gzip"
            body = pub.body_gzip
        return await send_in_chunks(request, body, headers)

    async def health_handler(request: web.Request) -> web.Response:
        # /health never fails for a lost GPU or a missing kubelet; /health/gpus does (issue 9)
        strict = request.path.rstrip("/") == "/health/gpus"
        status, body = health(publisher.current, time.time(), interval, backend, strict=strict)
        for name, status_of in (sinks or {}).items():
            body[name] = status_of()
        return web.Response(status=status, text=json.dumps(body) + "\n",
                            content_type="application/json", headers=_NOSNIFF)

    async def index(_request: web.Request) -> web.Response:
        live = page_response(publisher.current)  # the live page when cli wires it (issue 12)
        if live is not None:
            return live
        return web.Response(body=landing, content_type="text/html", charset="utf-8",
                            headers=_NOSNIFF)

    app = web.Application()
    app.on_response_prepare.append(_server_header)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health_handler)
    app.router.add_get("/health/gpus", health_handler)
    app.router.add_get("/", index)
    add_live_routes(app, publisher)
    return app


async def serve_until_stopped(app: web.Application, host: str | None, port: int, *,
                              limits: Limits | None = None,
                              ssl_context: ssl.SSLContext | None = None,
                              ready: Callable[[list[tuple[str, int]], ConnectionGuard], None]
                              | None = None) -> None:
    """Listen until SIGTERM or SIGINT, then close listeners and finish in-flight requests.

    `ready(addresses, guard)` runs once listening: the bound (host, port) pairs (port 0 asks the
    OS for one) and the guard, whose counters the caller exports. Off the main thread (an agent
    started by a test) no signal handler is installed; cancel the task to stop.

    Connections go through http.guard (request deadline, connection cap, quiet bad requests).
    Raises ConfigError when `host` cannot be resolved or is not an address of this machine, and
    ListenError when the port cannot be bound (in use, no permission)."""
    limits = limits or Limits()
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=5.0,
                           **limits.handler_kwargs())
    await runner.setup()
    loop = asyncio.get_running_loop()
    assert runner.server is not None
    guard = ConnectionGuard(runner.server, limits, loop=loop)
    quiet_accept_errors(loop, guard.rate_log)
    # TLS is layered under the guard's handler (http.tlsconn), not by create_server(ssl=...), so
    # a connection counts and runs on the deadline from accept, before its handshake (issue 19).
    factory: Callable[[], asyncio.BaseProtocol] = (
        guard if ssl_context is None
        else tls_factory(guard, ssl_context, handshake_timeout=limits.request_timeout))
    try:
        listener = await loop.create_server(factory, host, port, reuse_address=True,
                                            backlog=ACCEPT_PER_TURN)
    except OSError as exc:
        await runner.cleanup()
        raise _listen_error(exc, host, port) from None
    _deepen_backlog(listener)
    scheme = "https" if ssl_context is not None else "http"
    for addr in _bound(listener):
        log.info("listening on %s://%s/metrics (at most %d connections, %g s per request)",
                 scheme, addr, guard.cap, limits.request_timeout)
    if ready is not None:
        ready([sock.getsockname()[:2] for sock in listener.sockets], guard)
    stop = asyncio.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("stopping")
    finally:
        listener.close()
        await runner.cleanup()


async def send_in_chunks(request: web.Request, body: bytes,
                         headers: dict[str, str]) -> web.StreamResponse:
    """Write `body` so that a client that does not read costs little memory (issue 19).

    Written whole, the part the kernel does not take is copied into the transport's buffer
    (asyncio on Python 3.11, and aiohttp joins headers and body into one copy on 3.12 before
    3.12.9) or into the TLS layer's, and stays there until the request deadline: measured, 2,000
    pipelining clients that never read took +293 MiB (3.11) and +139 MiB (3.12.1). Here each step
    writes what the socket's send buffer surely has room for (the whole body, for a client that
    reads) and at least MIN_STEP, after the previous step left podgpu's buffers, so such a client
    holds MIN_STEP at most. TLS, whose layer encrypts what it is given at once, goes in
    WRITE_CHUNK pieces."""
    tls = request.transport is not None and request.transport.get_extra_info("sslcontext")
    sock = None if tls or request.transport is None else request.transport.get_extra_info("socket")
    if sock is not None and len(body) + 1024 <= send_room(sock):  # the usual case: one write
        return web.Response(body=body, headers=headers)
    resp = web.StreamResponse(headers=headers)
    resp.content_length = len(body)
    await resp.prepare(request)
    view = memoryview(body)
    start = 0
    try:
        while start < len(view):
            step = WRITE_CHUNK if sock is None else max(MIN_STEP, send_room(sock))
            await resp.write(view[start:start + step])
            start += step
            await request.writer.drain()
        await resp.write_eof()
    except ConnectionError:  # the client left, or the guard closed it: nothing to answer
        pass
    return resp


MIN_STEP = 1024
"""Bytes written when the socket has no room: what a client that does not read keeps."""


def send_room(sock: Any) -> int:
    """Bytes the kernel surely takes now: the send buffer less what is queued and not yet
    acknowledged (SIOCOUTQ), less an eighth for the kernel's own per-packet overhead, which it
    counts against the buffer too. 0 if unknown. The send buffer is fixed per connection
    (guard.SEND_BUFFER), so this stays meaningful; a misestimate costs a copy of the part the
    kernel refused, at most one step."""
    try:
        size = int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (OSError, AttributeError, ValueError, struct.error):
        return 0
    return max(0, size - int(queued) - size // 8)


def _listen_error(exc: OSError, host: str | None, port: int) -> Exception:
    """One line for the user: bad input (ConfigError, exit 2) or a runtime failure (exit 1)."""
    where = f"--address {'[' + host + ']' if host and ':' in host else host or ''}:{port}"
    if isinstance(exc, socket.gaierror):
        return ConfigError(f"{where}: cannot resolve host {host!r}: {exc.strerror or exc}")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"{where}: {host} is not an address of this machine")
    if exc.errno == errno.EADDRINUSE:
        return ListenError(f"{where}: port {port} is already in use (another exporter?)")
    if exc.errno == errno.EACCES:
        return ListenError(f"{where}: permission denied (ports below 1024 need privileges)")
    return ListenError(f"{where}: cannot listen: {exc.strerror or exc}")


async def _server_header(_request: web.Request, response: web.StreamResponse) -> None:
    """Name the product, not the aiohttp and Python versions aiohttp would put there."""
    response.headers["Server"] = SERVER_NAME


def accepts_gzip(accept_encoding: str) -> bool:
    """True when the client takes gzip: named (or `*`) with a q-value above 0 (RFC 9110 §12.5.3).

    An explicit gzip entry wins over `*`."""
    star: float | None = None
    for part in accept_encoding.split(","):
        coding, *params = (x.strip() for x in part.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        coding = coding.lower()
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q
    return star is not None and star > 0


def _deepen_backlog(listener: asyncio.Server) -> None:
    """Give the kernel ACCEPT_BACKLOG for connections asyncio accepts ACCEPT_PER_TURN at a time
    (listen() again on a duplicate of each listening socket changes the socket they share)."""
    for ts in listener.sockets:
        with socket.fromfd(ts.fileno(), ts.family, ts.type) as dup:
            dup.listen(ACCEPT_BACKLOG)


def _bound(listener: asyncio.Server) -> list[str]:
    out = []
    for sock in listener.sockets:
        h, p = sock.getsockname()[:2]
        out.append(f"[{h}]:{p}" if ":" in h else f"{h}:{p}")
    return out
