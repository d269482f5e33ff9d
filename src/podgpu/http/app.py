"""The listener's application layer: requests, responses and routes, independent of the transport.

podgpu serves a handful of GET routes whose answers are bytes rendered elsewhere (the collect
thread, the bridge's tick), so an application is a table of exact paths (plus one prefix for the
live page's static files), at most one access-control layer (http.auth) in front of every route,
hooks that add headers to every answer (the web config's `headers`), and start/stop hooks for
what follows the app's life (the web config watcher, SIGHUP). http.conn parses and writes the
bytes; nothing here knows about sockets.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any, NamedTuple

SERVER_NAME = "podgpu"
"""The Server header: the product only, never library or Python versions."""
NOSNIFF = (("X-Content-Type-Options", "nosniff"),)


class Request(NamedTuple):
    """One parsed request head. `headers` keys are lower case (last value wins); `path` is the
    percent-decoded path without the query; `remote` the peer's address."""

    method: str
    path: str
    headers: Mapping[str, str]
    remote: str = ""
    peercert: Any = None
    """The verified client certificate (`ssl.SSLObject.getpeercert()`), or None."""


class Response:
    """An answer; the app appends its Server header and every hook's headers to `headers` (a
    plain class, not a dataclass: made before the first answer, docs/design.md)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int = 200, body: bytes = b"",
                 headers: list[tuple[str, str]] | None = None) -> None:
        self.status = status
        self.body = body
        self.headers: list[tuple[str, str]] = [] if headers is None else headers

    @classmethod
    def of(cls, status: int, body: bytes | str, content_type: str,
           *headers: tuple[str, str]) -> Response:
        data = body.encode() if isinstance(body, str) else body
        return cls(status, data, [("Content-Type", content_type), *NOSNIFF, *headers])

    @classmethod
    def text(cls, status: int, text: str, *headers: tuple[str, str]) -> Response:
        return cls.of(status, text, "text/plain; charset=utf-8", *headers)

    def header(self, name: str) -> str | None:
        low = name.lower()
        return next((v for n, v in self.headers if n.lower() == low), None)


def phrase(status: int, default: str) -> str:
    """The reason phrase `http.HTTPStatus` gives `status`, or `default` for a code it lacks."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return default


def error(status: int) -> Response:
    """A short answer naming the status only: nothing of the request is echoed."""
    return Response.text(status, f"{status} {phrase(status, 'Error')}\n")


Handler = Callable[[Request], Response]
Middleware = Callable[[Request, Handler], Awaitable[Response]]
Hook = Callable[["App"], Awaitable[None]]


class App:
    """Routes (GET and HEAD), one optional middleware, response-header hooks, start/stop hooks."""

    def __init__(self) -> None:
        self._exact: dict[str, Handler] = {}
        self._prefix: list[tuple[str, Handler]] = []
        self.middleware: Middleware | None = None
        self.response_headers: list[Callable[[], Iterable[tuple[str, str]]]] = []
        self.on_startup: list[Hook] = []
        self.on_cleanup: list[Hook] = []

    def add_get(self, path: str, handler: Handler) -> None:
        """`path` exactly, or every path under it when it ends with `/` and `*` (e.g.
        `/static/*`: the handler reads the rest from `request.path`)."""
        if path.endswith("/*"):
            self._prefix.append((path[:-1], handler))
        else:
            self._exact[path] = handler

    def route(self, path: str) -> str | None:
        """The route pattern `path` matches (what access control exempts by), or None."""
        if path in self._exact:
            return path
        return next((p + "*" for p, _ in self._prefix if path.startswith(p)), None)

    def dispatch(self, request: Request) -> Response:
        """The route's answer; 404 for no route, 405 for a method other than GET and HEAD."""
        handler = self._exact.get(request.path) or next(
            (h for p, h in self._prefix if request.path.startswith(p)), None)
        if handler is None:
            return error(404)
        if request.method not in ("GET", "HEAD"):
            resp = error(405)
            resp.headers.append(("Allow", "GET, HEAD"))
            return resp
        return handler(request)

    def finish(self, resp: Response) -> Response:
        """Add the Server header and every hook's headers."""
        resp.headers.append(("Server", SERVER_NAME))
        for hook in self.response_headers:
            resp.headers.extend(hook())
        return resp

    async def startup(self) -> None:
        for hook in self.on_startup:
            await hook(self)

    async def cleanup(self) -> None:
        for hook in reversed(self.on_cleanup):
            await hook(self)


def decode_path(target: bytes) -> str | None:
    """The percent-decoded path of a request target (origin form), or None when malformed."""
    raw = target.split(b"?", 1)[0]
    if not raw.startswith(b"/"):
        return None
    try:
        return urllib.parse.unquote(raw.decode("ascii"), errors="strict")
    except UnicodeError:
        return None
