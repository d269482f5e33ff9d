"""aiohttp server: serves the published bytes, the health verdict and the landing page.

A scrape costs a memory copy: no handler touches the backend, the kubelet or the renderer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

from aiohttp import web

from podgpu import __version__
from podgpu.http.health import health
from podgpu.http.live import add_live_routes, page_response
from podgpu.http.publish import Publisher
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

    async def metrics(request: web.Request) -> web.Response:
        pub = publisher.current
        if pub is None:
            return web.Response(status=503, text="no collection has completed yet\n",
                                headers=_NOSNIFF)
        headers = {"Content-Type": CONTENT_TYPE, **_NOSNIFF}
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=pub.body_gzip, headers=headers)
        return web.Response(body=pub.body, headers=headers)

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
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health_handler)
    app.router.add_get("/health/gpus", health_handler)
    app.router.add_get("/", index)
    add_live_routes(app, publisher)
    return app


async def serve_until_stopped(app: web.Application, host: str | None, port: int) -> None:
    """Listen until SIGTERM or SIGINT, then close listeners and finish in-flight requests."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, shutdown_timeout=5.0)
    await site.start()
    for addr in _bound(runner):
        log.info("listening on http://%s/metrics", addr)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("stopping")
    finally:
        await runner.cleanup()


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


def _bound(runner: web.AppRunner) -> list[str]:
    out = []
    for srv in runner.sites:
        server = getattr(srv, "_server", None)
        for sock in getattr(server, "sockets", None) or []:
            h, p = sock.getsockname()[:2]
            out.append(f"[{h}]:{p}" if ":" in h else f"{h}:{p}")
    return out
