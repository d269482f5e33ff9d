"""Routes of the live view: `/api/v1/snapshot`, the page at `/` and its static files.

Like /metrics, every handler returns bytes rendered on the collect thread (`Published.extra`)
or read once at start (static files): serving the page costs a memory copy, never a render.
Static files are a fixed table, so no request path ever reaches the file system.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from podgpu.files import packaged
from podgpu.http.app import App, Request, Response
from podgpu.http.publish import Published, Publisher
from podgpu.sinks.live import JSON_CONTENT_TYPE, PAGE_KEY, SNAPSHOT_KEY

UPLOT_VERSION = "1.6.32"
STATIC_TYPES = MappingProxyType({
    "uPlot.iife.min.js": "text/javascript",
    "uPlot.min.css": "text/css",
    "uPlot.LICENSE": "text/plain",
    "live.js": "text/javascript",
    "live.css": "text/css",
})
# Only same-origin scripts, styles and fetches: the page makes no third-party request and
# nothing inline runs, whatever a pod name contains.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
            "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def load_static() -> dict[str, bytes]:
    return {name: packaged(__file__, "static", name) for name in STATIC_TYPES}


def page_response(pub: Published[Any] | None) -> Response | None:
    """The live page of the last cycle, or None when no live view is published (the caller
    then serves the plain landing page)."""
    page = pub.extra.get(PAGE_KEY) if pub is not None else None
    if page is None:
        return None
    return Response.of(200, page, "text/html; charset=utf-8",
                       ("Content-Security-Policy", PAGE_CSP), ("Cache-Control", "no-store"))


def add_live_routes(app: App, publisher: Publisher[Any]) -> None:
    static = load_static()

    def snapshot(_request: Request) -> Response:
        pub = publisher.current
        body = pub.extra.get(SNAPSHOT_KEY) if pub is not None else None
        if body is None:
            return Response.of(503, b'{"error": "no collection has completed yet"}',
                               "application/json; charset=utf-8")
        return Response.of(200, body, JSON_CONTENT_TYPE + "; charset=utf-8",
                           ("Cache-Control", "no-store"))

    def static_file(request: Request) -> Response:
        name = request.path[len("/static/"):]
        if name not in static:
            return Response.text(404, "404 Not Found\n")
        return Response.of(200, static[name], STATIC_TYPES[name], ("Cache-Control", "max-age=300"))

    app.add_get("/api/v1/snapshot", snapshot)
    app.add_get("/static/*", static_file)
