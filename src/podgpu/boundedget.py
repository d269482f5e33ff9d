"""One bounded HTTP GET for the peers podgpu reads as a client (the bridge's scrape targets,
`podgpu top`'s nodes): a peer can make it fail, never make it hang or grow.

- **One deadline for the whole request** (connect, headers, body): a watchdog shuts the socket
  down when it passes, which wakes a read blocked on it. A socket timeout alone bounds each read,
  so a peer trickling one byte a second would hold the reader forever. (Name resolution is not
  covered; the peers are addresses on the node or names the user typed.)
- **A size cap after decompression**: gzip is inflated in steps and never past the cap (a 4.7 MB
  gzip bomb costs the cap, not 8.6 GB); the compressed bytes and Content-Length are held to the
  cap too.
- **No redirects**: a 3xx is an error naming its Location, never followed, so a peer cannot send
  the client to another port, host or scheme.
- Peer-supplied text in errors (reason phrase, Location) is escaped and capped.

stdlib only (http.client), so `serve` and the bridge need no HTTP library for this.

Decision record: docs/decisions/0015-bounded-outbound-clients.md.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.parse
import zlib
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass

MAX_REASON = 120
"""Characters of a peer-supplied string kept in an error."""
CHUNK = 64 * 1024


class GetError(Exception):
    """The GET failed; the message is one line, safe to log and show."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    """One of the statuses the caller asked for (200 unless it asked for more)."""
    body: bytes
    """Decompressed, at most the cap."""
    content_type: str
    charset: str | None


def printable(text: object, limit: int = MAX_REASON) -> str:
    """A peer-supplied string for an error message: non-printable characters escaped, capped."""
    s = str(text)
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s[:limit])
    return out + ("…" if len(s) > limit else "")


StartTimer = Callable[[float, Callable[[], None]], Callable[[], None]]
"""Calls the function after that many seconds; returns what cancels the call."""


def thread_timer(seconds: float, fire: Callable[[], None]) -> Callable[[], None]:
    """The deadline's timer: a daemon `threading.Timer`."""
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer.cancel


class _Watchdog:
    """Shuts a socket down when the deadline passes."""

    def __init__(self, seconds: float, start_timer: StartTimer) -> None:
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._cancel = start_timer(seconds, self._fire)

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._sock = sock
            if self.expired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            # the plain socket's shutdown, also under TLS: OpenSSL then reads EOF
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._cancel()


def get(url: str, *, timeout: float, max_bytes: int, headers: Mapping[str, str] | None = None,
        context: ssl.SSLContext | None = None, statuses: Container[int] = (200,),
        start_timer: StartTimer = thread_timer) -> Answer:
    """GET `url` (http or https, with its ?query; userinfo is ignored: pass an Authorization
    header) within `timeout` seconds in all and `max_bytes` of body after decompression.
    GetError says why not. An answer whose status is in `statuses` is read and returned (an
    API's error answers carry their reason in the body); a 3xx never is. `start_timer` runs the
    deadline (tests pass one they fire by hand)."""
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "", parts.port
    if parts.scheme == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(
            host, port, timeout=timeout, context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    hdrs = {"Host": parts.netloc.rpartition("@")[2], **(headers or {})}
    dog = _Watchdog(timeout, start_timer)
    error = ""
    try:
        conn.connect()
        dog.watch(conn.sock)
        conn.request("GET", path, headers=hdrs)
        resp = conn.getresponse()
        body = _body(resp, max_bytes, statuses)
        if not dog.expired:  # the shutdown can look like the clean end of a short answer
            return Answer(resp.status, body, resp.getheader("Content-Type") or "",
                          resp.headers.get_content_charset())
        del body
    except GetError as exc:
        error = str(exc)
    except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, reset, TLS, ...
        error = printable(getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
    finally:
        dog.cancel()
        conn.close()
    # Raised here, outside the handlers, so the error holds no traceback of the read (whose
    # frames hold up to `max_bytes` of body) and memory is returned at once, not by the GC.
    late = dog.expired or error == "timed out"  # a socket timeout is this deadline too
    raise GetError(f"no complete answer within {timeout:g} s" if late else error)


def _body(resp: http.client.HTTPResponse, limit: int, statuses: Container[int]) -> bytes:
    status = resp.status
    if 300 <= status < 400:
        where = printable(resp.getheader("Location") or "nowhere")
        raise GetError(f"HTTP {status} redirect to {where} not followed (use that URL instead)")
    if status not in statuses:
        raise GetError(f"HTTP {status} {printable(resp.reason)}".rstrip())
    length = resp.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise GetError(f"answer of {int(length)} bytes is over the {limit}-byte limit")
    encoding = (resp.getheader("Content-Encoding") or "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise GetError(f"unsupported Content-Encoding {printable(encoding)}")
    inflate = zlib.decompressobj(wbits=31) if encoding in ("gzip", "x-gzip") else None
    body = bytearray()
    raw = 0
    while chunk := resp.read1(CHUNK):
        raw += len(chunk)
        if raw > limit:
            raise GetError(f"answer over the {limit}-byte limit")
        if inflate is None:
            body += chunk
            continue
        try:
            data = chunk
            while data and not inflate.eof:
                body += inflate.decompress(data, limit - len(body) + 1)
                if len(body) > limit:
                    raise GetError(f"answer over the {limit}-byte limit after gzip decompression")
                data = inflate.unconsumed_tail
        except zlib.error as exc:
            raise GetError(f"undecodable gzip answer: {exc}") from None
    if inflate is not None and not inflate.eof:
        raise GetError("undecodable gzip answer: truncated")
    return bytes(body)
