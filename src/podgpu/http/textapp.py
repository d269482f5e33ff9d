"""A small aiohttp app for a process whose /metrics is rendered on request (`podgpu emf`): the
same headers as serve's app, so it runs under the same web config, guard and limits through
http.server.serve_until_stopped."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from podgpu.http.guard import SERVER_NAME
from podgpu.sinks.prometheus import CONTENT_TYPE

_NOSNIFF = {"X-Content-Type-Options": "nosniff"}


def make_text_app(metrics: Callable[[], bytes], health: Callable[[], tuple[int, dict[str, Any]]],
                  *, index: bytes) -> web.Application:
    """`metrics()` is the exposition body; `health()` (status, JSON body); `index` the page at /.
    Both callables run on the event loop: they must only read state other threads keep."""

    async def metrics_handler(_request: web.Request) -> web.Response:
        return web.Response(body=metrics(), headers={"Content-Type": CONTENT_TYPE, **_NOSNIFF})

    async def health_handler(_request: web.Request) -> web.Response:
        status, body = health()
        return web.Response(status=status, text=json.dumps(body) + "\n",
                            content_type="application/json", headers=_NOSNIFF)

    async def index_handler(_request: web.Request) -> web.Response:
        return web.Response(body=index, content_type="text/plain", headers=_NOSNIFF)

    async def server_header(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Server"] = SERVER_NAME

    app = web.Application()
    app.on_response_prepare.append(server_header)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/health", health_handler)
    app.router.add_get("/", index_handler)
    return app
