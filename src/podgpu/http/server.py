"""The listener of every podgpu command: one app factory (`make_app`) and one runner
(`run_listener`) for `podgpu serve` and `podgpu emf`.

A scrape costs a memory copy: /metrics answers bytes rendered (and gzipped) by the collect loop
or the bridge's tick (http.publish); no handler touches the backend, the kubelet or the renderer.
Connections are http.conn's (h11 under asyncio, TLS through ssl.MemoryBIO), bounded by
http.guard; the decision and its numbers: docs/decisions/0022-listener-h11.md.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from podgpu import __version__
from podgpu.errors import ConfigError, ListenError
from podgpu.files import packaged
from podgpu.http.app import App, Request, Response
from podgpu.http.guard import (
    ACCEPT_BACKLOG,
    ACCEPT_PER_TURN,
    ConnectionGuard,
    Limits,
    quiet_accept_errors,
)
from podgpu.http.listener import Listener
from podgpu.http.live import add_live_routes, page_response
from podgpu.http.publish import Publisher
from podgpu.http.sighup import install_sighup
from podgpu.signals import TERMINATION, off_signal, on_signal
from podgpu.sinks.prometheus import CONTENT_TYPE

if TYPE_CHECKING:
    from podgpu.http.lifecycle import Stopper
    from podgpu.http.websecurity import WebSecurity
    from podgpu.settings import HttpSettings

log = logging.getLogger(__name__)
HealthFn = Callable[[bool], tuple[int, dict[str, Any]]]
"""(strict) -> (status, JSON body): /health, or /health/gpus with strict=True."""


class Body(Protocol):
    """What /metrics serves: http.publish's Published (serve's and emf's)."""

    @property
    def body(self) -> bytes: ...

    @property
    def body_gzip(self) -> bytes: ...


def make_app(metrics: Callable[[], Body | None], health: HealthFn, *,
             index: Callable[[], Response], ready: Callable[[], tuple[int, dict[str, Any]]]
             | None = None, live: Publisher[Any] | None = None) -> App:
    """The routes of every command: /metrics (identity or gzip), /health, /health/gpus, `/`,
    /health/ready when `ready` is given, the live view's routes when `live` is given."""

    def metrics_handler(request: Request) -> Response:
        current = metrics()
        if current is None:
            return Response.text(503, "no collection has completed yet\n")
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            return Response.of(200, current.body_gzip, CONTENT_TYPE, ("Content-Encoding", "gzip"),
                               ("Vary", "Accept-Encoding"))
        return Response.of(200, current.body, CONTENT_TYPE, ("Vary", "Accept-Encoding"))

    def health_handler(request: Request) -> Response:
        # /health never fails for a lost GPU or a missing kubelet; /health/gpus does
        return json_response(*health(request.path == "/health/gpus"))

    app = App()
    app.add_get("/metrics", metrics_handler)
    app.add_get("/health", health_handler)
    app.add_get("/health/gpus", health_handler)
    app.add_get("/", lambda _r: index())
    if ready is not None:
        from podgpu.http.ready import READY_PATH

        app.add_get(READY_PATH, lambda _r: json_response(*ready()))
    if live is not None:
        add_live_routes(app, live)
    return app


def json_response(status: int, body: dict[str, Any]) -> Response:
    return Response.of(status, json.dumps(body) + "\n", "application/json; charset=utf-8")


def landing(backend: str, publisher: Publisher[Any]) -> Callable[[], Response]:
    """`/` of serve: the live page of the last cycle, else the static landing page."""
    page = (packaged(__file__, "landing.html").decode()
            .replace("{backend}", backend).replace("{version}", __version__).encode())

    def index() -> Response:
        live = page_response(publisher.current)
        if live is not None:
            return live
        return Response.of(200, page, "text/html; charset=utf-8")

    return index


def run_listener(app: App, http: HttpSettings, *, security: WebSecurity | None,
                 stopper: Stopper, reload_blocking: Sequence[Callable[[], object]] = (),
                 ready: Callable[[list[tuple[str, int]], ConnectionGuard], None] | None = None,
                 before_accept: Callable[[], object] | None = None) -> None:
    """Serve `app` as `http` says until stopped (SIGTERM, SIGINT, `stopper.stop`): the web
    config (`security`) guards every route and reloads on SIGHUP with `reload_blocking`;
    `before_accept` as serve_until_stopped says."""
    if security is not None:
        security.install(app)  # every route: basic auth, headers, SANs, rate limit
    install_sighup(app, blocking=reload_blocking,
                   on_loop=[security.request_reload] if security is not None else [])
    assert http.port is not None
    stopper.run(serve_until_stopped(
        app, http.host, http.port,
        limits=Limits(max_connections=http.max_connections, request_timeout=http.request_timeout),
        ssl_context=security.ssl_context if security is not None else None, ready=ready,
        before_accept=before_accept))


async def serve_until_stopped(app: App, host: str | None, port: int, *,
                              limits: Limits | None = None,
                              ssl_context: ssl.SSLContext | None = None,
                              ready: Callable[[list[tuple[str, int]], ConnectionGuard], None]
                              | None = None,
                              before_accept: Callable[[], object] | None = None) -> None:
    """Listen until SIGTERM or SIGINT, then close the listener and the connections.

    `ready(addresses, guard)` runs once listening: the bound (host, port) pairs (port 0 asks the
    OS for one) and the guard, whose counters the caller exports. Off the main thread (an agent
    started by a test) no signal handler is installed; cancel the task to stop.

    `before_accept()` (serve: the first cycle published) runs once the port is bound and
    listening, before the first connection is accepted, blocking this loop, which has nothing to
    run yet: a client that connects meanwhile waits in the kernel's backlog and is answered as
    soon as it returns, rather than refused and left to retry. What it raises closes the port and
    is raised here.

    Raises ConfigError when `host` cannot be resolved or is not an address of this machine, and
    ListenError when the port cannot be bound (in use, no permission)."""
    limits = limits or Limits()
    loop = asyncio.get_running_loop()
    guard = ConnectionGuard(limits)
    quiet_accept_errors(loop, guard.rate_log)
    # TLS is http.conn's, not create_server(ssl=...)'s, so a connection counts and runs on the
    # deadline from accept, before its handshake.
    factory = Listener(app, guard, ssl_context=ssl_context)
    await app.startup()
    try:
        try:
            listener = await loop.create_server(factory, _every_address(host, port), port,
                                                reuse_address=True, backlog=ACCEPT_PER_TURN,
                                                start_serving=before_accept is None)
        except OSError as exc:
            raise _listen_error(exc, host, port) from None
        _deepen_backlog(listener)  # listening from here on: the kernel queues who comes
        if before_accept is not None:
            try:
                before_accept()
                await listener.start_serving()  # listen() again, with asyncio's backlog
            except BaseException:  # what it raised, or a stop that came meanwhile
                listener.close()
                raise
            _deepen_backlog(listener)
        scheme = "https" if ssl_context is not None else "http"
        for addr in _bound(listener):
            log.info("listening on %s://%s/metrics (at most %d connections, %g s per request)",
                     scheme, addr, guard.cap, limits.request_timeout)
        if ready is not None:
            ready([sock.getsockname()[:2] for sock in listener.sockets], guard)
        stop = asyncio.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in TERMINATION:
                on_signal(loop, sig, stop.set)
        try:
            await stop.wait()
            log.info("stopping")
        finally:
            listener.close()
            guard.close_all()
            if threading.current_thread() is threading.main_thread():
                for sig in TERMINATION:
                    off_signal(loop, sig)  # ignored from now on: a storm never kills the stop
    finally:
        await app.cleanup()


def _every_address(host: str | None, port: int) -> str | list[str]:
    """`host`, or for every interface (None or "") the wildcard addresses it stands for, asked of
    getaddrinfo here as asyncio would ask it (AI_PASSIVE: no name to look up). Handed numeric
    addresses, asyncio binds them as it would have; asked for the wildcard, it would start its
    default executor, a thread kept for good, only to call getaddrinfo."""
    if host:
        return host
    infos = socket.getaddrinfo(None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


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
